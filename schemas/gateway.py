"""HTTP bodies of the gateway. The tenant never comes from a body: it is the API key's."""

from __future__ import annotations

import uuid
from typing import Annotated, Literal

from pydantic import Field, field_validator

from schemas.answer import LogitBias, StopSequence
from schemas.common import Body, Contract, DocumentFilter, Metadata


class AskBody(Body):
    question: str = Field(min_length=1, max_length=8_000)
    document_ids: list[uuid.UUID] = Field(default_factory=list, max_length=100)
    filter: DocumentFilter = Field(
        default_factory=DocumentFilter,
        description="Time range and metadata the documents searched must match.",
    )
    top_k: int = Field(default=5, ge=1, le=20)
    max_answer_tokens: int = Field(default=256, ge=1, le=4_096)
    model: str | None = Field(default=None, pattern=r"^[a-z0-9._-]{1,64}$")


class MessageBody(Body):
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
    builds: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Each worker check: the builds polling its queue (Worker Deployment "
        "Versioning; 'unversioned' for a worker without a build).",
    )


class DocumentBody(Body):
    """A document sent as text (JSON). Uploads (multipart) carry the same fields as a form."""

    name: str = Field(
        min_length=1,
        max_length=200,
        pattern=r"^[A-Za-z0-9 _.,()+-]*[A-Za-z0-9_()+-]\.[A-Za-z0-9]{1,10}$",
        description="File name with its type's suffix (`.md`, `.txt`, `.html`, `.csv`, `.tsv` as "
        "text; `.pdf`, `.docx`, `.pptx`, `.xlsx` as an upload); it is the document's identity: "
        "sending the same name again replaces the document with a new version.",
    )
    text: str = Field(min_length=1, max_length=16_000_000)
    metadata: Metadata = Field(
        default_factory=dict, description="Key/value pairs searches can filter on."
    )


class DocumentAccepted(Contract):
    workflow_id: str = Field(description="The ingest (or delete) run: follow it at /v1/runs/{id}.")
    document_id: uuid.UUID
    duplicate: bool = Field(
        default=False, description="True: this Idempotency-Key was seen; nothing new started."
    )


# --- OpenAI-compatible chat completions -------------------------------------------------------


class TextPart(Body):
    type: Literal["text"]
    text: str = Field(max_length=8_000)


class OpenAIMessage(Body):
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart] = Field(max_length=8_000)
    name: str | None = Field(default=None, max_length=64)

    @property
    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class StreamOptions(Body):
    include_usage: bool = False


class ResponseFormat(Body):
    type: str

    @field_validator("type")
    @classmethod
    def text_only(cls, value: str) -> str:
        if value != "text":
            raise ValueError(
                f"response_format {value!r} is not supported: an answer is text with [n] "
                "citations; only 'text' is accepted"
            )
        return value


class ChatCompletionBody(Body):
    """OpenAI's chat completions request, as far as a retrieval answer can honour it. The
    sampling fields vLLM accepts reach the engine (gateway/openai_compat.py); without them the
    answer is greedy, so it can be reproduced. Any other field is refused (400)."""

    model: str = Field(min_length=1, max_length=64)
    messages: list[OpenAIMessage] = Field(min_length=1, max_length=64)
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1, le=4_096)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=4_096)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    n: int = Field(default=1, ge=1, le=1, description="One choice only.")
    seed: int | None = Field(default=None, ge=-(2**63), le=2**63 - 1)
    # The four-item cap is on the list only: a single stop string may be up to 64 characters.
    stop: StopSequence | Annotated[list[StopSequence], Field(max_length=4)] | None = None
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    logit_bias: dict[int, LogitBias] | None = Field(default=None, max_length=300)
    response_format: ResponseFormat | None = None
    user: str | None = Field(default=None, max_length=256)


class FeedbackBody(Body):
    """A user's verdict on one answer, by the trace id the answer came back with."""

    trace_id: str = Field(min_length=1, max_length=256, pattern=r"^[A-Za-z0-9_.:-]+$")
    rating: Literal["up", "down"]
    comment: str = Field(default="", max_length=2_000)


class FeedbackRecorded(Contract):
    trace_id: str
    rating: Literal["up", "down"]
    replaced: bool = Field(description="True when this vote replaced an earlier one.")
