"""IngestWorkflow: files in, searchable chunks out, durably.

Plan the batches once (discover), then per batch, in order:
  stage (parse, chunk, diff; changed documents become pending versions in Postgres)
  -> index (embed + upsert the pending chunks; heartbeats, resumes mid-batch)
  -> commit (one transaction makes the new versions active and drops the old rows)
  -> purge (drop superseded points from the index).
Staging of batch N+1 runs while batch N is embedded (a pipeline of two), so the ingest runs at
the embedder's pace. A crash anywhere resumes at the batch that was running. Continue-as-new
keeps history bounded.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.documents import DocumentActivities
    from activities.vector_index import VectorIndexActivities
    from schemas.common import DocumentFailure
    from schemas.ingest import (
        DiscoverInput,
        DocumentsInput,
        IngestCarry,
        IngestProgress,
        IngestRequest,
        IngestResult,
        IngestTotals,
        IngestWorkflowInput,
        SkippedFiles,
        StageBatchInput,
        StageBatchOutput,
        describe_skipped,
    )
    from workflows.calls import call, describe, is_permanent_config_error
    from workflows.versioning import NEXT_RUN_ON_CURRENT_BUILD, new_build_is_current


@workflow.defn
class IngestWorkflow:
    @workflow.init
    def __init__(self, wf_input: IngestWorkflowInput) -> None:
        self._tenant = wf_input.request.tenant
        self._metadata = wf_input.request.metadata
        self._stage = "starting"
        self._totals = IngestTotals()
        self._failures: list[DocumentFailure] = []
        self._degradations: list[str] = []
        self._skipped: list[SkippedFiles] = []
        self._notes: list[DocumentFailure] = []

    @workflow.query
    def progress(self, tenant: str) -> IngestProgress:
        """How far the ingest is, for the tenant it ingests for (another's query fails)."""
        if tenant != self._tenant:
            raise ValueError("the query names another tenant than this ingest's")
        return IngestProgress(stage=self._stage, totals=self._totals)

    @workflow.run
    async def run(self, wf_input: IngestWorkflowInput) -> IngestResult:
        request = wf_input.request
        if wf_input.carry is not None:
            files = wf_input.carry.files
            first_batch = wf_input.carry.next_batch
            self._totals = wf_input.carry.totals.model_copy()
            self._failures = list(wf_input.carry.failures)
            self._degradations = list(wf_input.carry.degradations)
            self._skipped = list(wf_input.carry.skipped)
            self._notes = list(wf_input.carry.notes)
        else:
            files = await self._discover(request)
            first_batch = 0

        size = request.batch_documents
        batches = [files[i : i + size] for i in range(0, len(files), size)]
        last = min(len(batches), first_batch + request.batches_per_run)
        prefetched: asyncio.Task[StageBatchOutput | None] | None = None
        for number in range(first_batch, last):
            staging = prefetched or asyncio.ensure_future(
                self._stage_batch(request.tenant, number, len(batches), batches[number])
            )
            staged = await staging
            prefetched = None
            if number + 1 < last:
                if workflow.info().is_continue_as_new_suggested() or new_build_is_current():
                    last = number + 1
                else:
                    # Stage the next batch (orchestrator: parse, chunk, Postgres) while this one is
                    # embedded (index worker): the ingest runs at the embedder's pace.
                    prefetched = asyncio.ensure_future(
                        self._stage_batch(
                            request.tenant, number + 1, len(batches), batches[number + 1]
                        )
                    )
            if staged is not None and staged.staged:
                await self._index_batch(request.tenant, number, len(batches), staged)
            self._totals.batches_done += 1

        if last < len(batches):
            self._stage = "continuing as new"
            workflow.continue_as_new(
                IngestWorkflowInput(
                    request=request,
                    carry=IngestCarry(
                        files=files,
                        next_batch=last,
                        totals=self._totals,
                        failures=self._failures,
                        degradations=self._degradations,
                        skipped=self._skipped,
                        notes=self._notes,
                    ),
                ),
                # The next run starts on the current build (this one is pinned to its own).
                initial_versioning_behavior=NEXT_RUN_ON_CURRENT_BUILD,
            )
        self._stage = "done"
        result = IngestResult(
            tenant=request.tenant,
            totals=self._totals,
            failures=self._failures,
            degradations=self._degradations,
            skipped=self._skipped,
            notes=self._notes,
        )
        workflow.set_current_details(f"done: {result.summary}")
        return result

    async def _discover(self, request: IngestRequest) -> list[str]:
        """The files to read; failures and what the walk left out are recorded on the way."""
        self._stage = "discovering"
        found = await call(
            DocumentActivities.discover_files,
            DiscoverInput(paths=request.paths),
            summary=f"discover files under {len(request.paths)} path(s)",
        )
        self._failures = list(found.failures)
        self._skipped = list(found.skipped)
        size = request.batch_documents
        self._totals = IngestTotals(
            documents_total=len(found.files) + len(found.failures),
            documents_done=len(found.failures),
            documents_failed=len(found.failures),
            batches_total=(len(found.files) + size - 1) // size,
        )
        # What the UI shows beside the run while it works, and after.
        workflow.set_current_details(
            "; ".join(
                part
                for part in (f"{len(found.files)} file(s) to read", describe_skipped(found.skipped))
                if part
            )
        )
        return found.files

    async def _stage_batch(
        self, tenant: str, number: int, count: int, files: list[str]
    ) -> StageBatchOutput | None:
        label = f"batch {number + 1}/{count}"
        try:
            staged = await call(
                DocumentActivities.stage_batch,
                StageBatchInput(tenant=tenant, files=files, metadata=self._metadata),
                summary=f"{label}: parse, chunk, diff {len(files)} file(s)",
            )
        except ActivityError as err:
            if is_permanent_config_error(err):
                raise
            self._record_failures(files, "stage_failed", describe(err))
            self._totals.documents_done += len(files)
            return None
        self._failures.extend(staged.failures)
        self._notes.extend(staged.notes)
        self._totals.documents_failed += len(staged.failures)
        self._totals.documents_unchanged += len(staged.unchanged)
        self._totals.documents_done += len(staged.failures) + len(staged.unchanged)
        return staged

    async def _index_batch(
        self, tenant: str, number: int, count: int, staged: StageBatchOutput
    ) -> None:
        label = f"batch {number + 1}/{count}"
        documents = DocumentsInput(tenant=tenant, documents=staged.staged)
        try:
            self._stage = f"{label}: embedding and indexing"
            indexed = await call(
                VectorIndexActivities.index_documents,
                documents,
                summary=f"{label}: embed + upsert {len(staged.staged)} changed document(s)",
            )
            self._stage = f"{label}: committing"
            committed = await call(
                DocumentActivities.commit_batch,
                documents,
                summary=f"{label}: switch {len(staged.staged)} document(s) to their new version",
            )
        except ActivityError as err:
            if is_permanent_config_error(err):
                raise
            await self._discard(documents, label)
            self._record_failures([d.source for d in staged.staged], "index_failed", describe(err))
            self._totals.documents_done += len(staged.staged)
            return

        self._totals.passages_embedded += indexed.passages_embedded
        self._totals.chunks_indexed += committed.chunks_active
        self._totals.documents_ingested += len(committed.committed)
        self._totals.documents_done += len(staged.staged)
        lost = {d.document_id for d in staged.staged} - {d.document_id for d in committed.committed}
        if lost:
            self._record_failures(
                [d.source for d in staged.staged if d.document_id in lost],
                "superseded",
                "a concurrent ingest committed a newer version of this document first",
            )

        replaced = [d for d in committed.committed if d.version > 1]
        if replaced:
            self._stage = f"{label}: purging superseded points"
            try:
                await call(
                    VectorIndexActivities.purge_superseded,
                    DocumentsInput(tenant=tenant, documents=replaced),
                    summary=f"{label}: drop old versions of {len(replaced)} document(s) from the index",
                )
            except ActivityError as err:
                self._degradations.append(f"{label}: purge skipped ({describe(err)})")

    async def _discard(self, documents: DocumentsInput, label: str) -> None:
        try:
            await call(
                DocumentActivities.discard_pending,
                documents,
                summary=f"{label}: discard staged versions that could not be indexed",
            )
        except ActivityError as err:
            self._degradations.append(f"{label}: discard skipped ({describe(err)})")

    def _record_failures(self, sources: list[str], kind: str, message: str) -> None:
        self._failures.extend(
            DocumentFailure(source=s, kind=kind, message=message) for s in sources
        )
        self._totals.documents_failed += len(sources)
