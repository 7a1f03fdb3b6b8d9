"""Documents: `ingest` them, `search` their passages, `delete` one."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from temporalio.exceptions import ApplicationError

from cli.common import (
    CreatedAfter,
    CreatedBefore,
    Meta,
    UpdatedAfter,
    UpdatedBefore,
    check_tenant,
    cited,
    connect,
    console,
    document_filter,
    exists,
    fail,
    first_error,
    load_settings,
    print_degradations,
    ui_link,
    usage_error,
)
from ragkit import ids, policies
from schemas.ingest import IngestProgress, describe_skipped
from schemas.search import SearchRequest


def ingest(
    paths: Annotated[
        list[Path],
        typer.Argument(
            help="Files or folders: Markdown, text, HTML, PDF, Word (.docx), PowerPoint (.pptx), "
            "Excel (.xlsx), CSV, TSV."
        ),
    ],
    tenant: Annotated[str | None, typer.Option(help="Tenant; default from settings.")] = None,
    meta: Meta = None,
) -> None:
    """Ingest documents durably, with a progress bar; prints per-document errors. `--meta`
    pairs go to every document (searches filter on them; new pairs make a new version)."""
    settings = load_settings()
    missing = [str(p) for p in paths if not exists(p)]
    if missing:
        usage_error(f"no such file or directory: {', '.join(missing)}")
    check_tenant(tenant)
    metadata = document_filter(None, None, None, None, meta).metadata

    async def run() -> None:
        rag = await connect(settings)
        try:
            request = rag.ingest_request([str(p) for p in paths], tenant, metadata)
        except ValidationError as exc:
            usage_error(first_error(exc))
        workflow_id = ids.ingest_workflow_id(request)
        console.print(f"workflow {workflow_id}\n  {ui_link(settings, workflow_id)}")
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

            result = await rag.ingest(
                request.paths, request.tenant, on_progress=show, metadata=request.metadata
            )
        t = result.totals
        console.print(
            f"documents: {t.documents_ingested} ingested, {t.documents_unchanged} unchanged, "
            f"{t.documents_failed} failed of {t.documents_total}; chunks indexed {t.chunks_indexed}, "
            f"passages embedded {t.passages_embedded}"
        )
        for failure in result.failures:
            console.print(
                f"  [yellow]{failure.kind}[/yellow] {escape(failure.source)}: "
                f"{escape(failure.message)}"
            )
        for note in result.notes:
            console.print(
                f"  [cyan]partly read[/cyan] {escape(note.source)}: {escape(note.message)}"
            )
        if result.skipped:
            # Soft wrap: a terminal wraps it, and the line stays one line when piped.
            console.print(escape(describe_skipped(result.skipped)), soft_wrap=True)
            for group in result.skipped:
                shown = ", ".join(group.examples)
                more = f" and {group.count - len(group.examples)} more" if group.count > 3 else ""
                console.print(
                    f"  [dim]{escape(group.extension or group.kind)}: {escape(shown)}{more}[/dim]",
                    soft_wrap=True,
                )
        print_degradations(result.degradations)

    asyncio.run(run())


def search(
    query: Annotated[str, typer.Argument(help="The question or text to look for.")],
    tenant: Annotated[str | None, typer.Option(help="Tenant; default from settings.")] = None,
    top_k: Annotated[int, typer.Option("--top-k", "-k", help="Passages to return (1-100).")] = 5,
    mode: Annotated[
        str | None,
        typer.Option(help="hybrid, dense or keyword; default from settings (retrieval_mode)."),
    ] = None,
    created_after: CreatedAfter = None,
    created_before: CreatedBefore = None,
    updated_after: UpdatedAfter = None,
    updated_before: UpdatedBefore = None,
    meta: Meta = None,
) -> None:
    """Retrieve the best passages for a query, with scores and source locations."""
    settings = load_settings()
    documents = document_filter(created_after, created_before, updated_after, updated_before, meta)
    try:
        checked = SearchRequest.model_validate(
            {
                "tenant": tenant or settings.default_tenant,
                "query": query,
                "top_k": top_k,
                "mode": mode,
                "filter": documents,
            }
        )
    except ValidationError as exc:
        usage_error(first_error(exc))

    async def run() -> None:
        rag = await connect(settings)
        response = await rag.search(query, tenant, top_k, mode=checked.mode, documents=documents)
        console.print(
            f"[bold]{escape(query)}[/bold]   trace {response.trace_id}   ({response.retrieval})"
        )
        for note in response.degradations:
            console.print(f"[yellow]degraded:[/yellow] {escape(note)}")
        if not response.passages:
            console.print("no passages found")
        for rank, p in enumerate(response.passages, start=1):
            # The document id is what `delete` takes.
            location = f"{p.source}:{p.char_start}-{p.char_end}  document {p.document_id}"
            path = cited(p.title, p.heading_path, p.location)
            console.print(
                f"\n[bold]{rank}. score {p.score:.3f}[/bold]  {escape(path)}\n   {escape(location)}",
                soft_wrap=True,  # a path stays one line: it can be copied
            )
            snippet = " ".join(p.text.split())
            console.print(f"   {escape(snippet[:300])}{'…' if len(snippet) > 300 else ''}")
        steps = ", ".join(f"{k} {v:.0f} ms" for k, v in response.timings_ms.items())
        console.print(f"\ntimings: {steps}\nrun: {ui_link(settings, response.trace_id)}")

    asyncio.run(run())


def delete(
    document_id: Annotated[str, typer.Argument(help="Document id (a UUID, as search prints).")],
    tenant: Annotated[str | None, typer.Option(help="Tenant; default from settings.")] = None,
) -> None:
    """Delete a document: no retrieval path returns it once this returns; its chunks and vector
    points are removed. Deleting twice is harmless."""
    # lazy: temporalio's client and the workflows, 0.4 s at import.
    from temporalio.client import WorkflowFailureError

    from durable_rag.client import failure_cause

    settings = load_settings()
    try:
        doc = uuid.UUID(document_id)
    except ValueError:
        usage_error(f"{document_id!r} is not a document id (a UUID)")
    check_tenant(tenant)

    async def run() -> None:
        rag = await connect(settings)
        try:
            done = await rag.delete_document(doc, tenant)
        except WorkflowFailureError as exc:
            cause = failure_cause(exc)
            if isinstance(cause, ApplicationError) and cause.type == policies.NOT_FOUND:
                usage_error(cause.message)
            fail(f"the delete failed: {cause}")
        state = "was already deleted" if done.already_deleted else "deleted"
        console.print(
            f"{done.source} ({done.document_id}) {state}; {done.chunks_removed} chunk(s) removed"
        )
        if done.answers_forgotten:
            console.print(
                f"{done.answers_forgotten} answer(s) that read it forgotten "
                f"({done.turns_redacted} conversation reply(ies) redacted); their runs are "
                f"deleted by {done.forget_workflow_id}"
            )
        console.print(f"run: {ui_link(settings, done.workflow_id)}")

    asyncio.run(run())
