"""The fault matrix: break one part of a running embedded stack during a mixed load, then prove
that nothing was lost or duplicated and no workflow was left running.

    .venv/bin/python bench/faults.py [--faults worker_sigkill,postgres_restart,...]
                                     [--window SECONDS] [--json PATH]

Every part is a real process (bench/stack.py). For each fault, in turn, on a tenant of its own:
seed five documents; start the load (two clients asking, one ingesting a new document at a time,
one conversation; bench/load.py); inject the fault (some wait for a moment: a process killed while
an answer is inside its retrieval); keep it for `--window` seconds; heal it; stop the load and let
every request finish. Then count, from Postgres: documents the load was told
are ingested but are not active, active documents without chunks, answered turns not stored, and
anything stored twice; and, at the end (when the index worker has let go of the embedded index),
chunks missing from the index and points with no active chunk behind them. Prints the table
fault | requests | failed | degraded | lost | duplicated | left running, with the degraded requests
by kind (the fallback each took, bench/load.degradation_kinds), and exits 1 if a request failed or
anything was lost, duplicated or left running.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from temporalio.api.enums.v1 import EventType  # noqa: E402
from temporalio.client import Client  # noqa: E402
from temporalio.service import RPCError  # noqa: E402

from bench import rollout, scaleout  # noqa: E402
from bench.load import (  # noqa: E402
    MixedLoad,
    Outcome,
    answer_workflow_for,
    format_kinds,
    latency_summary,
    running_workflows,
    verify_index,
    verify_postgres,
)
from bench.stack import ProcessStack, quiet_runtime, started  # noqa: E402
from ragkit.temporal import connect  # noqa: E402

EMBEDDING_DIMENSION = 384  # the packaged MiniLM the index worker loads
SLOW_SECONDS = 60.0  # a request slower than this is named in the row, with what ran again


# Waits, with the load running, for the moment a fault must strike; returns the workflows that
# are then inside the step the fault is aimed at.
Moment = Callable[[MixedLoad, Client], Awaitable[list[str]]]


@dataclass(frozen=True)
class Fault:
    what: str
    inject: Callable[[ProcessStack], object]
    heal: Callable[[ProcessStack], object]
    # An outage lasts the window before it heals; a restart heals at once (what takes time is
    # the restart itself) and the load goes on through the window.
    outage: bool = True
    # Before the fault: what makes the step it is aimed at last (a failpoint delay); then the
    # moment to strike. None: at once.
    prepare: Callable[[ProcessStack], object] | None = None
    moment: Moment | None = None


def _kill_workers(stack: ProcessStack) -> None:
    stack.kill_worker("orchestrator")
    stack.kill_worker("index")


def _restart_workers(stack: ProcessStack) -> None:
    stack.start_worker("orchestrator")
    stack.start_worker("index")


def _failpoint(points: dict[str, dict[str, object]]) -> Callable[[ProcessStack], None]:
    return lambda stack: stack.set_failpoints(points)


def _clear(stack: ProcessStack) -> None:
    stack.set_failpoints({})


def _restart_orchestrator(stack: ProcessStack) -> None:
    stack.start_worker("orchestrator")
    _clear(stack)


# How long the live vector search (`search_vectors`, a local activity with a 2 s start-to-close)
# takes while the orchestrator is to be killed inside it: long enough to be caught in, short
# enough to succeed when it runs again.
RETRIEVAL_DELAY = 1.2


async def _event_types(client: Client, workflow_id: str) -> list[EventType.ValueType]:
    handle = client.get_workflow_handle(workflow_id)
    return [e.event_type async for e in handle.fetch_history_events()]


async def answers_in_retrieval(load: MixedLoad, client: Client, wait: float = 60.0) -> list[str]:
    """Wait until answers of the load are inside their retrieval, and return their workflow ids.
    Inside: the answer's first workflow task has started and not completed (retrieval and
    hydration are local activities, run within it; generation, the first remote step, ends it),
    and the answer was asked less than RETRIEVAL_DELAY - 0.2 s ago, so its vector search still
    has that long to run. None within `wait`: [] (the fault strikes anyway; the row says so)."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        now = time.monotonic()
        inside: list[str] = []
        for trace_id, asked in list(load.in_flight.items()):
            if now - asked >= RETRIEVAL_DELAY - 0.2:
                continue
            workflow_id = answer_workflow_for(load.tenant, trace_id)
            try:
                events = await _event_types(client, workflow_id)
            except RPCError:  # not started yet
                continue
            if (
                events
                and events[-1] == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED
                and EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED not in events
            ):
                inside.append(workflow_id)
        if inside:
            return inside
        await asyncio.sleep(0.05)
    return []


