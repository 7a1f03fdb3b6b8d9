from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from ragkit.settings import PACKAGED_MINILM, Settings


def test_embedded_defaults() -> None:
    s = Settings()
    assert s.profile == "embedded"
    assert s.index.backend == "edge"
    assert s.embedding.model == PACKAGED_MINILM
    assert s.postgres.sqlalchemy_url.startswith("postgresql+psycopg://postgres@127.0.0.1:")


def test_production_profile_changes_defaults_and_needs_a_database() -> None:
    with pytest.raises(ValidationError, match="DURABLE_RAG_DATABASE_URL"):
        Settings(profile="production")
    s = Settings(profile="production", database_url="postgresql+psycopg://u@db/x")
    assert s.index.backend == "qdrant"
    assert s.embedding.model.startswith("BAAI/bge")
    assert s.log.format == "json"
    assert s.temporal.address == "temporal:7233"


def test_explicit_values_beat_profile_defaults() -> None:
    s = Settings(profile="production", database_url="postgresql://x", vector_backend="edge")
    assert s.index.backend == "edge"


def test_environment_variables_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DURABLE_RAG_CHUNK_TOKENS", "256")
    monkeypatch.setenv("DURABLE_RAG_ACTIVITY_POLICIES", '{"stage_batch": {"heartbeat_seconds": 9}}')
    s = Settings()
    assert s.ingest.chunk_tokens == 256
    assert s.worker.activity_policies["stage_batch"].heartbeat_seconds == 9


def test_dotenv_file_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".env").write_text("DURABLE_RAG_HNSW_M=24\n")
    monkeypatch.chdir(tmp_path)
    assert Settings().index.hnsw_m == 24


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("chunk_tokens", 64),
        ("chunk_tokens", 2048),
        ("chunk_overlap", 0.05),
        ("chunk_overlap", 0.3),
        ("hnsw_m", 2),
        ("default_tenant", "bad tenant!"),
        ("embedding_device", "tpu"),
        ("profile", "staging"),
    ],
)
def test_out_of_range_values_are_refused(field: str, value: object) -> None:
    with pytest.raises(ValidationError) as info:
        Settings(**{field: value})
    assert field in str(info.value)


def test_no_module_reads_the_environment_directly() -> None:
    root = Path(__file__).resolve().parents[2]
    allowed = {root / "ragkit" / "settings" / "__init__.py"}  # the environment source
    offenders = []
    for folder in (
        "cli",
        "durable_rag",
        "gateway",
        "workers",
        "workflows",
        "activities",
        "ragkit",
        "schemas",
    ):
        for path in (root / folder).rglob("*.py"):
            text = path.read_text()
            if path not in allowed and (
                "os.environ[" in text or "os.getenv(" in text or "environ.get(" in text
            ):
                offenders.append(str(path.relative_to(root)))
    assert offenders == []
