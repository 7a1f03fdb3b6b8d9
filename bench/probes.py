"""What bench/serving.py watches without changing what runs: the engine timed (when each request's
first text came out), the first NOTIFY of each stream, each workflow activation, and this
process's event loop lag."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Callable, Iterator
from typing import Any

import temporalio.bridge.worker
from temporalio.api.history.v1 import HistoryEvent

from bench.hops import event_seconds
from ragkit.llm.engine import GREEDY, Generation, Messages, VllmEngine
from ragkit.streaming import TokenEvent, TokenPublisher
from schemas.answer import (
    Sampling,
)


class TimedEngine:
    """The engine, noting (wall clock) when each request's first text came out of it: the start
    of the hop from the engine's first token to the SSE frame."""

    def __init__(self, engine: VllmEngine) -> None:
        self.engine = engine
        self.model_name = engine.model_name
        self.max_model_len = engine.max_model_len
        self.called: dict[str, float] = {}  # request id -> wall clock at the call
        self.first_text: dict[str, float] = {}  # request id -> wall clock at the first text

    def count_prompt_tokens(self, messages: Messages) -> int:
        return self.engine.count_prompt_tokens(messages)

    async def generate(
        self,
        messages: Messages,
        max_tokens: int,
        request_id: str,
        on_tokens: Callable[[int, str], None] | None = None,
        sampling: Sampling = GREEDY,
    ) -> Generation:
        self.called[request_id] = time.time()

        def noted(count: int, text: str) -> None:
            if text and request_id not in self.first_text:
                self.first_text[request_id] = time.time()
            if on_tokens is not None:
                on_tokens(count, text)

        return await self.engine.generate(messages, max_tokens, request_id, noted, sampling)

    def running_requests(self) -> int:
        return self.engine.running_requests()

    def close(self) -> None:
        self.engine.close()


class PublishClock:
    """When each token stream's first text was NOTIFYed: the generate activity's publisher in this
    process, wrapped (instrumentation only: it calls the original). Splits the hop from the
    engine's first token to the SSE frame into the activity's wake-up, the NOTIFY, and the way
    from Postgres through the gateway's LISTEN and the HTTP response to the client."""

    def __init__(self) -> None:
        self.first: list[tuple[float, float]] = []  # (publish called, NOTIFY done), wall clock
        self._seen: set[str] = set()

    def install(self) -> None:
        original = TokenPublisher.publish
        clock = self

        async def publish(publisher: TokenPublisher, event: TokenEvent) -> None:
            began = time.time()
            await original(publisher, event)
            if event.text and event.stream_id not in clock._seen:
                clock._seen.add(event.stream_id)
                clock.first.append((began, time.time()))

        setattr(TokenPublisher, "publish", publish)  # noqa: B010

    def between(self, after: float, before: float) -> tuple[float, float] | None:
        """The first publish of a stream within (after, before): one request at a time."""
        found = [p for p in self.first if after <= p[0] <= before]
        return min(found) if found else None


class ActivationClock:
    """When this process's workers got each workflow activation and activity task from the SDK's
    core, and handed back each completion: the bridge worker's poll and complete calls, wrapped
    (instrumentation only: they call the originals). Against the history's event times, row 1
    reads where workflow task 1 spends what its steps do not: the way from the server's start of
    the task to the first activation in Python, the workflow code of each activation, the
    hand-offs around each local activity, and from the last completion to the server's record
    of the task; then from generate's completion to the next activation."""

    CALLS = (
        "poll_workflow_activation",
        "complete_workflow_activation",
        "poll_activity_task",
        "complete_activity_task",
    )

    def __init__(self) -> None:
        self.seen: dict[str, list[tuple[float, str]]] = {}  # run id -> (wall clock, what)
        self._runs: dict[bytes, str] = {}  # an activity task's token -> its workflow's run id
        bridge = temporalio.bridge.worker.Worker
        self._originals = {name: getattr(bridge, name) for name in self.CALLS}

    def _note(self, run_id: str, what: str) -> None:
        self.seen.setdefault(run_id, []).append((time.time(), what))

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """The calls wrapped within, as they were after (row 1 only: the other rows run bare)."""
        bridge = temporalio.bridge.worker.Worker
        poll, complete, poll_task, complete_task = self._originals.values()
        clock = self

        async def polled(worker: Any) -> Any:
            activation = await poll(worker)
            clock._note(activation.run_id, "activation")
            return activation

        async def completed(worker: Any, completion: Any) -> None:
            clock._note(completion.run_id, "completion")
            await complete(worker, completion)

        async def task_polled(worker: Any) -> Any:
            task = await poll_task(worker)
            if task.HasField("start"):
                run_id = task.start.workflow_execution.run_id
                clock._runs[task.task_token] = run_id
                clock._note(run_id, "local started" if task.start.is_local else "remote started")
            return task

        async def task_completed(worker: Any, completion: Any) -> None:
            run_id = clock._runs.pop(completion.task_token, None)
            if run_id is not None:
                clock._note(run_id, "activity done")
            await complete_task(worker, completion)

        wrapped = (polled, completed, task_polled, task_completed)
        for name, call in zip(self.CALLS, wrapped, strict=True):
            setattr(bridge, name, call)
        try:
            yield
        finally:
            for name, call in self._originals.items():
                setattr(bridge, name, call)

    def hops(self, events: list[HistoryEvent]) -> dict[str, float]:
        """Workflow task 1 of one answer, from its history and what this clock saw of its run."""
        run_id = events[0].workflow_execution_started_event_attributes.original_execution_run_id
        seen = self.seen.get(run_id, [])
        remote = next((i for i, (_, what) in enumerate(seen) if what == "remote started"), None)
        started = [
            event_seconds(e) for e in events if e.HasField("workflow_task_started_event_attributes")
        ]
        done = [
            event_seconds(e)
            for e in events
            if e.HasField("workflow_task_completed_event_attributes")
        ]
        if remote is None or not started or not done or seen[0][1] != "activation":
            return {}
        task = seen[:remote]
        code = handoffs = 0.0
        for (at, what), (next_at, next_what) in itertools.pairwise(task):
            if what == "activation" and next_what == "completion":
                code += next_at - at
            elif (what, next_what) in (("completion", "local started"),
                                       ("activity done", "activation")):  # fmt: skip
                handoffs += next_at - at
        last = max(at for at, what in task if what == "completion")
        found = {
            "worker: task 1 started -> its first activation in Python": seen[0][0] - started[0],
            "worker: workflow code in task 1 (its activations, summed)": code,
            "worker: local activity hand-offs in task 1 (summed)": handoffs,
            "worker: task 1's last completion -> task completed (server)": done[0] - last,
        }
        after = seen[remote:]
        ended = next((i for i, (_, what) in enumerate(after) if what == "activity done"), None)
        if ended is not None and ended + 1 < len(after) and after[ended + 1][1] == "activation":
            found["worker: generate done -> the next activation in Python"] = (
                after[ended + 1][0] - after[ended][0]
            )
        return {name: seconds * 1000 for name, seconds in found.items()}


class LoopLag:
    """How late this process's event loop wakes a 5 ms sleep: what every hop in this process
    (gateway, workers, engine client) waits on when synchronous work holds the loop."""

    def __init__(self, every: float = 0.005) -> None:
        self.every = every
        self.samples: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            began = time.perf_counter()
            await asyncio.sleep(self.every)
            self.samples.append((time.perf_counter() - began - self.every) * 1000)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> list[float]:
        if self._task is not None:
            self._task.cancel()
        return self.samples
