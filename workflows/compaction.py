"""CompactionWorkflow: remove what deletes and new versions left behind (R18).

  count (index points, Postgres chunks) -> delete dead chunk rows in batches -> delete index
  points that no live chunk backs -> optimize the index -> VACUUM the tables -> delete rows past
  their retention -> rewrite the tables holding tenant text, new WAL segment -> count again.

Dead rows and points are invisible to readers already (every read joins the active version), so
compaction only reclaims space; it is safe while ingests and queries run (a version being staged
is live) and safe to kill and rerun: every step is idempotent and the next run picks up what is
left. Scheduled nightly by `durable-rag schedules apply`; id `compact-<date>` there, or
`compact-<hex>` by hand (`durable-rag compact`).
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.costs import CostActivities
    from activities.documents import DocumentActivities
    from activities.vector_index import VectorIndexActivities
    from schemas.maintenance import CompactionInput, CompactionReport
    from workflows.calls import best_effort, call, degrade


@workflow.defn
class CompactionWorkflow:
    @workflow.run
    async def run(self, request: CompactionInput) -> CompactionReport:
        points_before = await call(
            VectorIndexActivities.index_stats, request, summary="count the index's points"
        )
        chunks_before = await call(
            DocumentActivities.chunk_stats, request, summary="count chunk rows, live and dead"
        )
        chunks_removed = await self._purge_dead_chunks(request)
        swept = await call(
            VectorIndexActivities.sweep_index,
            request,
            summary="delete index points that no live chunk backs",
        )
        degradations: list[str] = []
        transcripts_removed = await self._reclaim(request, degradations)
        expired = await self._expire(request, degradations)
        rewritten = await self._rewrite(request, degradations)
        points_after = await call(
            VectorIndexActivities.index_stats, request, summary="count the index's points again"
        )
        chunks_after = await call(
            DocumentActivities.chunk_stats, request, summary="count chunk rows again"
        )
        report = CompactionReport(
            workflow_id=workflow.info().workflow_id,
            chunks_removed=chunks_removed,
            transcripts_removed=transcripts_removed,
            expired_removed=expired,
            rewritten=rewritten,
            points_removed=swept.points_removed,
            points_before=points_before.points,
            points_after=points_after.points,
            chunks_before=chunks_before.chunks,
            chunks_after=chunks_after.chunks,
            live_chunks=chunks_after.live_chunks,
            counts_match=points_after.points == chunks_after.live_chunks,
            degradations=degradations,
        )
        workflow.logger.info(
            "compacted: %d chunk rows and %d points removed; index %d -> %d points",
            report.chunks_removed,
            report.points_removed,
            report.points_before,
            report.points_after,
        )
        return report

    async def _purge_dead_chunks(self, request: CompactionInput) -> int:
        """Dead chunk rows, a batch at a time until one comes back short."""
        removed = 0
        while True:
            batch = await call(
                DocumentActivities.purge_dead_chunks,
                request,
                summary=f"delete up to {request.batch_size} dead chunk rows",
            )
            removed += batch.removed
            if batch.removed < request.batch_size:
                return removed

    async def _reclaim(self, request: CompactionInput, degradations: list[str]) -> int:
        """Optimize the index, VACUUM, purge old transcripts: each only reclaims space, so a
        failure is reported, not fatal. Returns the transcripts removed."""
        await best_effort(
            call(VectorIndexActivities.optimize_index, request, summary="optimize the index"),
            degradations,
            "optimize_skipped",
            "optimizing the index failed",
        )
        await best_effort(
            call(
                DocumentActivities.vacuum_chunks,
                request,
                summary="VACUUM (ANALYZE) the chunk tables",
            ),
            degradations,
            "vacuum_skipped",
            "VACUUM failed",
        )
        # Runs recorded before transcripts existed replay without this step.
        if not workflow.patched("purge-transcripts"):
            return 0
        purged = await best_effort(
            call(
                CostActivities.purge_transcripts,
                request,
                summary=f"delete transcripts older than {request.transcript_retention_days} days",
            ),
            degradations,
            "transcripts_kept",
            "purging old transcripts failed",
        )
        return purged.removed if purged else 0

    async def _expire(self, request: CompactionInput, degradations: list[str]) -> dict[str, int]:
        """Rows past their retention (cost rows, shadow runs, cached answers, evaluation
        reports): space only, so a failure is reported, not fatal."""
        # Runs recorded before retention existed replay without this step.
        if not workflow.patched("purge-expired"):
            return {}
        purged = await best_effort(
            call(
                CostActivities.purge_expired,
                request,
                summary=(
                    f"delete rows past retention: costs {request.cost_retention_days} d, shadow "
                    f"{request.shadow_retention_days} d, cache {request.answer_cache_retention_days}"
                    f" d, reports {request.eval_report_retention_days} d"
                ),
            ),
            degradations,
            "expired_kept",
            "purging rows past their retention failed",
        )
        return purged.removed if purged else {}

    async def _rewrite(self, request: CompactionInput, degradations: list[str]) -> list[str]:
        """Last, after every delete: rewrite the tables holding tenant text, so what was deleted
        leaves Postgres's files too (README, Security -> Deletion). Space and privacy, not
        correctness: a table skipped or a failure is reported, and the next run tries again."""
        # Runs recorded before the rewrite existed replay without this step.
        if not workflow.patched("rewrite-tables"):
            return []
        done = await best_effort(
            call(
                DocumentActivities.rewrite_tables,
                request,
                summary=f"rewrite the tables holding tenant text (up to {request.rewrite_max_mb} MB"
                " each) and start a new WAL segment",
            ),
            degradations,
            "rewrite_skipped",
            "rewriting the tables failed",
        )
        if done is None:
            return []
        if done.skipped:
            degrade(
                degradations,
                "rewrite_skipped",
                "tables not rewritten: "
                + "; ".join(f"{table}: {why}" for table, why in sorted(done.skipped.items())),
            )
        return done.rewritten
