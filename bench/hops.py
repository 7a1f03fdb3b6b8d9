"""What an answer's history says, in hops and counts (bench/serving.py's per-hop tables): the
start, the local steps, the workflow tasks and their timeouts, the dispatch of `generate`, and
what the workflow code costs when a recorded history is replayed."""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from temporalio.api.enums.v1 import TaskQueueKind, TimeoutType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner

from bench.load import pct
from ragkit.codec import open_in_place
from workers.common import worker_interceptors, workflow_runner
from workers.orchestrator import LIVE_WORKFLOWS


def event_seconds(event: HistoryEvent) -> float:
    return event.event_time.seconds + event.event_time.nanos / 1e9


@dataclass
class Hops:
    """One workflow's history read as hops, in ms, plus counts."""

    ms: dict[str, float] = field(default_factory=dict)
    remote_before_generate: int = 0
    remote_activities: list[str] = field(default_factory=list)
    local_activities: list[str] = field(default_factory=list)
    workflow_tasks: int = 0
    generate_started: float = float("nan")  # wall clock, server's event time
    # Workflow tasks that timed out (lost, or held past the task timeout), which ones and how,
    # e.g. "task 2 schedule_to_start (sticky)": a timeout costs its answer the task timeout, so
    # where it happens says what to change.
    task_timeout_kinds: list[str] = field(default_factory=list)
    task_failures: int = 0

    @property
    def task_timeouts(self) -> int:
        return len(self.task_timeout_kinds)


def kinds_note(counted: dict[str, int]) -> str:
    return " (" + ", ".join(f"{k}: {n}" for k, n in counted.items()) + ")" if counted else ""


def _queue_kind(kind: TaskQueueKind.ValueType) -> str:
    return TaskQueueKind.Name(kind).removeprefix("TASK_QUEUE_KIND_").lower()


def read_hops(events: list[HistoryEvent], called_at: float, returned_at: float) -> Hops:
    """Hops of an answer or search workflow: the start (client call to the first workflow task
    started), each workflow task's dispatch and run (a run includes its local activities),
    `generate`'s dispatch and run, and the result's way back to the caller."""
    hops = Hops()
    scheduled: dict[int, tuple[str, float]] = {}  # activity scheduled event id -> (type, at)
    wft_scheduled = 0.0
    wft_started = 0.0
    wft_queue = ""  # the kind of task queue the latest workflow task was scheduled on
    generate_seen = False
    for event in events:
        at = event_seconds(event)
        if event.HasField("workflow_task_scheduled_event_attributes"):
            wft_scheduled = at
            wft_queue = _queue_kind(event.workflow_task_scheduled_event_attributes.task_queue.kind)
        elif event.HasField("workflow_task_started_event_attributes"):
            hops.workflow_tasks += 1
            n = hops.workflow_tasks
            if n == 1:
                hops.ms["start: client call -> workflow task 1 started"] = (at - called_at) * 1000
                hops.ms["  of which workflow task 1 dispatch"] = (at - wft_scheduled) * 1000
            else:
                hops.ms[f"workflow task {n} dispatch"] = (at - wft_scheduled) * 1000
            wft_started = at
        elif event.HasField("workflow_task_timed_out_event_attributes"):
            timeout = event.workflow_task_timed_out_event_attributes.timeout_type
            # A task that never started is the next one; one that ran over, the last started.
            never_started = timeout == TimeoutType.TIMEOUT_TYPE_SCHEDULE_TO_START
            n = hops.workflow_tasks + 1 if never_started else hops.workflow_tasks
            kind = TimeoutType.Name(timeout).removeprefix("TIMEOUT_TYPE_").lower()
            hops.task_timeout_kinds.append(f"task {n} {kind} ({wft_queue})")
        elif event.HasField("workflow_task_failed_event_attributes"):
            hops.task_failures += 1
        elif event.HasField("workflow_task_completed_event_attributes"):
            key = f"workflow task {hops.workflow_tasks} run"
            hops.ms[key] = hops.ms.get(key, 0.0) + (at - wft_started) * 1000
        elif event.HasField("marker_recorded_event_attributes"):
            marker = event.marker_recorded_event_attributes
            if marker.marker_name != "core_local_activity":
                continue  # a patch (workflow.patched) or another SDK marker
            data = marker.details.get("data")
            name = "?"
            if data is not None and data.payloads:
                with contextlib.suppress(ValueError, KeyError):
                    name = json.loads(data.payloads[0].data)["activity_type"]
            hops.local_activities.append(name)
        elif event.HasField("activity_task_scheduled_event_attributes"):
            kind = event.activity_task_scheduled_event_attributes.activity_type.name
            scheduled[event.event_id] = (kind, at)
            hops.remote_activities.append(kind)
            if kind == "generate" and not generate_seen:
                generate_seen = True
                hops.remote_before_generate = len(hops.remote_activities) - 1
                hops.ms["first task started -> generate scheduled"] = (
                    at - _first_started(events)
                ) * 1000
        elif event.HasField("activity_task_started_event_attributes"):
            attrs = event.activity_task_started_event_attributes
            kind, when = scheduled.get(attrs.scheduled_event_id, ("?", at))
            hops.ms[f"{kind} dispatch"] = (at - when) * 1000
            if kind == "generate" and math.isnan(hops.generate_started):
                hops.generate_started = at
            scheduled[attrs.scheduled_event_id] = (kind, at)
        elif event.HasField("activity_task_completed_event_attributes"):
            done = event.activity_task_completed_event_attributes
            kind, when = scheduled.get(done.scheduled_event_id, ("?", at))
            hops.ms[f"{kind} run"] = (at - when) * 1000
        elif event.HasField("workflow_execution_completed_event_attributes"):
            hops.ms["result to caller"] = (returned_at - at) * 1000
    if not generate_seen:
        hops.remote_before_generate = len(hops.remote_activities)
    return hops


