"""IngestWorkflow's declared retries and fallbacks, on Temporal's time-skipping test server.

The activities here are stand-ins with the real names and contracts, scripted to fail: this tests
the workflow's decisions (retry, fall back, fail the flow, continue-as-new) without waiting for real
backoff. The real activities are exercised in test_ingest.py and test_ingest_faults.py.
"""

from __future__ import annotations

import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.documents import DocumentActivities
from activities.vector_index import VectorIndexActivities
from ragkit import policies
from ragkit.policies import PolicyTable
from ragkit.settings import Settings
from ragkit.settings.platform import ActivityPolicyOverride
from schemas.common import DocumentVersion
from schemas.ingest import (
    CommitOutput,
    DiscoverInput,
    DiscoverOutput,
    DocumentsInput,
    IndexDocumentsOutput,
    IngestRequest,
    IngestResult,
    IngestWorkflowInput,
    StageBatchInput,
    StageBatchOutput,
)
from tests.workflows.standins import stand_in
from tests.workflows.test_ingest import save_history
from workflows.calls import PolicyTableInterceptor
from workflows.ingest import IngestWorkflow

FILES = [f"/docs/f{i}.md" for i in range(6)]

# The declared attempts with millisecond backoff. The time-skipping server should skip the
# declared backoff (up to 181 s for stage_batch), but in two CI runs it stopped skipping after the
# module's first test and the stage test waited it out in real time. What these tests prove
# (attempts, fallbacks) does not depend on the intervals.
FAST_RETRIES = {
    name: ActivityPolicyOverride(initial_interval_seconds=0.01, maximum_interval_seconds=0.05)
    for name in (
        "discover_files",
        "stage_batch",
        "index_documents",
        "commit_batch",
        "purge_superseded",
        "discard_pending",
    )
}


class Script:
    """Stand-in activities; `fail` says which activity fails for which source, and how."""

    def __init__(
        self, fail: dict[str, tuple[str, ApplicationError]] | None = None, version: int = 2
    ) -> None:
        self.fail = fail or {}
        self.version = version  # 1: a first ingest; 2: every document changed since the last
        self.attempts: Counter[str] = Counter()
        self.discarded: list[str] = []
        self.committed: list[str] = []

    def _maybe_fail(self, name: str, sources: list[str]) -> None:
        self.attempts[name] += 1
        if name in self.fail and self.fail[name][0] in sources:
            raise self.fail[name][1]

    @stand_in(DocumentActivities.discover_files)
    def discover_files(self, request: DiscoverInput) -> DiscoverOutput:
        return DiscoverOutput(files=FILES, failures=[])

    @stand_in(DocumentActivities.stage_batch)
    def stage_batch(self, request: StageBatchInput) -> StageBatchOutput:
        self._maybe_fail("stage_batch", request.files)
        return StageBatchOutput(
            staged=[
                DocumentVersion(
                    document_id=uuid.uuid5(uuid.NAMESPACE_URL, f), version=self.version, source=f
                )
                for f in request.files
            ],
            unchanged=[],
            failures=[],
        )

    @stand_in(VectorIndexActivities.index_documents)
    def index_documents(self, request: DocumentsInput) -> IndexDocumentsOutput:
        self._maybe_fail("index_documents", [d.source for d in request.documents])
        return IndexDocumentsOutput(points_upserted=3, passages_embedded=3)

    @stand_in(DocumentActivities.commit_batch)
    def commit_batch(self, request: DocumentsInput) -> CommitOutput:
        self.committed += [d.source for d in request.documents]
        return CommitOutput(committed=request.documents, chunks_active=3 * len(request.documents))

    @stand_in(VectorIndexActivities.purge_superseded)
    def purge_superseded(self, request: DocumentsInput) -> None:
        self._maybe_fail("purge_superseded", [d.source for d in request.documents])

    @stand_in(DocumentActivities.discard_pending)
    def discard_pending(self, request: DocumentsInput) -> None:
        self.discarded += [d.source for d in request.documents]

    def all(self) -> list:  # type: ignore[type-arg]
        return [
            self.discover_files,
            self.stage_batch,
            self.index_documents,
            self.commit_batch,
            self.purge_superseded,
            self.discard_pending,
        ]


async def run_ingest(
    env: WorkflowEnvironment, script: Script, batches_per_run: int = 50, record: str = ""
) -> IngestResult:
    result, _ = await run_stand_in_ingest(env.client, script, batches_per_run, record)
    return result


