"""HTTP bodies of the gateway. The tenant never comes from a body: it is the API key's."""

from __future__ import annotations

import uuid

from pydantic import Field

from schemas.common import Contract


class AskBody(Contract):
    question: str = Field(min_length=1, max_length=8_000)
    document_ids: list[uuid.UUID] = Field(default_factory=list, max_length=100)
    top_k: int = Field(default=5, ge=1, le=20)
    max_answer_tokens: int = Field(default=256, ge=1, le=4_096)
    model: str | None = Field(default=None, pattern=r"^[a-z0-9._-]{1,64}$")


class MessageBody(Contract):
    message: str = Field(min_length=1, max_length=8_000)
    message_id: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9_.:-]{1,128}$",
        description="Idempotency key: a retried POST with the same id is applied once.",
    )
    top_k: int = Field(default=5, ge=1, le=20)
    max_answer_tokens: int = Field(default=256, ge=1, le=4_096)


class RunStatus(Contract):
    workflow_id: str
    run_id: str
    workflow_type: str
    status: str
    started_at: str | None
    closed_at: str | None


class Readiness(Contract):
    ready: bool
    checks: dict[str, str] = Field(description="Each dependency: 'ok' or why it is not ready.")
