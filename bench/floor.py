"""The floor of an answer's shape: what the Temporal SDK and server alone cost for it.

FloorWorkflow issues the commands an answer issues, in the same order, with steps that do nothing:
a local activity (the search: the query's embedding, vector and BM25 search), another (hydrate), a
regular activity on another task queue (generate on llm-<model>), then two local activities at once
(the cache entry and the cost row). Its workers are built as the live worker is (the policy
interceptor, activity metrics, the sandbox with our code passed through, the pydantic converter of
the client), so the time it takes is what no change to our own steps can remove; bench/serving.py
reports row 1 against it.

MinimalWorkflow is the fewest commands any answer of this design can issue: one local activity
(retrieval), then generate as a regular activity on another queue, then its result. Whatever is
merged or dropped of our steps, an answer cannot cost less than it. EmptyWorkflow, on the same
worker, is the floor of any workflow at all.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

STEP = timedelta(seconds=5)


@activity.defn(name="floor_step")
def step(n: int) -> int:
    """A local step: a sync activity in the worker's thread pool, as hydrate_hits is."""
    return n


@activity.defn(name="floor_generate")
async def generate(n: int) -> int:
    return n


@workflow.defn
class FloorWorkflow:
    @workflow.run
    async def run(self, llm_queue: str) -> int:
        await workflow.execute_local_activity(step, 1, start_to_close_timeout=STEP)
        await workflow.execute_local_activity(step, 2, start_to_close_timeout=STEP)
        await workflow.execute_activity(
            generate, 4, task_queue=llm_queue, start_to_close_timeout=STEP
        )
        await asyncio.gather(
            workflow.execute_local_activity(step, 5, start_to_close_timeout=STEP),
            workflow.execute_local_activity(step, 6, start_to_close_timeout=STEP),
        )
        return 6


@workflow.defn
class MinimalWorkflow:
    """Retrieval in one local activity, then generate on another queue: the least an answer with
    one remote hop can issue."""

    @workflow.run
    async def run(self, llm_queue: str) -> int:
        await workflow.execute_local_activity(step, 1, start_to_close_timeout=STEP)
        return await workflow.execute_activity(
            generate, 2, task_queue=llm_queue, start_to_close_timeout=STEP
        )


@workflow.defn
class EmptyWorkflow:
    """A workflow that does nothing: one workflow task, then its result. What any workflow,
    whatever its steps, costs on this server and SDK."""

    @workflow.run
    async def run(self) -> int:
        return 0


def command_shape(events: Iterable[HistoryEvent]) -> list[str]:
    """What a run asked of Temporal, in order: `task` per completed workflow task, `local` per
    local activity recorded, `remote:<type>` per activity scheduled. Patches and search
    attributes are left out: they ride on a task's completion and cost no round trip."""
    shape: list[str] = []
    for event in events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            shape.append("task")
        elif event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            if event.marker_recorded_event_attributes.marker_name == "core_local_activity":
                shape.append("local")
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            name = event.activity_task_scheduled_event_attributes.activity_type.name
            shape.append(f"remote:{name}")
    return shape


def floor_workers(
    client: Client,
    task_queue: str,
    llm_queue: str,
    interceptors: list[Any],
    executor: ThreadPoolExecutor,
) -> list[Worker]:
    """The floor's workflow worker and its 'LLM' worker, configured as the live ones are."""
    runner = SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules("workflows", "bench")
    )
    return [
        Worker(
            client,
            task_queue=task_queue,
            workflows=[FloorWorkflow, MinimalWorkflow, EmptyWorkflow],
            activities=[step],
            activity_executor=executor,
            interceptors=interceptors,
            workflow_runner=runner,
        ),
        Worker(client, task_queue=llm_queue, activities=[generate], interceptors=interceptors),
    ]
