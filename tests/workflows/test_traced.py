"""A run nobody traced the start of (a schedule's, another SDK's, `temporal workflow start`) is
still traced by a worker with tracing on: its workflow and activity spans are made all the same
(ragkit/tracing.interceptors, `always_create_workflow_spans`)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio import workflow
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.answer_cache import AnswerCacheActivities
from ragkit import tracing
from schemas.answer import StoreAnswerInput
from tests.spans import recorded
from tests.workflows.standins import stand_in
from workflows.calls import call


@stand_in(AnswerCacheActivities.store_answer)
def store(request: StoreAnswerInput) -> None:
    return None


@workflow.defn(sandboxed=False)
class StoreTraced:
    @workflow.run
    async def run(self) -> None:
        await call(
            AnswerCacheActivities.store_answer,
            StoreAnswerInput(
                tenant="t", question="q", trace_id="x", answer="a", citations=[], model="m"
            ),
            summary="store",
        )


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    with recorded() as spans:
        yield spans


async def test_a_run_started_untraced_is_traced_by_its_worker(
    env: WorkflowEnvironment, exporter: InMemorySpanExporter
) -> None:
    queue = f"q-{uuid.uuid4().hex[:8]}"
    with ThreadPoolExecutor(2) as executor:
        async with Worker(
            env.client,  # no interceptor: the start carries no trace context
            task_queue=queue,
            workflows=[StoreTraced],
            activities=[store],
            activity_executor=executor,
            interceptors=tracing.interceptors(),
        ):
            await env.client.execute_workflow(
                StoreTraced.run, id=f"traced-{uuid.uuid4().hex[:8]}", task_queue=queue
            )
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert {"RunWorkflow:StoreTraced", "StartActivity:store_answer"} <= set(spans), list(spans)
    assert "RunActivity:store_answer" in spans, list(spans)
    assert spans["RunWorkflow:StoreTraced"].parent is None  # nothing above it
    # No caller span to hang from: each workflow-side span starts a trace of its own, the run's
    # id on every one; each activity's run is the child of its start.
    ids = {dict(s.attributes or {}).get("temporalWorkflowID") for s in spans.values()}
    assert len(ids) == 1 and next(iter(ids)).startswith("traced-")
    activity, started = spans["RunActivity:store_answer"], spans["StartActivity:store_answer"]
    assert activity.parent is not None and activity.parent.span_id == started.context.span_id
