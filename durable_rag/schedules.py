"""Temporal Schedules for index maintenance, declared from settings (R18).

    durable-rag schedules apply     # create or update them; applying twice changes nothing
    durable-rag schedules list
    durable-rag schedules trigger durable-rag-compaction

Compaction runs nightly by default (DURABLE_RAG_COMPACTION_CRON); periodic rebuilds only when
DURABLE_RAG_REBUILD_CRON is set.

Each schedule's note carries a digest of its definition, so `apply` tells an unchanged schedule
from one whose settings moved. The overlap policy skips a run while the previous one is still
going: two compactions never run at once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
    ScheduleUpdate,
)
from temporalio.service import RPCError, RPCStatusCode

from ragkit import ids
from ragkit.settings import Settings
from schemas.common import Contract
from schemas.maintenance import CompactionInput
from schemas.rebuild import RebuildInput
from workflows.compaction import CompactionWorkflow
from workflows.rebuild import RebuildIndexWorkflow

COMPACTION = "durable-rag-compaction"
REBUILD = "durable-rag-rebuild"
MANAGED = (COMPACTION, REBUILD)
NOTE = "managed by `durable-rag schedules apply`; definition"


@dataclass(frozen=True)
class Desired:
    schedule_id: str
    schedule: Schedule


@dataclass(frozen=True)
class ScheduleView:
    schedule_id: str
    cron: str
    paused: bool
    next_runs: list[datetime]
    recent_runs: list[str]
    note: str


def _schedule(
    schedule_id: str,
    cron: str,
    run: Any,
    arg: Contract,
    workflow_id: str,
    summary: str,
    settings: Settings,
) -> Desired:
    digest = ids.short_hash(cron, arg.model_dump_json(), settings.temporal.workflow_task_queue)
    return Desired(
        schedule_id,
        Schedule(
            action=ScheduleActionStartWorkflow(
                run,
                arg,
                # Temporal appends the scheduled time: compact-2026-12-01T03:00:00Z.
                id=workflow_id,
                task_queue=settings.temporal.workflow_task_queue,
                static_summary=summary,
            ),
            spec=ScheduleSpec(cron_expressions=[cron]),
            # A run still going makes the next one skip: never two at once. Runs missed while
            # the server was down are not made up beyond an hour.
            policy=SchedulePolicy(
                overlap=ScheduleOverlapPolicy.SKIP, catchup_window=timedelta(hours=1)
            ),
            state=ScheduleState(note=f"{NOTE} {digest}; cron {cron}"),
        ),
    )


def desired(settings: Settings) -> list[Desired]:
    wanted: list[Desired] = []
    if settings.maintenance.compaction_cron:
        wanted.append(
            _schedule(
                COMPACTION,
                settings.maintenance.compaction_cron,
                CompactionWorkflow.run,
                CompactionInput(
                    batch_size=settings.maintenance.compaction_batch_size,
                    transcript_retention_days=settings.answer.transcript_retention_days,
                    cost_retention_days=settings.maintenance.cost_retention_days,
                    shadow_retention_days=settings.maintenance.shadow_retention_days,
                    answer_cache_retention_days=settings.maintenance.answer_cache_retention_days,
                    eval_report_retention_days=settings.maintenance.eval_report_retention_days,
                    rewrite_max_mb=settings.maintenance.rewrite_max_mb,
                ),
                ids.SCHEDULED_COMPACTION,
                "scheduled compaction of the index and chunk store",
                settings,
            )
        )
    if settings.maintenance.rebuild_cron:
        wanted.append(
            _schedule(
                REBUILD,
                settings.maintenance.rebuild_cron,
                RebuildIndexWorkflow.run,
                RebuildInput(
                    batch_size=settings.maintenance.rebuild_batch_size,
                    hnsw_m=settings.index.hnsw_m,
                    hnsw_ef_construct=settings.index.hnsw_ef_construct,
                    grace_seconds=settings.maintenance.rebuild_grace_seconds,
                ),
                ids.rebuild_workflow_id(settings.index.collection),
                "scheduled rebuild of the vector index",
                settings,
            )
        )
    return wanted


async def apply(client: Client, settings: Settings) -> list[tuple[str, str]]:
    """Make the managed schedules match settings; returns (id, created|updated|unchanged|deleted)."""
    outcome: list[tuple[str, str]] = []
    wanted = desired(settings)
    for want in wanted:
        handle = client.get_schedule_handle(want.schedule_id)
        try:
            described = await handle.describe()
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise
            await client.create_schedule(want.schedule_id, want.schedule)
            outcome.append((want.schedule_id, "created"))
            continue
        if described.schedule.state.note == want.schedule.state.note:
            outcome.append((want.schedule_id, "unchanged"))
            continue
        schedule = want.schedule

        def replace(_: object, schedule: Schedule = schedule) -> ScheduleUpdate:
            return ScheduleUpdate(schedule=schedule)

        await handle.update(replace)
        outcome.append((want.schedule_id, "updated"))
    for schedule_id in set(MANAGED) - {w.schedule_id for w in wanted}:
        try:
            await client.get_schedule_handle(schedule_id).delete()
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise
        else:
            outcome.append((schedule_id, "deleted"))
    return outcome


async def list_managed(client: Client) -> list[ScheduleView]:
    views: list[ScheduleView] = []
    for schedule_id in MANAGED:
        try:
            described = await client.get_schedule_handle(schedule_id).describe()
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise
            continue
        note = described.schedule.state.note or ""
        views.append(
            ScheduleView(
                schedule_id=schedule_id,
                cron=note.rpartition("cron ")[2] if "cron " in note else json.dumps(None),
                paused=described.schedule.state.paused,
                next_runs=list(described.info.next_action_times[:3]),
                recent_runs=[
                    getattr(action.action, "workflow_id", "")
                    for action in described.info.recent_actions
                ],
                note=note,
            )
        )
    return views


async def trigger(client: Client, schedule_id: str) -> None:
    """Run a managed schedule's action now (the overlap policy still applies)."""
    if schedule_id not in MANAGED:
        raise ValueError(f"{schedule_id!r} is not a schedule of this project: {', '.join(MANAGED)}")
    try:
        await client.get_schedule_handle(schedule_id).trigger()
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:
            raise
        raise ValueError(f"no schedule {schedule_id!r}: run `durable-rag schedules apply`") from exc
