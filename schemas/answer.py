"""Contracts of the answer flow."""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from pydantic import Field

from schemas.common import Contract, DocumentFilter, TenantId
from schemas.search import RetrievalLabel, RetrievalPlan

ModelName = str  # served model name: lowercase letters, digits, . _ -


# What a request that names neither gets: passages in the prompt, and the answer's length bound.
DEFAULT_TOP_K = 5
DEFAULT_ANSWER_TOKENS = 256


StopSequence = Annotated[str, Field(min_length=1, max_length=64)]
LogitBias = Annotated[float, Field(ge=-100, le=100)]


class Sampling(Contract):
    """How the model picks the answer's tokens: the sampling fields of OpenAI's API that vLLM
    honours, with OpenAI's bounds. The default is greedy, so an answer can be reproduced."""

    temperature: float = Field(default=0.0, ge=0, le=2)
    top_p: float = Field(default=1.0, gt=0, le=1)
    seed: int | None = Field(default=None, ge=-(2**63), le=2**63 - 1)
    stop: list[StopSequence] = Field(
        default_factory=list, max_length=4, description="Generation ends before any of these."
    )
    presence_penalty: float = Field(default=0.0, ge=-2, le=2)
    frequency_penalty: float = Field(default=0.0, ge=-2, le=2)
    logit_bias: dict[int, LogitBias] = Field(
        default_factory=dict, max_length=300, description="Token id -> bias added to its logit."
    )

    @property
    def is_default(self) -> bool:
        return self == Sampling()


class AskRequest(Contract):
    """A question from a caller. Every field is bounded (R4)."""

    tenant: TenantId = "default"
    question: str = Field(min_length=1, max_length=8_000)
    conversation_id: str | None = Field(
        default=None, min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$"
    )
    document_ids: list[uuid.UUID] = Field(
        default_factory=list, max_length=100, description="Only search these documents."
    )
    filter: DocumentFilter = Field(
        default_factory=DocumentFilter, description="Only search documents that match it."
    )
    top_k: int = Field(
        default=DEFAULT_TOP_K, ge=1, le=20, description="Passages placed in the prompt, at most."
    )
    max_answer_tokens: int = Field(default=DEFAULT_ANSWER_TOKENS, ge=1, le=4_096)
    model: str | None = Field(
        default=None, pattern=r"^[a-z0-9._-]{1,64}$", description="Preferred model (served name)."
    )
    sampling: Sampling = Field(default_factory=Sampling)


class PromptTemplate(Contract):
    """One version of the answer prompt (ragkit/prompts/<id>.toml)."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$")
    hash: str = Field(description="sha256 of the template file's bytes (16 hex digits).")
    system: str
    user: str = Field(description="With {history}, {passages} and {question}.")


DEFAULT_HARD_WORDS = (
    "why",
    "how does",
    "how do",
    "explain",
    "compare",
    "difference",
    "versus",
    "vs",
    "analyze",
    "analyse",
    "evaluate",
    "trade-off",
    "tradeoff",
    "pros and cons",
    "step by step",
)


class RoutingPlan(Contract):
    """The router's rules (ragkit/routing.py), from settings."""

    small_model: ModelName
    large_model: ModelName
    max_simple_words: int = Field(default=24, ge=1, le=1_000)
    hard_words: list[str] = Field(default_factory=lambda: list(DEFAULT_HARD_WORDS), max_length=200)
    min_confidence: float = Field(default=0.3, ge=-1.0, le=1.0)


class ShadowPlan(Contract):
    """The candidate configuration a sampled request also runs, in a shadow child (R28)."""

    model: ModelName
    prompt: PromptTemplate
    retrieval: RetrievalPlan | None = Field(default=None, description="None: the live one.")


class AnswerPlan(Contract):
    """What the caller's settings decide for one answer; the workflow reads no settings."""

    model: ModelName
    fallback_model: ModelName = ""
    llm_queue_prefix: str = "llm-"
    context_tokens: int = Field(ge=64, le=1_048_576, description="Budget for the passages.")
    retrieval: RetrievalPlan = Field(default_factory=RetrievalPlan)
    rewrite_model: ModelName = Field(
        default="", description="Model whose queue rewrites the question; empty: rules only."
    )
    cache_answers: bool = True
    keep_transcript: bool = False
    rerank: bool = False
    rerank_candidates: int = Field(default=10, ge=1, le=100)
    # None only in runs recorded before templates were versioned: the built-in prompt.
    prompt: PromptTemplate | None = None
    routing: RoutingPlan | None = Field(
        default=None, description="Route between a small and a large model; none: `model`."
    )
    shadow: ShadowPlan | None = Field(
        default=None, description="Also run this candidate in a shadow child (sampled request)."
    )
    shadow_of: str = Field(
        default="",
        max_length=256,
        description="Set in a shadow run: the live trace id. It records a shadow row instead of "
        "a cost row, caches nothing and starts no shadow of its own.",
    )


class ChatMessage(Contract):
    role: Literal["system", "user", "assistant"]
    content: str = Field(max_length=1_000_000)


class ConversationWindow(Contract):
    """The history a conversation turn carries into its prompt: the rolling summary and the
    most recent turns verbatim, already cut to the window's token budget."""

    summary: str = Field(default="", max_length=100_000)
    turns: list[ChatMessage] = Field(default_factory=list, max_length=1_000)


