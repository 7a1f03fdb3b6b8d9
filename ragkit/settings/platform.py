"""Where the system runs and how it is operated: logs, Temporal, Postgres, workers and their
activity policies, maintenance schedules, security."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr

from ragkit.settings.common import (
    group_config,
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
    model_config = group_config("log_")

    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(default="INFO")
    format: Literal["text", "json"] = Field(
        default="text", description="Readable lines (embedded) or JSON lines (production)."
    )
    max_mb: int = Field(
        default=50,
        ge=1,
        le=100_000,
        description="The embedded stack's log files (.data/logs/*.log, Postgres's server.log) "
        "are rotated past this size (checked every minute), as compose's json-file driver "
        "rotates containers' logs.",
    )
    files: int = Field(
        default=5, ge=1, le=100, description="Log files kept per part, the live one included."
    )


class TracingSettings(BaseModel):
    """OpenTelemetry traces (ragkit/tracing.py): one trace per request, from the caller's
    `traceparent` through the gateway, the workflows, the index and the LLM worker to the
    engine's own span. Off by default: no provider, no exporter, no span."""

    model_config = group_config("tracing_")

    enabled: bool = Field(
        default=False,
        description="Export spans from every process. `durable-rag up --tracing` turns it on "
        "with a local viewer.",
    )
    endpoint: str = Field(
        default="http://127.0.0.1:6006/v1/traces",
        pattern=r"^https?://[^\s/]+(/\S*)?$",
        description="Where spans go: an OTLP receiver (a collector, or the viewer itself). For "
        "http/protobuf the full URL (`.../v1/traces`); for grpc `http://host:4317`.",
    )
    protocol: Literal["http/protobuf", "grpc"] = Field(
        default="http/protobuf", description="The OTLP transport."
    )
    sample_ratio: float = Field(
        default=1.0,
        ge=0.0,
        le=1.0,
        description="The share of new traces kept (a caller's sampled flag wins: parent-based).",
    )
    capture_content: bool = Field(
        default=False,
        description="Put tenant text in spans: questions, passages, prompts and answers "
        "(OpenInference `input.value`, `output.value`, document contents). Off: ids, scores, "
        "models and token counts only. Off in the production compose, whose payloads are "
        "encrypted: a span store would hold in clear what Temporal holds sealed.",
    )
    viewer_port: int = Field(
        default=6006,
        ge=1,
        le=65_535,
        description="`durable-rag up --tracing`: the local viewer's port (UI and OTLP/HTTP).",
    )
    viewer_url: str = Field(
        default="",
        description="Where operators open a trace: `<viewer_url>/redirects/traces/<trace id>` "
        "is printed with each answer. Empty: the local viewer's, when tracing is on.",
    )


class TemporalSettings(BaseModel):
    model_config = group_config("temporal_")

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
    model_config = group_config("postgres_")

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


class WorkerSettings(BaseModel):
    """What every worker process shares: activity slots, draining, policies, metrics, faults."""

    model_config = group_config("worker_")

    max_concurrent_activities: int = Field(default=4, ge=1, le=1_000)
    live_max_concurrent_activities: int = Field(
        default=16,
        ge=1,
        le=1_000,
        description="Activity slots (and threads) of the orchestrator's live worker: retrieval, "
        "hydration and the answer's Postgres steps, apart from the bulk worker's.",
    )
    max_cached_workflows: int = Field(
        default=1_000,
        ge=0,
        le=100_000,
        description="Runs each of the orchestrator's workers keeps in memory between their "
        "tasks (Temporal's sticky cache: a conversation, an ingest, an answer). Past it the "
        "least recently used is evicted and replayed from its history at its next task; 0: none "
        "kept. The SDK's default; its gauge is temporal_sticky_cache_size (SDK port).",
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
    versioning: bool = Field(
        default=True,
        description="Each worker runs as a build of its kind's Worker Deployment in Temporal "
        "(`<deployment_name>-orchestrator`, `-index`, `-llm`): a run pinned to a build stays on "
        "it, new runs go to the current build. Off: an unversioned worker (tests build theirs "
        "so).",
    )
    deployment_name: str = Field(
        default="durable-rag",
        pattern=r"^[A-Za-z0-9_-]{1,100}$",
        description="The prefix of the worker kinds' deployment names.",
    )
    build_id: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9_.+-]{1,100}$",
        description="This worker's build id; unset: the package version and a hash of the "
        "workflow code (workers/build.py), the same for the same code.",
    )
    promote: Literal["always", "if_none", "never"] = Field(
        default="always",
        description="What a versioned worker does with its build when it starts: make it "
        "current, and move the open runs of the build it replaces onto it (`always`: a restart "
        "onto new code, as `durable-rag up` and a recreated compose service do: the old "
        "workers are gone), only where no build is current yet (`if_none`), or leave routing "
        "alone (`never`: workers started beside the old ones, for a ramp).",
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


class MaintenanceSettings(BaseModel):
    """Index maintenance: the compaction and rebuild schedules and their step sizes."""

    model_config = group_config("")

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
    # Retention: the nightly compaction deletes rows past these ages (transcripts: the answer
    # group's transcript_retention_days).
    cost_retention_days: int = Field(
        default=400,
        ge=1,
        le=3_650,
        description="Answer cost rows (`durable-rag costs`) older than this are deleted: over a "
        "year, so a year's bills can be compared. A conversation reply's stays as long as the "
        "reply.",
    )
    shadow_retention_days: int = Field(
        default=90,
        ge=1,
        le=3_650,
        description="Shadow runs (`durable-rag shadow report`) older than this are deleted: a "
        "candidate's comparison is read within weeks.",
    )
    answer_cache_retention_days: int = Field(
        default=30,
        ge=1,
        le=3_650,
        description="Cached answers (the LLM fallback's) older than this are deleted; any "
        "ingest or delete already makes older ones unreachable.",
    )
    eval_report_retention_days: int = Field(
        default=365,
        ge=1,
        le=3_650,
        description="Evaluation reports older than this are deleted, except the newest of each "
        "case set, which the gate compares against.",
    )
    rewrite_max_mb: int = Field(
        default=512,
        ge=0,
        le=1_000_000,
        description="Compaction rewrites (VACUUM FULL) each Postgres table that holds tenant "
        "text up to this size, then moves Postgres to a new WAL segment, so the bytes of deleted "
        "rows leave the database's files within one compaction. A larger table is skipped and "
        "reported (its rewrite locks it for the whole copy); its deleted rows' bytes stay until "
        "their pages are reused. 0: no rewrite.",
    )


class SecuritySettings(BaseModel):
    """Payload encryption and the operators' codec endpoint (ragkit/codec.py,
    gateway/routers/codec.py)."""

    model_config = group_config("security_")

    payload_encryption: bool = Field(
        default=True,
        description="Seal every Temporal payload (inputs, results, signals, local activity "
        "results: questions, passages, answers, turns) with AES-256-GCM in each process, so the "
        "Temporal server and its database hold only ciphertext: a deleted document's text is "
        "never in Temporal's files. Every client and worker of a deployment must agree. On by "
        "default, in the embedded stack too; off only to read payloads in a UI without the codec "
        "endpoint.",
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
        "from it. Unset, the endpoint is off, except in the embedded stack: `durable-rag up` "
        "makes one at <data_dir>/secrets/admin-key and gives it to the gateway it starts, so "
        "the local Temporal UI decodes.",
    )
    codec_cors_origins: str = Field(
        default="",
        description="Comma-separated browser origins allowed to call the codec endpoint; empty: "
        "the Temporal UI's (temporal_ui_url).",
    )
