"""Answers: `ask` one question, `chat` turn after turn, a conversation's `history`, and
`feedback` on an answer."""

from __future__ import annotations

import asyncio
import uuid
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.markup import escape

from cli.common import (
    CreatedAfter,
    CreatedBefore,
    Meta,
    UpdatedAfter,
    UpdatedBefore,
    cited,
    connect,
    console,
    db_sessions,
    document_filter,
    fail,
    first_error,
    load_settings,
    print_degradations,
    root_cause,
    ui_link,
    usage_error,
)
from ragkit import ids
from schemas.answer import Answer, AskRequest
from schemas.conversation import ChatRequest, ConversationKey


def _print_answer_text(answer: Answer) -> None:
    """The answer's text, then its citations: both quote documents, so both are escaped."""
    console.print(f"{escape(answer.answer)}\n")
    for c in answer.citations:
        console.print(
            f"  [{c.number}] {escape(cited(c.title, c.heading_path, c.location))}\n      "
            f"{escape(c.source)}:{c.char_start}-{c.char_end}"
        )


def _print_answer_body(answer: Answer) -> None:
    _print_answer_text(answer)
    print_degradations(answer.degradations)


def ask(
    question: Annotated[str, typer.Argument(help="The question.")],
    tenant: Annotated[str | None, typer.Option(help="Tenant; default from settings.")] = None,
    top_k: Annotated[int, typer.Option("--top-k", "-k", help="Passages in the prompt (1-20).")] = 5,
    max_tokens: Annotated[int, typer.Option("--max-tokens", help="Answer length bound.")] = 256,
    created_after: CreatedAfter = None,
    created_before: CreatedBefore = None,
    updated_after: UpdatedAfter = None,
    updated_before: UpdatedBefore = None,
    meta: Meta = None,
) -> None:
    """Answer a question from the ingested documents, with citations."""
    settings = load_settings()
    documents = document_filter(created_after, created_before, updated_after, updated_before, meta)
    try:
        request = AskRequest(
            tenant=tenant or settings.default_tenant,
            question=question,
            top_k=top_k,
            max_answer_tokens=max_tokens,
            filter=documents,
        )
    except ValidationError as exc:
        usage_error(first_error(exc))

    async def run() -> None:
        # lazy: 80 ms, and loaded by connect()
        from temporalio.client import WorkflowFailureError

        from ragkit import tracing

        rag = await connect(settings)
        try:
            with tracing.step(
                "ask", tracing.CHAIN, tracing.content(tracing.INPUT, question)
            ) as span:
                answer = await rag.ask(request)
                trace_id = tracing.trace_id_hex(span)
                tracing.answered(answer)
        except ValueError as exc:
            usage_error(str(exc))
        except WorkflowFailureError as exc:
            usage_error(root_cause(exc))
        console.print(f"[bold]{escape(question)}[/bold]\n")
        _print_answer_text(answer)
        if not answer.citations:
            console.print("  (no citations)")
        console.print(
            f"\nmodel {answer.model or '-'} via {answer.route}; retrieval {answer.retrieval}; "
            f"tokens {answer.tokens.prompt} in, {answer.tokens.completion} out"
        )
        print_degradations(answer.degradations)
        steps = ", ".join(f"{k} {v:.0f} ms" for k, v in answer.timings_ms.items())
        console.print(f"timings: {steps}\nrun: {ui_link(settings, answer.trace_id)}")
        if trace_id:
            console.print(f"trace: {tracing.viewer_link(settings, trace_id)}")

    asyncio.run(run())


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
    settings = load_settings()
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
        usage_error(first_error(exc))

    async def run() -> None:
        # lazy: 80 ms, and loaded by connect()
        from temporalio.client import WorkflowUpdateFailedError

        rag = await connect(settings)
        workflow_id = ids.conversation_workflow_id(tenant_name, conversation_id)
        console.print(
            f"conversation [bold]{conversation_id}[/bold] "
            f"(run: {ui_link(settings, workflow_id)}); an empty line ends it"
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
                usage_error(str(exc))
            except WorkflowUpdateFailedError as exc:
                fail(root_cause(exc))
            console.print("[bold]assistant>[/bold] ", end="")
            _print_answer_body(reply.answer)
        console.print(f"history: durable-rag history {conversation_id}")

    asyncio.run(run())


def history(
    conversation: Annotated[str, typer.Argument(help="Conversation id.")],
    tenant: Annotated[str | None, typer.Option(help="Tenant; default from settings.")] = None,
    delete: Annotated[
        bool, typer.Option("--delete", help="Delete the conversation, its turns and summaries.")
    ] = False,
) -> None:
    """Show a stored conversation turn by turn, or delete it."""
    settings = load_settings()
    try:
        key = ConversationKey(
            tenant=tenant or settings.default_tenant, conversation_id=conversation
        )
    except ValidationError as exc:
        usage_error(first_error(exc))

    async def run() -> None:
        rag = await connect(settings)
        if delete:
            removed = await rag.delete_conversation(key.conversation_id, key.tenant)
            console.print(f"deleted conversation {conversation}: {removed} turn(s)")
            return
        stored = await rag.history(key.conversation_id, key.tenant)
        if stored is None:
            usage_error(f"no conversation {conversation!r} for tenant {key.tenant!r}")
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


def feedback_cmd(
    trace_id: Annotated[str, typer.Argument(help="The trace id the answer came back with.")],
    rating: Annotated[str, typer.Argument(help="up or down")],
    comment: Annotated[str, typer.Option(help="Why, in a few words.")] = "",
    tenant: Annotated[str | None, typer.Option(help="Tenant; default from settings.")] = None,
) -> None:
    """Record a thumbs up or down on an answer; the latest vote counts."""
    from ragkit.store import feedback  # lazy: SQLAlchemy, 0.2 s

    if rating not in feedback.RATINGS:
        usage_error(f"rating must be 'up' or 'down', not {rating!r}")
    if len(comment) > 2_000:
        usage_error("the comment is over 2000 characters")
    settings = load_settings()
    try:
        replaced = feedback.record(
            db_sessions(settings), tenant or settings.default_tenant, trace_id, rating, comment
        )
    except feedback.UnknownAnswer as exc:
        usage_error(str(exc))
    console.print(f"{'replaced the vote' if replaced else 'recorded'}: {rating} on {trace_id}")