async def retried_activities(client: Client, workflow_id: str) -> list[str]:
    """The activities of a workflow that ran more than once, with why the attempt before failed
    (a start-to-close timeout after a worker died, a dropped connection)."""
    names: dict[int, str] = {}
    found: list[str] = []
    async for event in client.get_workflow_handle(workflow_id).fetch_history_events():
        if event.HasField("activity_task_scheduled_event_attributes"):
            names[event.event_id] = (
                event.activity_task_scheduled_event_attributes.activity_type.name
            )
        elif event.HasField("activity_task_started_event_attributes"):
            started = event.activity_task_started_event_attributes
            if started.attempt > 1:
                found.append(
                    f"{names.get(started.scheduled_event_id, '?')} attempt {started.attempt} "
                    f"after {started.last_failure.message[:80]!r}"
                )
    return found


async def slowest(client: Client, outcomes: list[Outcome]) -> list[str]:
    """The slowest request, when it took over SLOW_SECONDS, and what in it ran again."""
    done = [o for o in outcomes if o.status != "failed" and o.workflow_id]
    worst = max(done, key=lambda o: o.seconds, default=None)
    if worst is None or worst.seconds < SLOW_SECONDS:
        return []
    try:
        again = await retried_activities(client, worst.workflow_id)
    except RPCError as exc:
        again = [f"history unavailable: {exc}"]
    return [
        f"slowest: {worst.kind} {worst.seconds:.0f} s ({worst.workflow_id}): "
        + ("; ".join(again) or "no activity ran twice")
    ]


async def retried_tasks(client: Client, workflow_ids: list[str]) -> int:
    """How many of these workflows had a workflow task time out (and run again elsewhere)."""
    timed_out = EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT
    return sum([timed_out in await _event_types(client, w) for w in workflow_ids])


FAULTS: dict[str, Fault] = {
    "worker_sigkill": Fault(
        "orchestrator and index workers SIGKILLed, then started again",
        _kill_workers,
        _restart_workers,
        outage=False,
    ),
    "temporal_restart": Fault(
        "Temporal dev server stopped, then started on the same SQLite file",
        ProcessStack.restart_temporal,
        lambda s: None,
        outage=False,
    ),
    "postgres_restart": Fault(
        "Postgres stopped (fast shutdown), then started again",
        ProcessStack.restart_postgres,
        lambda s: None,
        outage=False,
    ),
    "index_unavailable": Fault(
        "every vector index call fails (connection refused)",
        _failpoint({"index": {"error": "vector index unavailable (connection refused)"}}),
        _clear,
    ),
    "llm_gone": Fault(
        "the LLM worker SIGKILLed; started again after the window (loads the model)",
        lambda s: s.kill_worker("llm"),
        lambda s: s.start_worker("llm"),
    ),
    "embedding_failing": Fault(
        "the embedding model raises on every call",
        _failpoint({"embedding": {"error": "embedding model failing"}}),
        _clear,
    ),
    "disk_full": Fault(
        "every write to the index path fails with ENOSPC",
        _failpoint({"index_write": {"error": "disk_full"}}),
        _clear,
    ),
    "slow_activity": Fault(
        "the live vector search (search_vectors) takes 4 s, past its 2 s start-to-close: "
        "three tries, then keyword search alone",
        _failpoint({"activity:search_vectors": {"delay_seconds": 4}}),
        _clear,
    ),
    "orchestrator_sigkill": Fault(
        f"the orchestrator SIGKILLed while answers are inside their retrieval (search_vectors "
        f"delayed {RETRIEVAL_DELAY} s, under its 2 s timeout), then started again",
        lambda s: s.kill_worker("orchestrator"),
        _restart_orchestrator,
        outage=False,
        prepare=_failpoint({"activity:search_vectors": {"delay_seconds": RETRIEVAL_DELAY}}),
        moment=answers_in_retrieval,
    ),
}
# Not a fault of FAULTS: a second orchestrator, LLM worker and gateway join, then one of each is
# SIGKILLed (bench/scaleout.py). Last in the matrix: it loads a second model.
SCALE_OUT = "scale_out"
SCALE_OUT_WHAT = (
    "two orchestrator workers, two LLM workers and two gateways; one of each SIGKILLed mid-load "
    "(throughput of one of each against two in the row)"
)
# Not faults of FAULTS either: build B deployed under load (bench/rollout.py). `deploy` runs
# `durable-rag deploy`; `restart_deploy` is the figure of before: B's workers started in A's place.
# Each leaves the stack on B's code: they run last, `restart_deploy` (not in the default matrix)
# after `deploy`.
DEPLOY, RESTART_DEPLOY = "deploy", "restart_deploy"
DEPLOY_WHAT = (
    f"build B (a new first command in the answer and conversation workflows) deployed under the "
    f"load: `durable-rag deploy --ramp {rollout.RAMP} --kinds orchestrator,index` from B's "
    "code; A drained, A's workers stopped, the embedded index's one worker replaced in place"
)
RESTART_WHAT = (
    "build B's workers started in place of A's (a restart onto new code: B current, A's open "
    "runs moved onto it), the deploy before versioned workers"
)
ROLLOUTS = (DEPLOY, RESTART_DEPLOY)
# The kinds the rows deploy. The LLM worker stays on A: its activities replay nothing. Beside a
# serving engine on this 2-CPU machine, a second vLLM starved on the engine's one CPU: after
# 6 minutes its worker process had not finished importing.
DEPLOYED = ("orchestrator", "index")
LAST = (SCALE_OUT, *ROLLOUTS)  # in this order, after the faults of FAULTS
# The subset CI runs (tests/bench/test_reliability.py): one of each kind of fault (a process
# crash, a dependency restart, a failing write, a timeout), none that reloads the model.
FAST = ["worker_sigkill", "postgres_restart", "disk_full", "slow_activity"]


