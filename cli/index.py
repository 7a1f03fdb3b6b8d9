"""Index maintenance: `compact`, `rebuild`, and the `schedules` that run them."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from cli.common import connect, console, fail, load_settings, ui_link, usage_error


def compact(
    batch_size: Annotated[
        int | None, typer.Option(min=10, max=100_000, help="Rows or points per step.")
    ] = None,
) -> None:
    """Compact now: remove dead chunk rows and index points, optimize the index, VACUUM, delete
    rows past retention, rewrite the tables holding tenant text."""
    settings = load_settings()

    async def run() -> None:
        rag = await connect(settings)
        report = await rag.compact(batch_size)
        console.print(
            f"removed {report.chunks_removed} chunk row(s) and {report.points_removed} index "
            f"point(s); index {report.points_before} -> {report.points_after} points, chunks "
            f"{report.chunks_before} -> {report.chunks_after} rows ({report.live_chunks} live); "
            f"counts {'match' if report.counts_match else 'DIFFER'}"
        )
        if report.rewritten:
            console.print(
                f"rewritten {len(report.rewritten)} Postgres table(s) holding tenant text; no "
                "deleted row's bytes left in them or the WAL"
            )
        for degradation in report.degradations:
            console.print(f"[yellow]degraded:[/yellow] {degradation}")

    asyncio.run(run())


def rebuild(
    grace: Annotated[
        float | None,
        typer.Option(
            min=0,
            max=30 * 86_400,  # RebuildInput's bound: checked here, before connecting
            help="Seconds to keep the old generation; default from settings.",
        ),
    ] = None,
    wait: Annotated[bool, typer.Option(help="Wait for the switch and the drop.")] = True,
) -> None:
    """Rebuild the vector index from Postgres into a new generation and switch to it with no
    downtime; the old one is dropped after the grace period."""
    # lazy: temporalio's client and the workflows, 0.4 s at import.
    from temporalio.client import WorkflowFailureError

    from durable_rag.client import failure_cause

    settings = load_settings()

    async def run() -> None:
        rag = await connect(settings)
        handle = await rag.start_rebuild(grace)
        console.print(f"rebuild running: {ui_link(settings, handle.id)}")
        if not wait:
            return
        try:
            report = await handle.result()
        except WorkflowFailureError as exc:
            fail(str(failure_cause(exc)))
        console.print(
            f"{report.active} is active ({report.points} points, {report.chunks_copied} chunks "
            f"copied, {report.verified.added} added and {report.verified.removed} removed at "
            f"verification); {report.previous} "
            + ("dropped" if report.dropped_previous else "NOT dropped: see the run")
        )

    asyncio.run(run())


schedules_app = typer.Typer(
    help="Temporal Schedules for index maintenance, from settings.", no_args_is_help=True
)


@schedules_app.command("apply")
def schedules_apply() -> None:
    """Create or update the schedules from settings (DURABLE_RAG_COMPACTION_CRON); idempotent."""
    from durable_rag import schedules  # lazy: temporalio's client and the workflows

    settings = load_settings()

    async def run() -> None:
        rag = await connect(settings)
        for schedule_id, outcome in await schedules.apply(rag.client, settings):
            console.print(f"{outcome:<10} {schedule_id}")

    asyncio.run(run())


@schedules_app.command("list")
def schedules_list() -> None:
    """Show the schedules, their next runs and their recent runs."""
    from durable_rag import schedules  # lazy: temporalio's client and the workflows

    settings = load_settings()

    async def run() -> None:
        rag = await connect(settings)
        views = await schedules.list_managed(rag.client)
        if not views:
            console.print("no schedules: run `durable-rag schedules apply`")
        for view in views:
            state = "paused" if view.paused else "active"
            nexts = ", ".join(t.strftime("%Y-%m-%d %H:%M UTC") for t in view.next_runs)
            console.print(f"{view.schedule_id}  {state}  cron {view.cron}  next: {nexts}")
            for run_id in view.recent_runs:
                console.print(f"    ran {run_id}")

    asyncio.run(run())


@schedules_app.command("trigger")
def schedules_trigger(
    schedule_id: Annotated[str, typer.Argument(help="e.g. durable-rag-compaction")],
) -> None:
    """Run a schedule's workflow now."""
    from durable_rag import schedules  # lazy: temporalio's client and the workflows

    settings = load_settings()

    async def run() -> None:
        rag = await connect(settings)
        try:
            await schedules.trigger(rag.client, schedule_id)
        except ValueError as exc:
            usage_error(str(exc))
        console.print(f"triggered {schedule_id}; see {settings.temporal.ui_url}/namespaces/"
                      f"{settings.temporal.namespace}/schedules/{schedule_id}")  # fmt: skip

    asyncio.run(run())
