"""What each store holds on disk: `durable-rag status` and the DiskFillingUp alert's figures."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from typer.testing import CliRunner

from ragkit import disk
from ragkit.settings import Settings

MB = 1024 * 1024


def embedded(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path, profile="embedded", vector_backend="edge")


def test_each_store_counts_its_files_and_a_missing_one_holds_nothing(tmp_path: Path) -> None:
    (tmp_path / "postgres" / "base").mkdir(parents=True)
    (tmp_path / "postgres" / "base" / "1").write_bytes(b"x" * 3 * MB)
    (tmp_path / "temporal.db").write_bytes(b"x" * MB)
    (tmp_path / "temporal.db-wal").write_bytes(b"x" * MB)
    (tmp_path / "index" / "shard").mkdir(parents=True)
    (tmp_path / "index" / "shard" / "wal").write_bytes(b"x" * 2 * MB)
    # A link out of a store is not the store's.
    (tmp_path / "index" / "elsewhere").symlink_to(tmp_path / "postgres" / "base" / "1")
    found = {u.store: u for u in disk.usage(disk.stores(embedded(tmp_path)))}
    assert {s: u.bytes for s, u in found.items()} == {
        "temporal": 2 * MB,
        "postgres": 3 * MB,
        "index": 2 * MB,
        "logs": 0,
    }
    total, _, free = shutil.disk_usage(tmp_path)
    for u in found.values():  # the logs folder is not there yet: the disk it will land on
        assert u.volume_size == total
        assert abs(u.volume_free - free) < 64 * MB


def test_production_sees_only_its_own_volume(tmp_path: Path) -> None:
    database = "postgresql+psycopg://rag@postgres/rag"
    settings = Settings(
        data_dir=tmp_path, profile="production", vector_backend="qdrant", database_url=database
    )
    assert set(disk.stores(settings)) == {"logs"}
    edge = Settings(
        data_dir=tmp_path, profile="production", vector_backend="edge", database_url=database
    )
    assert set(disk.stores(edge)) == {"index", "logs"}


def test_a_scrape_reads_the_last_walk_and_never_walks(tmp_path: Path) -> None:
    (tmp_path / "index").mkdir()
    (tmp_path / "index" / "a").write_bytes(b"x" * MB)
    collector = disk.StoreUsageCollector({"index": [tmp_path / "index"]}, every=3600)
    try:
        registry = CollectorRegistry()
        registry.register(collector)
        (tmp_path / "index" / "b").write_bytes(b"x" * MB)  # after the walk: not seen yet
        index = {"store": "index"}
        assert registry.get_sample_value("durable_rag_store_bytes", index) == MB
        assert registry.get_sample_value("durable_rag_volume_free_bytes", index)
        size = registry.get_sample_value("durable_rag_volume_size_bytes", index)
        assert size == shutil.disk_usage(tmp_path).total
    finally:
        collector.close()


@pytest.mark.parametrize(
    ("n", "shown"),
    [(0, "0 B"), (1023, "1023 B"), (1536, "1.5 KB"), (5 * MB, "5.0 MB"), (3 * 1024**4, "3.0 TB")],
)
def test_sizes_read_as_people_write_them(n: int, shown: str) -> None:
    assert disk.human(n) == shown


def test_status_lists_each_store_with_the_room_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cli import app

    monkeypatch.setenv("DURABLE_RAG_DATA_DIR", str(tmp_path))
    (tmp_path / "temporal.db").write_bytes(b"x" * 2 * MB)
    result = CliRunner().invoke(app, ["status"], terminal_width=200)
    assert result.exit_code == 1, result.output  # nothing runs here
    lines = [line.split() for line in result.output.splitlines() if line.startswith("store ")]
    assert [line[1] for line in lines] == ["temporal", "postgres", "index", "logs"]
    assert lines[0][2:4] == ["2.0", "MB"]
    assert all("free" in line and "of" in line for line in lines)


def test_a_log_past_its_cap_is_rotated_in_place_and_its_writer_goes_on(tmp_path: Path) -> None:
    """The parts append to their logs (durable_rag/stack/process.py): a rotated log is truncated,
    not replaced, so the part writes on into the same file, from its start."""
    settings = Settings(data_dir=tmp_path, log_max_mb=1, log_files=3)
    logs = disk.embedded_logs(settings)
    assert logs[-1] == tmp_path / "postgres" / "server.log"
    (tmp_path / "logs").mkdir()
    live = tmp_path / "logs" / "worker-index.log"
    quiet = tmp_path / "logs" / "gateway.log"
    quiet.write_bytes(b"small\n")
    limit = settings.log.max_mb * 1024 * 1024
    with live.open("ab") as writer:  # as the part holds it
        for generation in (b"a", b"b", b"c"):
            writer.write(generation * (limit + 1))
            writer.flush()
            rotated = disk.rotate_logs(disk.embedded_logs(settings), limit, settings.log.files)
            assert rotated == [live]
        writer.write(b"after\n")
        writer.flush()
    assert live.read_bytes() == b"after\n"
    # Three files kept: the live one, .1 (the last generation) and .2; the first is gone.
    assert (tmp_path / "logs" / "worker-index.log.1").read_bytes()[:1] == b"c"
    assert (tmp_path / "logs" / "worker-index.log.2").read_bytes()[:1] == b"b"
    assert not (tmp_path / "logs" / "worker-index.log.3").exists()
    assert quiet.read_bytes() == b"small\n"
