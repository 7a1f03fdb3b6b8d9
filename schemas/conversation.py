"""Contracts of the conversation flow (R16, R17)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Literal

from pydantic import Field

from schemas.answer import Answer, AnswerPlan, Citation, stream_id_field
from schemas.common import Contract, TenantId

CONVERSATION_ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,128}$"


class ChatRequest(Contract):
    """One user message to a conversation. Every field is bounded (R4)."""

    tenant: TenantId = "default"
    conversation_id: str = Field(pattern=CONVERSATION_ID_PATTERN)
    message: str = Field(min_length=1, max_length=8_000)
    message_id: str = Field(
        default_factory=lambda: uuid.uuid4().hex,
        pattern=r"^[A-Za-z0-9_.:-]{1,128}$",
        description="Idempotency key: a retried send with the same id is applied once.",
    )
    top_k: int = Field(default=5, ge=1, le=20)
    max_answer_tokens: int = Field(default=256, ge=1, le=4_096)
    stream_id: str = stream_id_field()
    model: str = Field(
        default="",
        pattern=r"^[a-z0-9._-]{0,64}$",
        description="The default model when the message was sent (a swap reaches running "
        "conversations); empty: the conversation's plan.",
    )
    context_tokens: int = Field(
        default=0,
        ge=0,
        le=1_048_576,
        description="The passages' budget for this message's model and answer length (the "
        "context its worker serves); 0: the conversation's plan.",
    )


class TurnMessage(Contract):
    ordinal: int = Field(ge=0)
    role: Literal["user", "assistant"]
    text: str


class WindowPlan(Contract):
    """How much history goes into a prompt, decided by settings, carried by the workflow."""

    history_tokens: int = Field(ge=32, le=1_000_000, description="Budget: summary + turns.")
    summary_tokens: int = Field(ge=16, le=100_000, description="Most tokens a summary may use.")
    summary_model: str = Field(description="Served name of the model that summarizes.")
    idle_seconds: float = Field(ge=1, le=30 * 86_400)
    turns_per_run: int = Field(ge=2, le=10_000, description="Turns before continue-as-new.")
    # Both 0 in runs started before they existed: such a run folds and trims as it did.
    fold_headroom: float = Field(
        default=0.0,
        ge=0,
        le=0.4,
        description="Fold once the verbatim turns pass (1 - this) of their budget, so turns "
        "that arrive during the fold still fit.",
    )
    fold_wait_seconds: float = Field(
        default=0.0,
        ge=0,
        le=600,
        description="How long a turn that would leave earlier turns out waits for the fold in "
        "flight to make room.",
    )


class ConversationInput(Contract):
    tenant: TenantId
    conversation_id: str = Field(pattern=CONVERSATION_ID_PATTERN)
    plan: AnswerPlan
    window: WindowPlan


class ChatUpdate(Contract):
    """The argument of the `send` update."""

    request: ChatRequest


class ChatReply(Contract):
    conversation_id: str
    turn: int = Field(description="Ordinal of the assistant's turn.")
    answer: Answer
    summarized_through: int = Field(
        description="Ordinal of the last turn folded into the summary (-1: none)."
    )
    history_turns: int = Field(description="Earlier turns carried verbatim into the prompt.")
    history_tokens: int = Field(description="Estimated tokens of the summary and those turns.")
    history_dropped: int = Field(description="Unsummarized turns left out to fit the budget.")


class ConversationState(Contract):
    """What the `state` query shows of the workflow's cache."""

    next_ordinal: int
    summary: str
    summarized_through: int
    window_turns: int
    turns_this_run: int
    summarizing: bool
    summary_failures: int


# --- activity contracts -----------------------------------------------------------------------


class ConversationKey(Contract):
    tenant: TenantId
    conversation_id: str = Field(pattern=CONVERSATION_ID_PATTERN)


# What a conversation that is closing after a delete answers any update with (its validators).
DELETED_CONVERSATION = "this conversation was deleted"


class TurnToCancel(Contract):
    """The argument of the `cancel_turn` signal: the conversation, tenant first, and the message
    whose turn stops."""

    tenant: TenantId
    conversation_id: str = Field(pattern=CONVERSATION_ID_PATTERN)
    message_id: str = Field(min_length=1, max_length=128)


class LoadedConversation(Contract):
    """What the workflow caches of Postgres: the summary and the turns after it."""

    exists: bool
    summary: str = ""
    facts: list[str] = Field(default_factory=list)
    summarized_through: int = -1
    turns: list[TurnMessage] = Field(default_factory=list)
    next_ordinal: int = 0


class AppendTurnInput(ConversationKey):
    ordinal: int = Field(ge=0)
    role: Literal["user", "assistant"]
    text: str = Field(max_length=100_000)
    message_id: str = ""
    citations: list[Citation] = Field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    trace_id: str = ""
    model: str = ""
    degradations: list[str] = Field(default_factory=list)


class SummarizeInput(Contract):
    trace_id: str = Field(max_length=256)
    previous_summary: str = Field(max_length=100_000)
    turns: list[TurnMessage] = Field(min_length=1, max_length=1_000)
    max_tokens: int = Field(ge=16, le=4_096)


class SummarizeOutput(Contract):
    summary: str
    model: str


class SaveSummaryInput(ConversationKey):
    summary: str = Field(max_length=100_000)
    facts: list[str] = Field(default_factory=list, max_length=10_000)
    summarized_through: int = Field(ge=0)


class StoredTurn(Contract):
    ordinal: int
    role: Literal["user", "assistant"]
    text: str
    citations: list[Citation]
    trace_id: str
    model: str
    degradations: list[str]
    prompt_tokens: int
    completion_tokens: int
    created_at: datetime


class ConversationHistory(Contract):
    tenant: TenantId
    conversation_id: str
    title: str
    summary: str = Field(description="As prompts show it: pinned user statements, then the rest.")
    summarized_through: int
    turns: list[StoredTurn]


class ForgetConversationInput(Contract):
    """A conversation to delete with what its answers left (`forget_conversation`): `answers_named`
    is what the conversation named its turns' answers after (ragkit.ids.turn_answer_workflow_id)."""

    key: ConversationKey
    answers_named: str = Field(min_length=1, max_length=400)


class ForgottenConversation(Contract):
    """What deleting a conversation removed from Postgres, and the runs whose histories carried
    its text: every turn's answer (by its user turn's ordinal) and the answers' own trace ids."""

    turns_removed: int
    user_ordinals: list[int] = Field(default_factory=list)
    answer_trace_ids: list[str] = Field(default_factory=list)
    rows_removed: dict[str, int] = Field(
        default_factory=dict, description="Rows removed per table, beside the turns."
    )
