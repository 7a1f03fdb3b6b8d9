"""The one way workflows call activities: the policy table supplies queue, timeouts and retries."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from durable_rag import policies

In = TypeVar("In")
Out = TypeVar("Out")


async def call(method: Callable[[Any, In], Out], arg: In, *, summary: str) -> Out:
    """Run an activity method with the policy declared for it in durable_rag.policies."""
    policy = policies.policy_for(method.__name__)
    return await workflow.execute_activity_method(
        method,
        arg,
        task_queue=policies.queue_name(policy.queue),
        start_to_close_timeout=policy.start_to_close,
        schedule_to_close_timeout=policy.schedule_to_close,
        heartbeat_timeout=policy.heartbeat,
        retry_policy=policy.retry,
        summary=summary,
    )


def is_permanent_config_error(err: ActivityError) -> bool:
    """A misconfiguration (wrong model, dimension mismatch): no fallback can help, fail the flow."""
    cause = err.cause
    return isinstance(cause, ApplicationError) and cause.type in (
        policies.INDEX_CONFIG,
        policies.MODEL_CONFIG,
    )


def describe(err: ActivityError) -> str:
    cause = err.cause
    if isinstance(cause, ApplicationError):
        return f"{cause.type or 'ApplicationError'}: {cause.message}"
    return str(cause or err)
