"""`durable-rag`: the command line. Bad input exits with code 2 and a message."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ragkit import ids, policies
from ragkit.settings import Settings

if TYPE_CHECKING:
    from durable_rag.client import RagClient
    from schemas.answer import Answer
    from schemas.evaluation import EvalReport

BUNDLED_CORPUS = Path(__file__).resolve().parent.parent / "corpus"
app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)
console = Console()
err = Console(stderr=True)


def _settings() -> Settings:
    try:
        return Settings()
    except ValidationError as exc:
        _usage_error(f"invalid settings:\n{exc}")


# Messages quote what the user typed: escaped, or `delete "[/x]"` is a Rich MarkupError.
def _usage_error(message: str) -> NoReturn:
    err.print(f"[red]error:[/red] {escape(message)}")
    raise typer.Exit(2)


def _fail(message: str) -> NoReturn:
    err.print(f"[red]error:[/red] {escape(message)}")
    raise typer.Exit(1)


def _exists(path: Path, folder: bool = False) -> bool:
    """Path.exists (or is_dir), but no for a name the OS refuses (too long, no access): those
    raise OSError, which was a traceback for `ingest` of a 9000-character path."""
    try:
        return path.is_dir() if folder else path.exists()
    except OSError:
        return False


def _check_tenant(tenant: str | None) -> None:
    """Refuse a malformed tenant before connecting to anything (empty: the default one)."""
    from schemas.common import Contract, TenantId

    class _Tenant(Contract):
        tenant: TenantId

    if tenant:
        try:
            _Tenant(tenant=tenant)
        except ValidationError as exc:
            _usage_error(_first_error(exc))


def _ui_link(settings: Settings, workflow_id: str) -> str:
    return f"{settings.temporal.ui_url}/namespaces/{settings.temporal.namespace}/workflows/{workflow_id}"


@app.command()
def up(
    no_workers: Annotated[bool, typer.Option("--no-workers", help="Start servers only.")] = False,
    no_llm: Annotated[bool, typer.Option("--no-llm", help="Skip the LLM worker.")] = False,
    no_gateway: Annotated[
        bool, typer.Option("--no-gateway", help="Skip the HTTP gateway.")
    ] = False,
) -> None:
    """Start the embedded stack (Temporal dev server, Postgres, workers, gateway); idempotent."""
    from durable_rag.stack import EmbeddedStack, StackError

    try:
        EmbeddedStack(_settings()).up(
            workers=not no_workers,
            llm=not no_llm,
            gateway=not no_gateway and not no_workers,
            echo=console.print,
        )
    except StackError as exc:
        _fail(str(exc))


@app.command()
def down() -> None:
    """Stop every part of the embedded stack that `up` started, by PID."""
    from durable_rag.stack import EmbeddedStack, StackError

    try:
        EmbeddedStack(_settings()).down(echo=console.print)
    except StackError as exc:
        _fail(str(exc))


@app.command()
def status() -> None:
    """Show which parts of the embedded stack run. Exit 1 if any that was started is down."""
    from durable_rag.stack import EmbeddedStack, StackError

    try:
        stack = EmbeddedStack(_settings())
    except StackError as exc:
        _fail(str(exc))
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
        for line in stack.urls():
            console.print(line)
    else:
        raise typer.Exit(1)


@app.command()
def worker(
    kind: Annotated[str, typer.Argument(help="orchestrator | index | llm")],
) -> None:
    """Run one worker in the foreground (what `up` and docker-compose start)."""
    settings = _settings()
    if kind == "orchestrator":
        from workers.orchestrator import main
    elif kind == "index":
        from workers.index import main
    elif kind == "llm":
        from workers.llm import main
    else:
        _usage_error(f"unknown worker kind {kind!r}; choose orchestrator, index or llm")
    asyncio.run(main(settings))


@app.command()
def migrate() -> None:
    """Apply Alembic migrations (alembic upgrade head) to the configured database."""
    from durable_rag.stack import migrate as run_migrations

    run_migrations(_settings().postgres.sqlalchemy_url)
    console.print("migrated")


@app.command()
def ingest(
    paths: Annotated[list[Path], typer.Argument(help="Files or folders (md, txt, html, pdf).")],
    tenant: Annotated[str | None, typer.Option(help="Tenant; default from settings.")] = None,
) -> None:
    """Ingest documents durably, with a progress bar; prints per-document errors."""
    from schemas.ingest import IngestProgress

    settings = _settings()
    missing = [str(p) for p in paths if not _exists(p)]
    if missing:
        _usage_error(f"no such file or directory: {', '.join(missing)}")
    _check_tenant(tenant)

    async def run() -> None:
        rag = await _connect(settings)
        try:
            request = rag.ingest_request([str(p) for p in paths], tenant)
        except ValidationError as exc:
            _usage_error(str(exc))
        workflow_id = ids.ingest_workflow_id(request)
        console.print(f"workflow {workflow_id}\n  {_ui_link(settings, workflow_id)}")
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        ) as bar:
            task = bar.add_task("starting", total=None)

            async def show(progress: IngestProgress) -> None:
                t = progress.totals
                bar.update(
                    task,
                    description=progress.stage,
                    completed=t.documents_done,
                    total=t.documents_total or None,
                )

            result = await rag.ingest(request.paths, request.tenant, on_progress=show)
        t = result.totals
        console.print(
            f"documents: {t.documents_ingested} ingested, {t.documents_unchanged} unchanged, "
            f"{t.documents_failed} failed of {t.documents_total}; chunks indexed {t.chunks_indexed}, "
            f"passages embedded {t.passages_embedded}"
        )
        for failure in result.failures:
            console.print(f"  [yellow]{failure.kind}[/yellow] {failure.source}: {failure.message}")
        for note in result.degradations:
            console.print(f"  [yellow]degraded[/yellow] {escape(note)}")

    asyncio.run(run())


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="The question or text to look for.")],
    tenant: Annotated[str | None, typer.Option(help="Tenant; default from settings.")] = None,
    top_k: Annotated[int, typer.Option("--top-k", "-k", help="Passages to return (1-100).")] = 5,
    mode: Annotated[
        str | None,
        typer.Option(help="hybrid, dense or keyword; default from settings (retrieval_mode)."),
    ] = None,
) -> None:
    """Retrieve the best passages for a query, with scores and source locations."""
    import uuid

    from schemas.search import SearchRequest

    settings = _settings()
    try:
        checked = SearchRequest.model_validate(
            {
                "tenant": tenant or settings.default_tenant,
                "query": query,
                "top_k": top_k,
                "mode": mode,
            }
        )
    except ValidationError as exc:
        _usage_error(_first_error(exc))

    async def run() -> None:
        rag = await _connect(settings)
        trace = uuid.uuid4().hex[:16]
        response = await rag.search(query, tenant, top_k, trace_id=trace, mode=checked.mode)
        console.print(
            f"[bold]{escape(query)}[/bold]   trace {response.trace_id}   ({response.retrieval})"
        )
        for note in response.degradations:
            console.print(f"[yellow]degraded:[/yellow] {escape(note)}")
        if not response.passages:
            console.print("no passages found")
        for rank, p in enumerate(response.passages, start=1):
            location = f"{p.source}:{p.char_start}-{p.char_end}"
            # The heading path usually starts with the document's title: show it once.
            path = (
                p.heading_path
                if p.heading_path.startswith(p.title)
                else f"{p.title} › {p.heading_path}"
            )
            console.print(
                f"\n[bold]{rank}. score {p.score:.3f}[/bold]  {escape(path)}\n   {escape(location)}"
            )
            snippet = " ".join(p.text.split())
            console.print(f"   {escape(snippet[:300])}{'…' if len(snippet) > 300 else ''}")
        steps = ", ".join(f"{k} {v:.0f} ms" for k, v in response.timings_ms.items())
        console.print(f"\ntimings: {steps}\nrun: {_ui_link(settings, response.trace_id)}")

    asyncio.run(run())


@app.command()
def ask(
    question: Annotated[str, typer.Argument(help="The question.")],
    tenant: Annotated[str | None, typer.Option(help="Tenant; default from settings.")] = None,
    top_k: Annotated[int, typer.Option("--top-k", "-k", help="Passages in the prompt (1-20).")] = 5,
    max_tokens: Annotated[int, typer.Option("--max-tokens", help="Answer length bound.")] = 256,
) -> None:
    """Answer a question from the ingested documents, with citations."""
    import uuid

    from schemas.answer import AskRequest

    settings = _settings()
    try:
        request = AskRequest(
            tenant=tenant or settings.default_tenant,
            question=question,
            top_k=top_k,
            max_answer_tokens=max_tokens,
        )
    except ValidationError as exc:
        _usage_error(_first_error(exc))

    async def run() -> None:
        from temporalio.client import WorkflowFailureError

        rag = await _connect(settings)
        trace = uuid.uuid4().hex[:16]
        try:
            answer = await rag.ask(request, trace_id=trace)
        except ValueError as exc:
            _usage_error(str(exc))
        except WorkflowFailureError as exc:
            _usage_error(_root_cause(exc))
        console.print(f"[bold]{escape(question)}[/bold]\n\n{escape(answer.answer)}\n")
        for c in answer.citations:
            console.print(
                f"  [{c.number}] {escape(c.title)} › {escape(c.heading_path)}\n      "
                f"{escape(c.source)}:{c.char_start}-{c.char_end}"
            )
        if not answer.citations:
            console.print("  (no citations)")
        console.print(
            f"\nmodel {answer.model or '-'} via {answer.route}; retrieval {answer.retrieval}; "
            f"tokens {answer.tokens.prompt} in, {answer.tokens.completion} out"
        )
        for note in answer.degradations:
            console.print(f"  [yellow]degraded[/yellow] {escape(note)}")
        steps = ", ".join(f"{k} {v:.0f} ms" for k, v in answer.timings_ms.items())
        console.print(f"timings: {steps}\nrun: {_ui_link(settings, answer.trace_id)}")

    asyncio.run(run())


def _print_answer_body(answer: Answer) -> None:
    console.print(f"{escape(answer.answer)}\n")
    for c in answer.citations:
        console.print(
            f"  [{c.number}] {escape(c.title)} › {escape(c.heading_path)}\n      "
            f"{escape(c.source)}:{c.char_start}-{c.char_end}"
        )
    for note in answer.degradations:
        console.print(f"  [yellow]degraded[/yellow] {escape(note)}")


@app.command()
def chat(
    conversation: Annotated[
        str | None,
        typer.Option("--conversation", "-c", help="Conversation id; a new one when omitted."),
    ] = None,
    tenant: Annotated[str | None, typer.Option(help="Tenant; default from settings.")] = None,
    message: Annotated[
        list[str] | None,
        typer.Option("--message", "-m", help="Send these messages instead of reading stdin."),
    ] = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", help="Answer length bound.")] = 256,
) -> None:
    """Talk with the documents: one conversation, turn after turn, history kept in Postgres."""
    import uuid

    from schemas.conversation import ChatRequest

    settings = _settings()
    conversation_id = conversation or f"chat-{uuid.uuid4().hex[:12]}"
    tenant_name = tenant or settings.default_tenant
    try:
        ChatRequest(
            tenant=tenant_name,
            conversation_id=conversation_id,
            message="?",
            max_answer_tokens=max_tokens,
        )
        for text in message or []:
            ChatRequest(tenant=tenant_name, conversation_id=conversation_id, message=text)
    except ValidationError as exc:
        _usage_error(_first_error(exc))

    async def run() -> None:
        from temporalio.client import WorkflowUpdateFailedError

        rag = await _connect(settings)
        workflow_id = ids.conversation_workflow_id(tenant_name, conversation_id)
        console.print(
            f"conversation [bold]{conversation_id}[/bold] "
            f"(run: {_ui_link(settings, workflow_id)}); an empty line ends it"
        )
        interactive = message is None
        pending = list(message or [])
        while True:
            if interactive:
                try:
                    text = console.input("[bold]you>[/bold] ").strip()
                except EOFError:
                    break
            elif pending:
                text = pending.pop(0)
                console.print(f"[bold]you>[/bold] {escape(text)}")
            else:
                break
            if not text:
                break
            try:
                reply = await rag.chat(
                    conversation_id, text, tenant=tenant_name, max_answer_tokens=max_tokens
                )
            except ValueError as exc:
                _usage_error(str(exc))
            except WorkflowUpdateFailedError as exc:
                _fail(_root_cause(exc))
            console.print("[bold]assistant>[/bold] ", end="")
            _print_answer_body(reply.answer)
        console.print(f"history: durable-rag history {conversation_id}")

    asyncio.run(run())


@app.command()
def delete(
    document_id: Annotated[str, typer.Argument(help="Document id (a UUID, as search prints).")],
    tenant: Annotated[str | None, typer.Option(help="Tenant; default from settings.")] = None,
) -> None:
    """Delete a document: no retrieval path returns it once this returns; its chunks and vector
    points are removed. Deleting twice is harmless."""
    import uuid

    from temporalio.client import WorkflowFailureError
    from temporalio.exceptions import ApplicationError

    from durable_rag.client import failure_cause
    from ragkit import policies

    settings = _settings()
    try:
        doc = uuid.UUID(document_id)
    except ValueError:
        _usage_error(f"{document_id!r} is not a document id (a UUID)")
    _check_tenant(tenant)

    async def run() -> None:
        rag = await _connect(settings)
        try:
            done = await rag.delete_document(doc, tenant)
        except WorkflowFailureError as exc:
            cause = failure_cause(exc)
            if isinstance(cause, ApplicationError) and cause.type == policies.NOT_FOUND:
                _usage_error(cause.message)
            _fail(f"the delete failed: {cause}")
        state = "was already deleted" if done.already_deleted else "deleted"
        console.print(
            f"{done.source} ({done.document_id}) {state}; {done.chunks_removed} chunk(s) removed"
        )
        console.print(f"run: {_ui_link(settings, done.workflow_id)}")

    asyncio.run(run())


@app.command()
def compact(
    batch_size: Annotated[
        int | None, typer.Option(min=10, max=100_000, help="Rows or points per step.")
    ] = None,
) -> None:
    """Compact now: remove dead chunk rows and index points, optimize the index, VACUUM."""
    settings = _settings()

    async def run() -> None:
        rag = await _connect(settings)
        report = await rag.compact(batch_size)
        console.print(
            f"removed {report.chunks_removed} chunk row(s) and {report.points_removed} index "
            f"point(s); index {report.points_before} -> {report.points_after} points, chunks "
            f"{report.chunks_before} -> {report.chunks_after} rows ({report.live_chunks} live); "
            f"counts {'match' if report.counts_match else 'DIFFER'}"
        )
        for degradation in report.degradations:
            console.print(f"[yellow]degraded:[/yellow] {degradation}")

    asyncio.run(run())


@app.command()
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
    from temporalio.client import WorkflowFailureError

    from durable_rag.client import failure_cause

    settings = _settings()

    async def run() -> None:
        rag = await _connect(settings)
        handle = await rag.start_rebuild(grace)
        console.print(f"rebuild running: {_ui_link(settings, handle.id)}")
        if not wait:
            return
        try:
            report = await handle.result()
        except WorkflowFailureError as exc:
            _fail(str(failure_cause(exc)))
        console.print(
            f"{report.active} is active ({report.points} points, {report.chunks_copied} chunks "
            f"copied, {report.verified.added} added and {report.verified.removed} removed at "
            f"verification); {report.previous} "
            + ("dropped" if report.dropped_previous else "NOT dropped: see the run")
        )

    asyncio.run(run())


costs_app = typer.Typer(help="What answers cost: engine seconds and tokens (R26).")
app.add_typer(costs_app, name="costs")


@costs_app.command("top")
def costs_top(
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, max=1_000)] = 10,
    days: Annotated[float, typer.Option(min=0.01, max=3_650, help="How far back.")] = 7,
) -> None:
    """The most expensive answers, then totals per model, per tenant and per day."""
    from ragkit.store import costs, feedback

    settings = _settings()
    sessions = _key_sessions(settings)
    since = costs.since_days(days)
    with sessions() as session:
        rows = costs.top(session, limit, since)
        totals = {by: costs.totals(session, by, since) for by in ("model", "tenant", "day")}
        votes = feedback.tally(session, since)
    console.print(f"[bold]Most expensive answers, last {days:g} day(s)[/bold]")
    console.print(f"{'engine s':>9} {'tokens in':>9} {'out':>6} {'tenant':<12} {'model':<24} trace")
    for row in rows:
        console.print(
            f"{row.engine_seconds:>9.3f} {row.prompt_tokens:>9} {row.completion_tokens:>6} "
            f"{row.tenant:<12} {row.model:<24} {row.trace_id}"
        )
    console.print(
        f"\nfeedback: {votes.up} up, {votes.down} down"
        + (f" ({votes.approval:.0%} approval)" if votes.approval is not None else "")
    )
    for by, found in totals.items():
        console.print(f"\n[bold]Per {by}[/bold]")
        console.print(f"{by:<24} {'answers':>8} {'engine s':>10} {'tokens in':>10} {'out':>8}")
        for total in found:
            console.print(
                f"{total.key:<24} {total.answers:>8} {total.engine_seconds:>10.3f} "
                f"{total.prompt_tokens:>10} {total.completion_tokens:>8}"
            )


@app.command("feedback")
def feedback_cmd(
    trace_id: Annotated[str, typer.Argument(help="The trace id the answer came back with.")],
    rating: Annotated[str, typer.Argument(help="up or down")],
    comment: Annotated[str, typer.Option(help="Why, in a few words.")] = "",
    tenant: Annotated[str | None, typer.Option(help="Tenant; default from settings.")] = None,
) -> None:
    """Record a thumbs up or down on an answer; the latest vote counts."""
    from ragkit.store import feedback

    if rating not in feedback.RATINGS:
        _usage_error(f"rating must be 'up' or 'down', not {rating!r}")
    if len(comment) > 2_000:
        _usage_error("the comment is over 2000 characters")
    settings = _settings()
    try:
        replaced = feedback.record(
            _key_sessions(settings), tenant or settings.default_tenant, trace_id, rating, comment
        )
    except feedback.UnknownAnswer as exc:
        _usage_error(str(exc))
    console.print(f"{'replaced the vote' if replaced else 'recorded'}: {rating} on {trace_id}")


@app.command("eval")
def eval_cmd(
    set_name: Annotated[str, typer.Argument(help="A set in evals/sets, e.g. answers-smoke.")],
    gate: Annotated[
        bool, typer.Option(help="Exit 1 when a metric drops beyond its baseline's tolerance.")
    ] = False,
    save_baseline: Annotated[
        bool, typer.Option(help="Store this run's metrics as the set's baseline.")
    ] = False,
    tenant: Annotated[str, typer.Option(help="Tenant the corpus is ingested as.")] = "eval",
    corpus: Annotated[
        Path, typer.Option(help="Documents the set's cases are about.")
    ] = BUNDLED_CORPUS,
    concurrency: Annotated[int, typer.Option(min=1, max=64)] = 4,
) -> None:
    """Evaluate the answer flow on a case set (R25): retrieval recall@k, MRR, nDCG@10, citation
    precision, fact coverage, refusal accuracy, latency. The report goes to Postgres and to a
    Markdown file under the data directory."""
    from evals import answers

    try:
        cases = answers.load_set(set_name)
        baseline = answers.load_baseline(set_name) if gate else None
    except ValueError as exc:
        _usage_error(str(exc))
    if not _exists(corpus, folder=True):
        _usage_error(f"no corpus folder {corpus}")
    _check_tenant(tenant)
    settings = _settings()

    async def run() -> EvalReport:
        rag = await _connect(settings)
        ingested = await rag.ingest([str(corpus)], tenant=tenant)
        if ingested.failures:
            _fail(f"{len(ingested.failures)} corpus document(s) failed to ingest")
        return await rag.evaluate(set_name, cases, tenant, concurrency)

    report = asyncio.run(run())
    regressions = answers.compare(report.metrics, baseline) if baseline else None
    path = settings.data_dir / "evals" / f"{report.workflow_id}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(answers.markdown(report, regressions))
    for name, value in report.metrics.model_dump().items():
        console.print(f"{name:<20} {value}")
    console.print(f"report: {path}  (run {_ui_link(settings, report.workflow_id)})")
    if save_baseline:
        console.print(f"baseline saved: {answers.save_baseline(set_name, report.metrics)}")
    if regressions:
        for regression in regressions:
            err.print(f"[red]gate:[/red] {regression}")
        raise typer.Exit(1)
    if regressions is not None:
        console.print("gate: pass")


shadow_app = typer.Typer(
    help="Shadow mode: a candidate configuration on sampled live requests (R28).",
    no_args_is_help=True,
)
app.add_typer(shadow_app, name="shadow")


@shadow_app.command("report")
def shadow_report(
    days: Annotated[float, typer.Option(min=0.01, max=3_650, help="How far back.")] = 7,
) -> None:
    """Candidate against live: agreement, citation overlap, latency and cost per answer."""
    from ragkit.store import costs

    settings = _settings()
    with _key_sessions(settings)() as session:
        report = costs.shadow_report(session, costs.since_days(days))
    if not report:
        console.print(
            f"no shadow runs in the last {days:g} day(s): set DURABLE_RAG_SHADOW_SAMPLE_RATE "
            "and DURABLE_RAG_SHADOW_MODEL (or _SHADOW_PROMPT)"
        )
        return
    console.print(
        f"{'candidate':<36} {'pairs':>6} {'agree':>6} {'similar':>8} {'cites':>6} "
        f"{'p50 ms live/cand':>18} {'engine s live/cand':>20}"
    )
    for row in report:
        console.print(
            f"{row.candidate:<36} {row.pairs:>6} {row.agreement:>6.0%} "
            f"{row.answer_similarity:>8.2f} {row.citation_overlap:>6.2f} "
            f"{row.live_p50_ms:>8.0f} / {row.candidate_p50_ms:<7.0f} "
            f"{row.live_engine_seconds:>9.3f} / {row.candidate_engine_seconds:<8.3f}"
        )


models_app = typer.Typer(
    help="Which model answers by default; swap it with no request dropped (R13).",
    no_args_is_help=True,
)
app.add_typer(models_app, name="models")


@models_app.command("active")
def models_active() -> None:
    """The served model new answers go to."""
    from ragkit.store import model_alias

    settings = _settings()
    console.print(model_alias.active(_key_sessions(settings), settings.llm.name))


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
    from durable_rag import model_swap as models
    from durable_rag.stack import worker_process

    if not re.fullmatch(r"[a-z0-9._-]{1,64}", model):
        _usage_error(f"{model!r} is not a served model name (a-z, 0-9, '.', '_', '-')")
    settings = _settings()
    sessions = _key_sessions(settings)
    embedded = worker_process(settings.data_dir, "llm")

    async def stop(previous: str) -> None:
        if previous == settings.llm.name and embedded.running():
            console.print(f"draining the worker of {previous} (pid {embedded.pid()})")
            await asyncio.to_thread(embedded.stop, settings.worker.drain_seconds + 10)
        else:
            console.print(f"stop the worker of {previous} now: on SIGTERM it drains, then exits")

    async def run() -> models.SwapReport:
        rag = await _connect(settings)
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
        _fail(str(exc))
    console.print(
        f"{report.model} is the default model (was {report.previous}); its worker was ready "
        f"after {report.waited_seconds:.1f} s, earlier answers closed after "
        f"{report.settled_seconds:.1f} s, the old worker stopped after "
        f"{report.drained_seconds:.1f} s"
    )


schedules_app = typer.Typer(
    help="Temporal Schedules for index maintenance, from settings.", no_args_is_help=True
)
app.add_typer(schedules_app, name="schedules")


@schedules_app.command("apply")
def schedules_apply() -> None:
    """Create or update the schedules from settings (DURABLE_RAG_COMPACTION_CRON); idempotent."""
    from durable_rag import schedules

    settings = _settings()

    async def run() -> None:
        rag = await _connect(settings)
        for schedule_id, outcome in await schedules.apply(rag.client, settings):
            console.print(f"{outcome:<10} {schedule_id}")

    asyncio.run(run())


@schedules_app.command("list")
def schedules_list() -> None:
    """Show the schedules, their next runs and their recent runs."""
    from durable_rag import schedules

    settings = _settings()

    async def run() -> None:
        rag = await _connect(settings)
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
    from durable_rag import schedules

    settings = _settings()

    async def run() -> None:
        rag = await _connect(settings)
        try:
            await schedules.trigger(rag.client, schedule_id)
        except ValueError as exc:
            _usage_error(str(exc))
        console.print(f"triggered {schedule_id}; see {settings.temporal.ui_url}/namespaces/"
                      f"{settings.temporal.namespace}/schedules/{schedule_id}")  # fmt: skip

    asyncio.run(run())


@app.command()
def history(
    conversation: Annotated[str, typer.Argument(help="Conversation id.")],
    tenant: Annotated[str | None, typer.Option(help="Tenant; default from settings.")] = None,
    delete: Annotated[
        bool, typer.Option("--delete", help="Delete the conversation, its turns and summaries.")
    ] = False,
) -> None:
    """Show a stored conversation turn by turn, or delete it."""
    from schemas.conversation import ConversationKey

    settings = _settings()
    try:
        key = ConversationKey(
            tenant=tenant or settings.default_tenant, conversation_id=conversation
        )
    except ValidationError as exc:
        _usage_error(_first_error(exc))

    async def run() -> None:
        rag = await _connect(settings)
        if delete:
            removed = await rag.delete_conversation(key.conversation_id, key.tenant)
            console.print(f"deleted conversation {conversation}: {removed} turn(s)")
            return
        stored = await rag.history(key.conversation_id, key.tenant)
        if stored is None:
            _usage_error(f"no conversation {conversation!r} for tenant {key.tenant!r}")
        console.print(f"[bold]{escape(stored.title)}[/bold]  ({len(stored.turns)} turns)")
        if stored.summary:
            console.print(
                f"summary through turn {stored.summarized_through}: [italic]{stored.summary}[/italic]"
            )
        for turn in stored.turns:
            cited = " ".join(f"[{c.number}] {c.title}" for c in turn.citations)
            console.print(f"\n{turn.ordinal:>3} {turn.role}: {escape(turn.text)}")
            if cited:
                console.print(f"      cites {cited}")
            if turn.trace_id:
                console.print(f"      run {turn.trace_id}, model {turn.model}")

    asyncio.run(run())


@app.command()
def gateway(
    host: Annotated[str | None, typer.Option(help="Bind address; default from settings.")] = None,
    port: Annotated[int | None, typer.Option(help="Port; default from settings.")] = None,
) -> None:
    """Serve the HTTP gateway (FastAPI on uvicorn); OpenAPI at /docs."""
    from gateway.server import serve

    serve(_settings(), host, port)


keys_app = typer.Typer(
    help="Gateway API keys: one tenant each, stored hashed.", no_args_is_help=True
)
app.add_typer(keys_app, name="keys")


def _key_sessions(settings: Settings) -> Any:
    from ragkit.db import make_sessionmaker

    return make_sessionmaker(settings.postgres.sqlalchemy_url)


@keys_app.command("create")
def keys_create(
    tenant: Annotated[str, typer.Option(help="The tenant this key acts as.")],
    name: Annotated[str, typer.Option(help="A label, to tell keys apart.")] = "",
) -> None:
    """Create a key; it is printed once and cannot be shown again."""
    from ragkit.store import keys
    from schemas.common import Contract, TenantId

    class _Check(Contract):
        tenant: TenantId

    settings = _settings()
    try:
        _Check(tenant=tenant)
    except ValidationError as exc:
        _usage_error(_first_error(exc))
    if len(name) > 128:
        _usage_error("name: at most 128 characters")
    info, key = keys.create_key(_key_sessions(settings), tenant, name)
    console.print(f"key {info.prefix}… (id {info.id}) for tenant {info.tenant}:")
    print(key)


@keys_app.command("list")
def keys_list(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's keys.")] = None,
) -> None:
    """List keys (prefix, tenant, name, created, revoked); never the keys themselves."""
    from ragkit.store import keys

    for info in keys.list_keys(_key_sessions(_settings()), tenant):
        state = "revoked" if info.revoked else "active"
        console.print(
            f"{info.prefix}…  {info.id}  tenant={info.tenant}  {info.name!r}  "
            f"{info.created_at:%Y-%m-%d %H:%M}  {state}"
        )


@keys_app.command("revoke")
def keys_revoke(
    key_id: Annotated[str, typer.Argument(help="The key's id or its listed prefix.")],
) -> None:
    """Revoke a key: requests with it get 401 from then on."""
    from ragkit.store import keys

    info = keys.revoke_key(_key_sessions(_settings()), key_id)
    if info is None:
        _usage_error(f"no single key matches {key_id!r}; see `durable-rag keys list`")
    console.print(f"revoked {info.prefix}… of tenant {info.tenant}")


def _root_cause(exc: BaseException) -> str:
    """The innermost failure of a workflow error, as `Type: message`."""
    from temporalio.exceptions import ApplicationError

    from durable_rag.client import failure_cause

    cause = failure_cause(exc)
    if isinstance(cause, ApplicationError):
        return f"{cause.type}: {cause.message}"
    return str(cause)


def _first_error(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(x) for x in first["loc"])
    return f"{where}: {first['msg']}"


async def _connect(settings: Settings) -> RagClient:

    from durable_rag.client import RagClient

    try:
        return await RagClient.connect(settings)
    except RuntimeError as exc:
        _fail(
            f"cannot reach Temporal at {settings.temporal.address} ({exc}); "
            "is the stack up? run `durable-rag up`"
        )


def main() -> None:
    code: int | str | None = 0
    try:
        app()
    except KeyboardInterrupt:
        code = 130
    except SystemExit as exc:
        code = exc.code
    # Leave without interpreter finalization: native threads of the Temporal and gRPC runtimes
    # can still be releasing the GIL then, which aborts the process (SIGABRT, "PyGILState_Release
    # ... finalizing") after the command has already succeeded. Nothing here needs atexit.
    if isinstance(code, str):
        print(code, file=sys.stderr)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)


if __name__ == "__main__":
    main()
