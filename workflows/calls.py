"""The one way workflows call activities: the policy table supplies queue, timeouts and retries.

Each worker builds its `PolicyTable` from its settings and hands it to the workflows it runs
through `PolicyTableInterceptor` (an extern function of the worker, the way the SDK hands its own
metric meter to workflow code), so a process holds one immutable table and no module state.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError
from temporalio.exceptions import TimeoutError as ActivityTimeoutError
from temporalio.worker import Interceptor, WorkflowInboundInterceptor, WorkflowInterceptorClassInput

with workflow.unsafe.imports_passed_through():
    from ragkit import metrics, policies

In = TypeVar("In")
Out = TypeVar("Out")

# The extern function through which a worker's table reaches its workflows.
POLICY_TABLE = "durable_rag.policy_table"


class PolicyTableInterceptor(Interceptor):
    """Hands the worker's policy table to the workflows it runs (installed by every worker:
    workers/common.worker_interceptors)."""

    def __init__(self, table: policies.PolicyTable) -> None:
        self.table = table

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        table = self.table
        input.unsafe_extern_functions[POLICY_TABLE] = lambda: table
        return None


def policy_table() -> policies.PolicyTable:
    """The table of the worker running this workflow; the declared table where no worker gave
    one (the replayer, which schedules nothing, or a test's bare Worker on default queues)."""
    provide = workflow.extern_functions().get(POLICY_TABLE)
    return provide() if provide is not None else policies.PolicyTable.declared()


@overload
async def call(
    method: Callable[[Any, In], Awaitable[Out]],
    arg: In,
    *,
    summary: str,
    task_queue: str | None = None,
) -> Out: ...


@overload
async def call(
    method: Callable[[Any, In], Out],
    arg: In,
    *,
    summary: str,
    task_queue: str | None = None,
) -> Out: ...


async def call(
    method: Callable[[Any, In], Any],
    arg: In,
    *,
    summary: str,
    task_queue: str | None = None,
) -> Any:
    """Run an activity method with the policy its worker's table has for it (ragkit.policies).

    `task_queue` is for activities whose queue is chosen per call (an LLM model's queue).
    """
    table = policy_table()
    policy = table.policy_for(method.__name__)
    if policy.local:
        try:
            return await workflow.execute_local_activity_method(
                method,
                arg,
                start_to_close_timeout=policy.start_to_close,
                schedule_to_close_timeout=policy.schedule_to_close,
                retry_policy=policy.retry,
                summary=summary,
            )
        except (ApplicationError, ActivityTimeoutError) as err:
            # The SDK raises a local activity's own error bare, where a remote one's comes as
            # ActivityError. Every fallback catches ActivityError: give both the same shape, or a
            # failed local step escapes its fallback and fails the flow (found by bench/faults.py
            # postgres_restart: store_answer, whose fallback is to skip caching).
            raise ActivityError(
                f"local activity {method.__name__} failed",
                scheduled_event_id=0,
                started_event_id=0,
                identity="",
                activity_type=method.__name__,
                activity_id="",
                retry_state=None,
            ) from err
    if task_queue is None:
        task_queue = table.queue_name(policy.queue)
    return await workflow.execute_activity_method(
        method,
        arg,
        task_queue=task_queue,
        start_to_close_timeout=policy.start_to_close,
        schedule_to_close_timeout=policy.schedule_to_close,
        schedule_to_start_timeout=policy.schedule_to_start,
        heartbeat_timeout=policy.heartbeat,
        retry_policy=policy.retry,
        summary=summary,
    )


async def best_effort(
    step: Awaitable[Out], degradations: list[str], kind: str, failed: str
) -> Out | None:
    """Await a step the flow can do without: on failure, report the degradation and go on
    (None). A cancellation of the flow itself still goes through."""
    try:
        return await step
    except ActivityError as err:
        if is_cancellation(err):
            raise
        degrade(degradations, kind, f"{failed}: {describe(err)}")
        return None


def degrade(degradations: list[str], kind: str, message: str) -> None:
    """Report a fallback taken: in the result (`message`) and in the metrics (`kind`, a bounded
    name such as "rerank_skipped")."""
    degradations.append(message)
    workflow.metric_meter().create_counter(
        metrics.DEGRADATIONS, "Fallbacks taken by workflows, by kind."
    ).add(1, {"kind": kind})


def record_steps(timings_ms: dict[str, float]) -> None:
    """The flow's step latencies, as the Temporal SDK's histogram (labelled by workflow type).
    The meter records nothing while a run replays, so no step counts twice."""
    histogram = workflow.metric_meter().create_histogram_float(
        metrics.WORKFLOW_STEP_SECONDS, "Latency of one workflow step, by step.", "s"
    )
    for step, ms in timings_ms.items():
        histogram.record(ms / 1000, {"step": step})


def is_permanent_config_error(err: ActivityError) -> bool:
    """A misconfiguration (wrong model, dimension mismatch): no fallback can help, fail the flow."""
    cause = err.cause
    return isinstance(cause, ApplicationError) and cause.type in (
        policies.INDEX_CONFIG,
        policies.MODEL_CONFIG,
    )


def is_cancellation(err: BaseException) -> bool:
    """The flow itself is being cancelled: never fall back, let the cancellation through."""
    return isinstance(err, asyncio.CancelledError) or (
        isinstance(err, ActivityError) and isinstance(err.cause, CancelledError)
    )


def is_permanent(err: ActivityError) -> bool:
    """An error no retry or fallback can fix (bad input, misconfiguration)."""
    cause = err.cause
    return isinstance(cause, ApplicationError) and (cause.type or "") in policies.PERMANENT


def describe(err: ActivityError) -> str:
    cause = err.cause
    if isinstance(cause, ApplicationError):
        return f"{cause.type or 'ApplicationError'}: {cause.message}"
    return str(cause or err)