def stream_id_field() -> Any:
    return Field(
        default="",
        pattern=r"^[A-Za-z0-9_.:-]{0,128}$",
        description="Publish the generated text on this token stream as it grows; empty: no.",
    )


class AnswerWorkflowInput(Contract):
    request: AskRequest
    plan: AnswerPlan
    history: ConversationWindow | None = None
    stream_id: str = stream_id_field()


class Citation(Contract):
    number: int = Field(description="The passage's number in the prompt, as in [n].")
    chunk_id: uuid.UUID
    document_id: uuid.UUID
    source: str
    title: str
    heading_path: str
    char_start: int
    char_end: int
    location: str = Field(
        default="",
        max_length=200,
        description="Where a person finds it in the document: `page 3`, `slide 2`, `rows 5-12`.",
    )


class ContextPassage(Contract):
    """A passage that was in the prompt, as [number], with the score that placed it there."""

    number: int
    chunk_id: uuid.UUID
    score: float
    source: str = Field(default="", description="The document it comes from.")


class TokenCounts(Contract):
    prompt: int = 0
    completion: int = 0


class StepCost(Contract):
    """What one model step of an answer cost: engine time and tokens (R26)."""

    step: Literal["rewrite", "embed_query", "generate"]
    model: str
    seconds: float = Field(description="Time in the engine (GPU time in production).")
    prompt_tokens: int = 0
    completion_tokens: int = 0


class AnswerCost(Contract):
    engine_seconds: float = Field(default=0.0, description="LLM time: rewrite + generate.")
    embed_seconds: float = Field(default=0.0, description="Embedding model time.")
    steps: list[StepCost] = Field(default_factory=list)


class ModelChoice(Contract):
    model: str
    rule: Literal["requested", "long_question", "hard_question", "low_confidence", "simple"]
    reason: str


class Answer(Contract):
    trace_id: str
    question: str
    query: str = Field(description="The rewritten query used for retrieval.")
    answer: str
    citations: list[Citation]
    citation_method: Literal["markers", "overlap", "cached", "none"]
    model: str
    route: Literal["primary", "fallback_model", "cached_answer", "default_reply"] = Field(
        description="Which generation path answered (R9)."
    )
    retrieval: RetrievalLabel
    reranked: bool = False
    context: list[ContextPassage] = Field(default_factory=list)
    degradations: list[str]
    timings_ms: dict[str, float]
    tokens: TokenCounts
    cost: AnswerCost = Field(default_factory=AnswerCost)
    prompt_id: str = Field(default="", description="The prompt template's version (R16).")
    prompt_hash: str = Field(default="", description="Hash of that template file's bytes.")
    model_choice: ModelChoice | None = Field(
        default=None, description="Which model the router chose and why (R27); none: no router."
    )


# --- activity contracts -----------------------------------------------------------------------


class RerankInput(Contract):
    query: str = Field(min_length=1, max_length=8_000)
    passages: list[str] = Field(min_length=1, max_length=100)


class RerankOutput(Contract):
    scores: list[float]


class GenerateInput(Contract):
    trace_id: str = Field(max_length=256)
    messages: list[ChatMessage] = Field(min_length=1, max_length=200)
    max_tokens: int = Field(ge=1, le=16_384)
    stream_id: str = stream_id_field()
    sampling: Sampling = Field(default_factory=Sampling)


class RewriteInput(Contract):
    trace_id: str = Field(max_length=256)
    question: str = Field(min_length=1, max_length=8_000)
    max_tokens: int = Field(default=48, ge=1, le=512)


class RewriteOutput(Contract):
    query: str
    model: str
    seconds: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0


class GenerateOutput(Contract):
    text: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str
    seconds: float
    first_token_seconds: float


class CacheKeyInput(Contract):
    """What makes two questions the same for the answer cache (with the corpus version)."""

    tenant: TenantId
    question: str = Field(min_length=1, max_length=8_000)
    document_ids: list[uuid.UUID] = Field(default_factory=list, max_length=100)
    filter: DocumentFilter = Field(default_factory=DocumentFilter)


class StoreAnswerInput(CacheKeyInput):
    trace_id: str = Field(max_length=256)
    answer: str
    citations: list[Citation]
    model: str


class CachedAnswerOutput(Contract):
    found: bool
    answer: str = ""
    citations: list[Citation] = Field(default_factory=list)
    model: str = ""
    trace_id: str = Field(default="", description="The run that generated the cached answer.")


class RecordCostInput(Contract):
    trace_id: str = Field(max_length=256)
    tenant: TenantId
    model: str
    route: str
    total_ms: float
    cost: AnswerCost
    degraded: bool = False
    # The exact prompt and output, for the transcripts table; empty: keep none.
    messages: list[ChatMessage] = Field(default_factory=list)
    output: str = ""
    cited_chunks: list[uuid.UUID] = Field(default_factory=list)
    read_documents: list[uuid.UUID] = Field(
        default_factory=list, description="Documents whose passages the answer read."
    )


class RecordShadowInput(Contract):
    live_trace_id: str = Field(max_length=256)
    trace_id: str = Field(max_length=256)
    tenant: TenantId
    model: str
    prompt_id: str
    retrieval: str = ""
    answer: str
    cited_chunks: list[uuid.UUID]
    total_ms: float
    engine_seconds: float
    route: str