def _first_started(events: list[HistoryEvent]) -> float:
    for event in events:
        if event.HasField("workflow_task_started_event_attributes"):
            return event_seconds(event)
    return float("nan")


async def histories(
    client: Client, calls: list[tuple[str, float, float]], keep: list[WorkflowHistory] | None = None
) -> list[Hops]:
    """(workflow id, called at, returned at) -> hops, read after the timed part; the histories
    themselves go to `keep` when given, their payloads opened (replayed without a keyring)."""
    found: list[Hops] = []
    for workflow_id, called_at, returned_at in calls:
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        found.append(read_hops(list(history.events), called_at, returned_at))
        if keep is not None:
            open_in_place(history.events, client.data_converter.payload_codec)
            keep.append(history)
    return found


async def replay_cost(settings: Any, recorded: list[WorkflowHistory]) -> dict[str, list[float]]:
    """The workflow code's own CPU per answer: the recorded histories replayed (no server, no
    activities: their results come from the history) in the sandbox the workers run
    (workers.common.workflow_runner) and without one; rounds alternate. Per history, ms."""
    if not recorded:
        return {}
    found: dict[str, list[float]] = {"sandboxed": [], "unsandboxed": []}
    for name in ("sandboxed", "unsandboxed", "unsandboxed", "sandboxed"):
        runner = UnsandboxedWorkflowRunner() if name == "unsandboxed" else workflow_runner()
        replayer = Replayer(
            workflows=LIVE_WORKFLOWS,
            data_converter=pydantic_data_converter,
            interceptors=worker_interceptors(settings),
            workflow_runner=runner,
        )

        async def each() -> AsyncIterator[WorkflowHistory]:
            for history in recorded:
                yield history

        began = time.perf_counter()
        async with replayer.workflow_replay_iterator(each()) as results:
            async for result in results:
                if result.replay_failure is not None:
                    raise result.replay_failure
        found[name].append((time.perf_counter() - began) * 1000 / len(recorded))
    return found


def hop_rows(
    side: str, hops: list[Hops], steps: dict[str, list[float]], extra: dict[str, list[float]]
) -> list[dict[str, Any]]:
    """P50/P99 per hop over the requests, in the order the hops happen."""
    values: dict[str, list[float]] = {}
    for h in hops:
        for name, ms in h.ms.items():
            values.setdefault(name, []).append(ms)
    for name, ms_list in steps.items():
        values.setdefault(f"step {name} (timings_ms)", []).extend(ms_list)
    for name, ms_list in extra.items():
        values.setdefault(name, []).extend(ms_list)
    return [
        {"flow": side, "hop": name, "n": sum(not math.isnan(x) for x in v), "p50_ms": pct(v, 0.5),
         "p99_ms": pct(v, 0.99)}
        for name, v in values.items()
    ]  # fmt: skip


def dispatch_counts(hops: list[Hops]) -> dict[str, Any]:
    before = Counter(h.remote_before_generate for h in hops)
    return {
        "remote_before_generate": {str(k): v for k, v in sorted(before.items())},
        "remote_kinds": dict(Counter(k for h in hops for k in h.remote_activities)),
        "local_per_answer_p50": pct([float(len(h.local_activities)) for h in hops], 0.5),
        "local_kinds": dict(Counter(k for h in hops for k in h.local_activities)),
        "workflow_tasks_p50": pct([float(h.workflow_tasks) for h in hops], 0.5),
        "workflow_task_timeouts": sum(h.task_timeouts for h in hops),
        "workflow_task_timeout_kinds": dict(Counter(k for h in hops for k in h.task_timeout_kinds)),
        "workflow_task_failures": sum(h.task_failures for h in hops),
    }
