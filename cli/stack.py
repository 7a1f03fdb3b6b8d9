"""The embedded stack and its processes: `up`, `down`, `status`, `migrate`, and `worker` and
`gateway` in the foreground."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Annotated

import typer

from cli.common import console, fail, load_settings, usage_error

if TYPE_CHECKING:
    from ragkit.settings import Settings


def up(
    no_workers: Annotated[bool, typer.Option("--no-workers", help="Start servers only.")] = False,
    no_llm: Annotated[bool, typer.Option("--no-llm", help="Skip the LLM worker.")] = False,
    no_gateway: Annotated[
        bool, typer.Option("--no-gateway", help="Skip the HTTP gateway.")
    ] = False,
    tracing: Annotated[
        bool,
        typer.Option(
            "--tracing",
            help="Also start the trace viewer (Arize Phoenix, installed on first use) and "
            "trace every request into it; CLI commands trace too until `down`.",
        ),
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
            tracing=tracing,
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
    for line in store_lines(stack.settings):
        console.print(line)
    if all(p.running or not p.required for p in parts):
        for line in [*stack.urls(), *stack.builds()]:
            console.print(line)
    else:
        raise typer.Exit(1)


def store_lines(settings: Settings) -> list[str]:
    """What each store holds on disk, and the room left on the disk under it."""
    from ragkit import disk

    return [
        f"store {u.store:16} {disk.human(u.bytes):>12}  on a disk with "
        f"{disk.human(u.volume_free)} free of {disk.human(u.volume_size)}"
        for u in disk.usage(disk.stores(settings))
    ]


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


def deploy(
    abort: Annotated[
        bool,
        typer.Option("--abort", help="Send new runs back to the build the deploy began from."),
    ] = False,
    ramp: Annotated[
        str,
        typer.Option(
            help="The orchestrator's ramp: percentages of new runs to the new build, in turn; "
            "'' goes straight to current."
        ),
    ] = "10,50",
    pause: Annotated[
        float, typer.Option(min=0, help="Seconds at each step before its health check.")
    ] = 30.0,
    kinds: Annotated[
        str, typer.Option(help="Worker kinds to deploy, comma-separated.")
    ] = "orchestrator,index,llm",
    max_error_rate: Annotated[
        float,
        typer.Option(min=0, max=1, help="The new build's activity error rate that fails a step."),
    ] = 0.05,
    drain_timeout: Annotated[
        float, typer.Option(min=1, help="Seconds to wait for the old build to drain.")
    ] = 900.0,
    build: Annotated[
        str | None,
        typer.Option(help="The build to deploy; default: this checkout's (`durable-rag status`)."),
    ] = None,
    external: Annotated[
        bool,
        typer.Option(
            "--external",
            help="The workers are started and stopped by you (compose, Kubernetes): the deploy "
            "waits for the new build to poll and says when to stop each side.",
        ),
    ] = False,
    metrics: Annotated[
        str,
        typer.Option(help="--external: the new workers' metrics URLs, comma-separated."),
    ] = "",
) -> None:
    """Deploy new code onto the running stack under load: new workers beside the old, a ramp
    with health checks, then current; the old workers stop once their runs have ended."""
    from durable_rag.deploy import (  # lazy: temporalio's client
        Deploy,
        DeployError,
        ExternalFleet,
        Fleet,
        parse_ramp,
    )
    from durable_rag.stack import EmbeddedStack
    from durable_rag.stack.process import StackError
    from durable_rag.stack.workers import worker_queue
    from ragkit import deployments

    settings = load_settings()
    try:
        steps = parse_ramp(ramp)
    except ValueError as exc:
        usage_error(str(exc))
    chosen = [k.strip() for k in kinds.split(",") if k.strip()]
    unknown = sorted(set(chosen) - set(deployments.KINDS))
    if unknown or not chosen:
        usage_error(f"--kinds: one or more of {', '.join(deployments.KINDS)}, not {kinds!r}")
    if not settings.worker.versioning:
        usage_error("a deploy needs versioned workers: DURABLE_RAG_WORKER_VERSIONING is off")
    urls = [u.strip() for u in metrics.split(",") if u.strip()]
    if external and not urls and not abort:
        usage_error("--external needs --metrics: the new workers' metrics URLs, for the checks")
    fleet: Fleet
    if external:
        queues = {kind: worker_queue(settings, kind) for kind in deployments.KINDS}
        fleet = ExternalFleet(queues, urls, echo=console.print)
        state_path = settings.data_dir / "run" / "deploy.json"
    else:
        try:
            stack = EmbeddedStack(settings)
        except StackError as exc:
            usage_error(f"{exc} (`--external` deploys onto workers you run yourself)")
        if not stack.temporal.process.running():
            fail("the embedded stack is not running: `durable-rag up` first")
        fleet, state_path = stack.fleet(), stack.deploy_state_path

    async def run() -> None:
        from ragkit.temporal import connect

        deploy = Deploy(
            await connect(settings),
            fleet,
            settings.worker.deployment_name,
            state_path,
            echo=console.print,
            drain_timeout=drain_timeout,
            start_timeout=600 if external else 120,
        )
        if abort:
            state = await deploy.abort()
            console.print(f"aborted  the deploy of {state.build}: the old build serves new runs")
        else:
            target = build or settings.worker.build_id or deployments.computed_build_id()
            await deploy.run(target, chosen, steps, pause, max_error_rate)

    try:
        asyncio.run(run())
    except (DeployError, StackError) as exc:
        fail(str(exc))