async def run_stand_in_ingest(
    client: Client, script: Script, batches_per_run: int = 50, record: str = ""
) -> tuple[IngestResult, str]:
    """IngestWorkflow over the stand-ins: FILES in batches of 2; returns the result and the
    workflow id (test_ingest.py compares its commands with a real run's)."""
    queue = f"q-{uuid.uuid4().hex[:8]}"
    table = PolicyTable.from_settings(
        Settings(workflow_task_queue=queue, index_task_queue=queue, activity_policies=FAST_RETRIES)
    )
    with ThreadPoolExecutor(4) as executor:
        async with Worker(
            client,
            task_queue=queue,
            interceptors=[PolicyTableInterceptor(table)],
            workflows=[IngestWorkflow],
            activities=script.all(),
            activity_executor=executor,
        ):
            handle = await client.start_workflow(
                IngestWorkflow.run,
                IngestWorkflowInput(
                    request=IngestRequest(
                        tenant="t",
                        paths=["/docs"],
                        batch_documents=2,
                        batches_per_run=batches_per_run,
                    )
                ),
                id=f"ingest-test-{uuid.uuid4().hex[:8]}",
                task_queue=queue,
            )
            try:
                return await handle.result(), handle.id
            finally:
                if record:
                    await save_history(client, handle.id, record)


async def test_index_failure_retries_per_policy_then_fails_only_that_batch(
    env: WorkflowEnvironment,
) -> None:
    script = Script(
        fail={"index_documents": ("/docs/f2.md", ApplicationError("down", type="IndexUnavailable"))}
    )
    result = await run_ingest(env, script, record="ingest-index-fallback")

    declared = policies.DECLARED["index_documents"].retry.maximum_attempts
    assert script.attempts["index_documents"] == declared + 2  # the failing batch + two good ones
    assert {f.source for f in result.failures} == {"/docs/f2.md", "/docs/f3.md"}
    assert all(
        f.kind == "index_failed" and "IndexUnavailable" in f.message for f in result.failures
    )
    assert script.discarded == ["/docs/f2.md", "/docs/f3.md"]
    assert sorted(script.committed) == ["/docs/f0.md", "/docs/f1.md", "/docs/f4.md", "/docs/f5.md"]
    assert result.totals.documents_ingested == 4
    assert result.totals.documents_failed == 2
    assert result.totals.documents_done == result.totals.documents_total == 6


async def test_a_permanent_config_error_fails_the_flow_without_retrying(
    env: WorkflowEnvironment,
) -> None:
    error = ApplicationError(
        "index holds 768-dimensional vectors", type=policies.INDEX_CONFIG, non_retryable=True
    )
    script = Script(fail={"index_documents": ("/docs/f0.md", error)})
    with pytest.raises(WorkflowFailureError) as info:
        await run_ingest(env, script)
    cause = info.value.cause
    while cause is not None and not isinstance(cause, ApplicationError):
        cause = cause.__cause__
    assert isinstance(cause, ApplicationError)
    assert cause.type == policies.INDEX_CONFIG
    assert cause.non_retryable
    assert script.attempts["index_documents"] == 1
    assert script.committed == []


async def test_purge_failure_is_a_recorded_degradation_not_a_failure(
    env: WorkflowEnvironment,
) -> None:
    script = Script(fail={"purge_superseded": ("/docs/f4.md", ApplicationError("busy"))})
    result = await run_ingest(env, script)
    assert result.failures == []
    assert result.totals.documents_ingested == 6
    assert len(result.degradations) == 1 and "purge skipped" in result.degradations[0]
    assert (
        script.attempts["purge_superseded"]
        == 2 + policies.DECLARED["purge_superseded"].retry.maximum_attempts
    )


async def test_stage_failure_fails_the_batch_and_the_rest_goes_on(env: WorkflowEnvironment) -> None:
    script = Script(fail={"stage_batch": ("/docs/f0.md", ApplicationError("db down"))})
    result = await run_ingest(env, script)
    assert {f.source: f.kind for f in result.failures} == {
        "/docs/f0.md": "stage_failed",
        "/docs/f1.md": "stage_failed",
    }
    assert result.totals.documents_ingested == 4


async def test_continue_as_new_carries_progress(env: WorkflowEnvironment) -> None:
    script = Script()
    result = await run_ingest(env, script, batches_per_run=1, record="ingest-continue-as-new")
    assert result.totals.batches_done == 3
    assert result.totals.documents_ingested == 6
    assert result.totals.chunks_indexed == 18
    assert script.attempts["stage_batch"] == 3