@dataclass
class Row:
    fault: str
    requests: int = 0
    failed: int = 0
    degraded: int = 0
    lost: int = 0
    duplicated: int = 0
    left_running: int = 0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    fault_s: float = 0.0  # from the fault to healed (a restart: how long it took)
    ratio: float | None = None  # scale_out: throughput with two of each over one of each
    spread: dict[str, float] = field(default_factory=dict)  # scale_out: work per process
    seconds: float = 0.0
    degradations: dict[str, int] = field(default_factory=dict)  # degraded requests by kind
    task_failures: int = 0  # deploy rows: workflow task failures in the row's runs
    nondeterminism: int = 0  # of those, non-determinism errors
    builds: dict[str, int] = field(default_factory=dict)  # deploy rows: runs closed per build
    moved: int = 0  # deploy rows: conversations continued as new onto B
    drained_s: float = 0.0  # deploy: from B current until A had drained
    struck: int = 0  # workflows inside the step the fault was aimed at when it struck
    retried: int = 0  # of those, how many ran a timed-out workflow task again
    details: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (
            self.failed
            or self.lost
            or self.duplicated
            or self.left_running
            or self.task_failures
            or self.nondeterminism
        )


async def run_fault(
    stack: ProcessStack, name: str, window: float, chunks: dict[str, set[str]]
) -> Row:
    fault = FAULTS[name]
    tenant = f"fault-{name.replace('_', '-')}"
    began = time.monotonic()
    client = await connect(stack.settings, quiet_runtime())
    load = MixedLoad(client, stack.settings, tenant, stack.work / "corpus" / tenant)
    await load.seed()
    stop = asyncio.Event()
    running = asyncio.create_task(load.run(stop))
    await asyncio.sleep(3)  # the load is under way when the fault strikes
    if fault.prepare is not None:
        await asyncio.to_thread(fault.prepare, stack)
    inside = await fault.moment(load, client) if fault.moment is not None else []
    struck = time.monotonic()
    await asyncio.to_thread(fault.inject, stack)
    if fault.outage:
        await asyncio.sleep(window)
    await asyncio.to_thread(fault.heal, stack)
    fault_s = time.monotonic() - struck
    # The load goes on after the fault healed: what it left behind (stale connections,
    # retries in backoff) meets new requests.
    await asyncio.sleep(3 if fault.outage else window)
    stop.set()
    await running
    retried = await retried_tasks(client, inside)
    aimed = [
        f"struck inside {len(inside)} answer(s) ({', '.join(inside)}); {retried} ran their "
        "workflow task again after it timed out"
    ] if fault.moment is not None else []  # fmt: skip
    row = await checked(stack, client, name, tenant, load, chunks, aimed)
    row.fault_s, row.seconds = fault_s, time.monotonic() - began
    row.struck, row.retried = len(inside), retried
    return row


