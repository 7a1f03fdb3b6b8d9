"""The embedded stack and its processes: `up`, `down`, `status`, `migrate`, and `worker` and
`gateway` in the foreground."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from cli.common import console, fail, load_settings, usage_error


def up(
    no_workers: Annotated[bool, typer.Option("--no-workers", help="Start servers only.")] = False,
    no_llm: Annotated[bool, typer.Option("--no-llm", help="Skip the LLM worker.")] = False,
    no_gateway: Annotated[
        bool, typer.Option("--no-gateway", help="Skip the HTTP gateway.")
    ] = False,
) -> None:
    """Start the embedded stack (Temporal dev server, Postgres, workers, gateway); idempotent."""
    from durable_rag.stack import EmbeddedStack  # lazy: temporalio's client
    from durable_rag.stack.process import StackError

    try:
        EmbeddedStack(load_settings()).up(
            workers=not no_workers,
            llm=not no_llm,
            gateway=not no_gateway and not no_workers,
            echo=console.print,
        )
    except StackError as exc:
        fail(str(exc))


def down() -> None:
    """Stop every part of the embedded stack that `up` started, by PID."""
    from durable_rag.stack import EmbeddedStack  # lazy: temporalio's client
    from durable_rag.stack.process import StackError

    try:
        EmbeddedStack(load_settings()).down(echo=console.print)
    except StackError as exc:
        fail(str(exc))


def status() -> None:
    """Show which parts of the embedded stack run. Exit 1 if any that was started is down."""
    from durable_rag.stack import EmbeddedStack  # lazy: temporalio's client
    from durable_rag.stack.process import StackError

    try:
        stack = EmbeddedStack(load_settings())
    except StackError as exc:
        fail(str(exc))
    parts = stack.status()
    for part in parts:
        state = (
            "[green]running[/green]"
            if part.running
            else "[red]stopped[/red]"
            if part.required
            else "not started"
        )
        console.print(f"{part.name:22} {state:>20}  pid {part.pid or '-':>7}  {part.detail}")
    if all(p.running or not p.required for p in parts):
        for line in [*stack.urls(), *stack.builds()]:
            console.print(line)
    else:
        raise typer.Exit(1)


def worker(
    kind: Annotated[str, typer.Argument(help="orchestrator | index | llm")],
) -> None:
    """Run one worker in the foreground (what `up` and docker-compose start)."""
    settings = load_settings()
    # lazy: a worker imports its models' libraries (torch, vLLM, FlagEmbedding).
    if kind == "orchestrator":
        from workers.orchestrator import main
    elif kind == "index":
        from workers.index import main
    elif kind == "llm":
        from workers.llm import main
    else:
        usage_error(f"unknown worker kind {kind!r}; choose orchestrator, index or llm")
    asyncio.run(main(settings))


def migrate() -> None:
    """Apply Alembic migrations (alembic upgrade head) to the configured database."""
    from durable_rag.stack.postgres import migrate as run_migrations  # lazy: Alembic

    run_migrations(load_settings().postgres.sqlalchemy_url)
    console.print("migrated")


def gateway(
    host: Annotated[str | None, typer.Option(help="Bind address; default from settings.")] = None,
    port: Annotated[int | None, typer.Option(help="Port; default from settings.")] = None,
) -> None:
    """Serve the HTTP gateway (FastAPI on uvicorn); OpenAPI at /docs."""
    from gateway.server import serve  # lazy: FastAPI, uvicorn and the whole app

    serve(load_settings(), host, port)
