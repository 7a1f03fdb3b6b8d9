"""The `models` group: which model answers by default, and the hot swap to another."""

from __future__ import annotations

import asyncio
import re
from typing import Annotated

import typer

from cli.common import connect, console, db_sessions, fail, load_settings, usage_error
from ragkit import policies

models_app = typer.Typer(
    help="Which model answers by default; swap it with no request dropped (R13).",
    no_args_is_help=True,
)


@models_app.command("active")
def models_active() -> None:
    """The served model new answers go to."""
    from ragkit.store import model_alias  # lazy: SQLAlchemy, 0.2 s

    settings = load_settings()
    console.print(model_alias.active(db_sessions(settings), settings.llm.name))


@models_app.command("swap")
def models_swap(
    model: Annotated[str, typer.Argument(help="Served name of the new model.")],
    ready_timeout: Annotated[
        float, typer.Option(min=1, max=86_400, help="Seconds to wait for its worker.")
    ] = 600,
    stop_old: Annotated[
        bool, typer.Option(help="Stop the embedded stack's LLM worker once it is not needed.")
    ] = True,
) -> None:
    """Make MODEL the default once a worker polls its queue (start it first, e.g.
    `DURABLE_RAG_LLM_SERVED_NAME=MODEL durable-rag worker llm`). Answers started before the
    switch finish on the old model; then the old worker drains and exits."""
    # lazy: SQLAlchemy and temporalio's client
    from durable_rag import model_swap as models
    from durable_rag.stack.workers import worker_process

    if not re.fullmatch(r"[a-z0-9._-]{1,64}", model):
        usage_error(f"{model!r} is not a served model name (a-z, 0-9, '.', '_', '-')")
    settings = load_settings()
    sessions = db_sessions(settings)
    embedded = worker_process(settings.data_dir, "llm")

    async def stop(previous: str) -> None:
        if previous == settings.llm.name and embedded.running():
            console.print(f"draining the worker of {previous} (pid {embedded.pid()})")
            await asyncio.to_thread(embedded.stop, settings.worker.drain_seconds + 10)
        else:
            console.print(f"stop the worker of {previous} now: on SIGTERM it drains, then exits")

    async def run() -> models.SwapReport:
        rag = await connect(settings)
        console.print(f"waiting for a worker on {policies.llm_queue(model)}")
        return await models.swap(
            rag.client,
            sessions,
            model,
            settings.llm.name,
            stop if stop_old else None,
            ready_timeout=ready_timeout,
        )

    try:
        report = asyncio.run(run())
    except models.SwapError as exc:
        fail(str(exc))
    console.print(
        f"{report.model} is the default model (was {report.previous}); its worker was ready "
        f"after {report.waited_seconds:.1f} s, earlier answers closed after "
        f"{report.settled_seconds:.1f} s, the old worker stopped after "
        f"{report.drained_seconds:.1f} s"
    )