async def checked(
    stack: ProcessStack,
    client: Client,
    name: str,
    tenant: str,
    load: MixedLoad,
    chunks: dict[str, set[str]],
    notes: list[str],
) -> Row:
    """The row of a fault whose load has stopped: what Postgres and Temporal say of it."""
    stored, chunks[tenant] = await asyncio.to_thread(
        verify_postgres, stack.settings, tenant, load.ledger
    )
    still_open = await running_workflows(client)
    ledger = load.ledger
    slow = await slowest(client, ledger.outcomes)
    p50, p99 = latency_summary(ledger.outcomes)
    failures = [f"{o.kind}: {o.detail}" for o in ledger.outcomes if o.status == "failed"]
    why: dict[str, str] = {}
    for o in ledger.outcomes:
        for kind, message in o.degradations.items():
            why.setdefault(kind, message)
    return Row(
        fault=name,
        requests=ledger.count(),
        failed=ledger.count("failed"),
        degraded=ledger.count("degraded"),
        lost=stored.lost,
        duplicated=stored.duplicated,
        left_running=len(still_open),
        p50_ms=p50,
        p99_ms=p99,
        degradations=ledger.degradations(),
        details=notes
        + stored.details
        + failures[:3]
        + [f"open: {w}" for w in still_open[:3]]
        + [f"{kind}, first: {message[:160]}" for kind, message in why.items()]
        + slow,
    )


async def run_scale_out(
    stack: ProcessStack,
    window: float,
    chunks: dict[str, set[str]],
    kinds: tuple[str, ...] = scaleout.SCALED,
) -> Row:
    """Two of each of `kinds` and two gateways, one of each SIGKILLed mid-load (bench/
    scaleout.py). The throughput of one of each against two, each over max(window, 30) s, and
    the work each process did go in the row."""
    tenant = "fault-scale-out"
    began = time.monotonic()
    client = await connect(stack.settings, quiet_runtime())
    key = await asyncio.to_thread(scaleout.api_key, stack, tenant)
    first = await asyncio.to_thread(stack.start_gateway, 1)
    load = scaleout.GatewayLoad(
        client, stack.settings, tenant, stack.work / "corpus" / tenant, key, [first]
    )
    try:
        await load.seed()
        stop = asyncio.Event()
        running = asyncio.create_task(load.run(stop))
        measured = await scaleout.scale_out(stack, load, max(window, 30.0), kinds)
        struck = time.monotonic()
        await asyncio.to_thread(scaleout.kill_one_of_each, stack, kinds)
        await asyncio.sleep(2)  # a load balancer's health check takes the dead gateway out
        load.gateways = load.gateways[1:]
        await asyncio.sleep(window)
        fault_s = time.monotonic() - struck
        stop.set()
        await running
        measured.failovers = load.failovers
    finally:
        await load.close()
    row = await checked(stack, client, SCALE_OUT, tenant, load, chunks, measured.lines())
    row.fault_s, row.seconds = fault_s, time.monotonic() - began
    row.ratio, row.spread = measured.ratio, measured.spread
    await asyncio.to_thread(scaleout.restore_one_of_each, stack, kinds)
    return row


async def run_rollout(
    stack: ProcessStack,
    name: str,
    window: float,
    chunks: dict[str, set[str]],
    kinds: tuple[str, ...] = DEPLOYED,
) -> Row:
    """Build B deployed (`deploy`) or restarted onto (`restart_deploy`) under the mixed load, on
    `kinds` (CI leaves the LLM worker on A: a second vLLM takes minutes to load on 2 CPUs)."""
    tenant = f"fault-{name.replace('_', '-')}"
    began, since = time.monotonic(), datetime.now(UTC)
    client = await connect(stack.settings, quiet_runtime())
    commands = 1 + ROLLOUTS.index(name)  # deploy: one new command; restart_deploy: two
    root, build_b = await asyncio.to_thread(rollout.build_b, stack, name, commands)
    done = rollout.Rollout(await rollout.current_build(client, stack), build_b, name)
    load = MixedLoad(client, stack.settings, tenant, stack.work / "corpus" / tenant)
    await load.seed()
    stop = asyncio.Event()
    running = asyncio.create_task(load.run(stop))
    await asyncio.sleep(3)  # the load is under way on build A
    struck = time.monotonic()
    switched = datetime.now(UTC)
    if name == DEPLOY:
        await rollout.deploy(stack, client, root, done, kinds)
    else:
        await asyncio.to_thread(rollout.restart, stack, root, kinds)
        done.current_s = time.monotonic() - struck
    fault_s = time.monotonic() - struck
    await asyncio.sleep(window)  # the load goes on, on B
    stop.set()
    await running
    row = await checked(stack, client, name, tenant, load, chunks, [])
    await rollout.account(client, stack, done, since, switched)
    row.details = done.lines() + row.details
    row.task_failures, row.nondeterminism = done.task_failures, done.nondeterminism
    row.builds, row.moved, row.drained_s = done.runs, done.moved, done.drained_s
    if done.exit_code:
        row.failed += 1  # the deploy itself
    if name == RESTART_DEPLOY:
        ended = await rollout.terminate_stuck(client, since)
        row.details.append(f"terminated {ended} stuck run(s) after counting")
    row.fault_s, row.seconds = fault_s, time.monotonic() - began
    return row


