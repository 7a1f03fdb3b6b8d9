"""`workflows.calls`: a failed local activity reaches its fallback exactly as a remote one does.

The SDK raises a local activity's own error bare (ApplicationError), a remote one's wrapped in
ActivityError; every fallback catches ActivityError. The fault matrix found the difference: during
a Postgres restart `store_answer` (local; fallback: answer uncached) failed the whole answer.
"""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from temporalio import workflow
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.answer_cache import AnswerCacheActivities
from ragkit import policies
from schemas.answer import StoreAnswerInput
from tests.workflows.standins import stand_in
from workflows.calls import best_effort, call


@stand_in(AnswerCacheActivities.store_answer)
def failing_store(request: StoreAnswerInput) -> None:
    if request.answer == "permanent":
        raise ApplicationError("bad", type=policies.INVALID_INPUT, non_retryable=True)
    raise RuntimeError("connection refused: the database system is shutting down")


@workflow.defn(sandboxed=False)
class StoreOnce:
    @workflow.run
    async def run(self, answer: str) -> list[str]:
        degradations: list[str] = []
        await best_effort(
            call(
                AnswerCacheActivities.store_answer,
                StoreAnswerInput(
                    tenant="t", question="q", trace_id="x", answer=answer, citations=[], model="m"
                ),
                summary="store",
            ),
            degradations,
            "answer_not_cached",
            "answer not cached",
        )
        return degradations


@pytest.mark.parametrize("answer", ["transient", "permanent"])
async def test_a_failed_local_activity_takes_its_fallback(
    env: WorkflowEnvironment, answer: str
) -> None:
    assert policies.DECLARED["store_answer"].local
    queue = f"q-{uuid.uuid4().hex[:8]}"
    with ThreadPoolExecutor(2) as executor:
        async with Worker(
            env.client,
            task_queue=queue,
            workflows=[StoreOnce],
            activities=[failing_store],
            activity_executor=executor,
        ):
            degradations = await env.client.execute_workflow(
                StoreOnce.run, answer, id=f"store-{uuid.uuid4().hex[:8]}", task_queue=queue
            )
    (only,) = degradations
    assert only.startswith("answer not cached:")
    assert ("shutting down" if answer == "transient" else "bad") in only
