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

The groups live by area: `platform` (logs, traces, Temporal, Postgres, workers, maintenance,
security), `data` (index, embedder, ingestion, retrieval) and `serving` (LLM, answer, router,
shadow, conversations, gateway); `common` holds the profiles' defaults. This module assembles them into
`Settings`, with the checks across groups, and reads the environment.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, Self

from dotenv import dotenv_values
from pydantic import BaseModel, Field, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from ragkit import prompts
from ragkit.settings.common import (
    ACCESS_TIMEOUT_FACTOR,
    ENV_PREFIX,
    PACKAGED_MINILM,
    PACKAGED_SMOLLM2,
    PROFILE_DEFAULTS,
    group_config,
)
from ragkit.settings.data import (
    EmbeddingSettings,
    IndexSettings,
    IngestSettings,
    RetrievalSettings,
)
from ragkit.settings.platform import (
    ActivityPolicyOverride,
    LogSettings,
    MaintenanceSettings,
    PostgresSettings,
    SecuritySettings,
    TemporalSettings,
    TracingSettings,
    WorkerSettings,
)
from ragkit.settings.serving import (
    AnswerSettings,
    ConversationSettings,
    GatewaySettings,
    LlmSettings,
    RouterSettings,
    ShadowSettings,
)

__all__ = [
    "ACCESS_TIMEOUT_FACTOR",
    "ENV_PREFIX",
    "FLAT_NAMES",
    "GROUPS",
    "PACKAGED_MINILM",
    "PACKAGED_SMOLLM2",
    "PROFILE_DEFAULTS",
    "RETIRED",
    "ActivityPolicyOverride",
    "AnswerSettings",
    "ConversationSettings",
    "EmbeddingSettings",
    "GatewaySettings",
    "IndexSettings",
    "IngestSettings",
    "LlmSettings",
    "LogSettings",
    "MaintenanceSettings",
    "PostgresSettings",
    "RetrievalSettings",
    "RouterSettings",
    "SecuritySettings",
    "Settings",
    "ShadowSettings",
    "TemporalSettings",
    "TracingSettings",
    "WorkerSettings",
    "deep_merge",
    "flat_name",
    "get_settings",
    "group_config",
    "nest",
]


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
    tracing: TracingSettings = Field(default_factory=TracingSettings)

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
    def admin_key_path(self) -> Path:
        """Where `durable-rag up` keeps the embedded stack's admin key (security_admin_key)."""
        return self.data_dir / "secrets" / "admin-key"

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