async def run_matrix(
    stack: ProcessStack,
    names: list[str],
    window: float,
    scaled: tuple[str, ...] = scaleout.SCALED,
    deployed: tuple[str, ...] = DEPLOYED,
) -> list[Row]:
    """Each fault in turn on the running stack (scale_out and the deploy rows last: they leave
    more workers, or another build, behind); then the index check for all of them. `scaled`:
    the kinds of worker scale_out runs two of; `deployed`: the kinds a deploy row deploys (CI
    leaves the LLM worker at one, on build A)."""
    rows: list[Row] = []
    chunks: dict[str, set[str]] = {}
    names = [n for n in names if n not in LAST] + [n for n in LAST if n in names]
    for name in names:
        if name == SCALE_OUT:
            rows.append(await run_scale_out(stack, window, chunks, scaled))
        elif name in ROLLOUTS:
            rows.append(await run_rollout(stack, name, window, chunks, deployed))
        else:
            rows.append(await run_fault(stack, name, window, chunks))
        print(format_table(rows[-1:]), flush=True)
    # The embedded index is open in the index worker: check it once, with the worker stopped.
    await asyncio.to_thread(stack.stop_worker, "index")
    try:
        found = await asyncio.to_thread(verify_index, stack.settings, EMBEDDING_DIMENSION, chunks)
    finally:
        await asyncio.to_thread(stack.start_worker, "index")
    for row in rows:
        index = found[f"fault-{row.fault.replace('_', '-')}"]
        row.lost += index.lost
        row.duplicated += index.duplicated
        row.details += index.details
    return rows


def what(name: str) -> str:
    return {SCALE_OUT: SCALE_OUT_WHAT, DEPLOY: DEPLOY_WHAT, RESTART_DEPLOY: RESTART_WHAT}.get(
        name
    ) or FAULTS[name].what


def format_table(rows: list[Row]) -> str:
    lines = [
        f"{'fault':<20} {'requests':>8} {'failed':>6} {'degraded':>8} {'lost':>5} "
        f"{'duplicated':>10} {'left running':>12} {'P50 ms':>8} {'P99 ms':>8} {'fault s':>7}"
        f"  {'seconds':>7}  degraded by kind"
    ]
    for r in rows:
        lines.append(
            f"{r.fault:<20} {r.requests:>8} {r.failed:>6} {r.degraded:>8} {r.lost:>5} "
            f"{r.duplicated:>10} {r.left_running:>12} {r.p50_ms:>8.0f} {r.p99_ms:>8.0f} "
            f"{r.fault_s:>7.1f}  {r.seconds:>7.0f}  {format_kinds(r.degradations)}"
        )
        lines += [f"    {d}" for d in r.details]
    return "\n".join(lines)


async def main_async(names: list[str], window: float, json_path: Path | None) -> int:
    stack = await started("faults")
    try:
        rows = await run_matrix(stack, names, window)
    finally:
        await asyncio.to_thread(stack.close)
    print(f"\nFault matrix: {len(rows)} faults, {window:.0f} s each, {os.cpu_count()} CPUs")
    for name in names:
        print(f"  {name}: {what(name)}")
    print(format_table(rows))
    if json_path:
        json_path.write_text(
            json.dumps({"name": "faults", "window_s": window, "rows": [asdict(r) for r in rows]})
        )
    return 0 if all(r.clean for r in rows) else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--faults",
        default=",".join([*FAULTS, SCALE_OUT, DEPLOY]),
        help=f"comma-separated; or 'fast'; {RESTART_DEPLOY} (not in the default) is the figure "
        "of a deploy before versioned workers",
    )
    parser.add_argument("--window", type=float, default=15.0, help="seconds each fault lasts")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    names = FAST if args.faults == "fast" else [n.strip() for n in args.faults.split(",")]
    known = [*FAULTS, *LAST]
    unknown = [n for n in names if n not in known]
    if unknown:
        parser.error(f"unknown fault(s) {unknown}; known: {', '.join(known)}")
    sys.exit(asyncio.run(main_async(names, args.window, args.json)))


if __name__ == "__main__":
    main()
