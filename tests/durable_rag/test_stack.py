"""The embedded stack launcher: real servers, real PIDs, clear errors."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from durable_rag.stack import EmbeddedStack
from durable_rag.stack.process import Process, StackError, free_port, pid_alive
from durable_rag.stack.temporal import TemporalDevServer
from ragkit import deployments
from ragkit.cpus import session_niceness
from ragkit.db import make_sessionmaker
from ragkit.settings import Settings
from ragkit.store import model_alias
from tests.conftest import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


def stack_settings(data_dir: Path, **extra: object) -> Settings:
    return Settings(
        data_dir=data_dir,
        temporal_address=f"127.0.0.1:{free_port()}",
        temporal_ui_port=free_port(),
        temporal_metrics_port=free_port(),
        postgres_port=free_port(),
        **extra,  # type: ignore[arg-type]
    )


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[EmbeddedStack]:
    s = EmbeddedStack(stack_settings(tmp_path / "data"))
    yield s
    s.down(echo=lambda _: None)


def test_up_is_idempotent_and_down_stops_everything_by_pid(stack: EmbeddedStack) -> None:
    lines: list[str] = []
    stack.up(workers=False, echo=lines.append)
    assert any(line.startswith("started  Temporal") for line in lines)
    assert any(line.startswith("started  Postgres") for line in lines)
    assert any("Temporal UI:" in line and "/namespaces/default/workflows" in line for line in lines)
    assert stack.temporal.healthy() and stack.postgres.healthy()
    assert (stack.data_dir / "temporal.db").exists()
    pids = (stack.temporal.process.pid(), stack.postgres.pid())

    lines.clear()
    stack.up(workers=False, echo=lines.append)
    assert any(line.startswith("running  Temporal") for line in lines)
    assert any(line.startswith("running  Postgres") for line in lines)
    assert (stack.temporal.process.pid(), stack.postgres.pid()) == pids

    status = {p.name: p.running for p in stack.status()}
    assert status["temporal"] and status["postgres"]
    # Never started (`up --no-gateway`, `--no-llm`): not required, so `status` can exit 0.
    optional = {p.name for p in stack.status() if not p.required}
    assert optional == {"gateway", "worker-orchestrator", "worker-index", "worker-llm", "viewer"}

    stack.down(echo=lambda _: None)
    assert not any(pid_alive(pid) for pid in pids)
    status = {p.name: p.running for p in stack.status()}
    assert not any(status.values())


def test_up_follows_the_active_model_after_a_swap(stack: EmbeddedStack) -> None:
    """Before a swap the stack's LLM worker serves the active model; after one to a model nobody
    serves, `up` does not start the settings' model again and says what to do."""
    stack.up(workers=False, echo=lambda _: None)
    served = stack.settings.llm.name
    assert stack.serves_the_active_model(echo=lambda _: None)
    sessions = make_sessionmaker(stack.settings.postgres.sqlalchemy_url)
    try:
        model_alias.activate(sessions, "swapped-in", served)
        lines: list[str] = []
        assert not stack.serves_the_active_model(echo=lines.append)
        assert lines == [
            "MISSING  llm worker for the active model 'swapped-in': nobody polls "
            "llm-swapped-in. Start it (DURABLE_RAG_LLM_SERVED_NAME=swapped-in "
            "DURABLE_RAG_LLM_MODEL=... durable-rag worker llm), or swap back: durable-rag "
            f"models swap {served}"
        ]
        model_alias.activate(sessions, served, served)
        assert stack.serves_the_active_model(echo=lambda _: None)
    finally:
        sessions.kw["bind"].dispose()


def test_a_taken_port_is_a_clear_error(tmp_path: Path) -> None:
    settings = stack_settings(tmp_path / "data")
    taken = int(settings.temporal.address.rsplit(":", 1)[1])
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", taken))
        sock.listen()
        with pytest.raises(StackError, match=f"port {taken} is taken"):
            EmbeddedStack(settings).up(workers=False, echo=lambda _: None)


def test_a_part_that_will_not_start_fails_with_its_log(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "temporal.db").mkdir(parents=True)  # a folder where the SQLite file should be
    server = TemporalDevServer(data, free_port(), None, free_port())
    with pytest.raises(StackError, match="Temporal dev server exited while starting"):
        server.start(timeout=30)


def test_production_profile_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StackError, match="docker-compose"):
        EmbeddedStack(Settings(profile="production", database_url="postgresql://x/y"))


@pytest.mark.slow
def test_cli_up_ingest_search_down(tmp_path: Path) -> None:
    """The demo path through the real command line, workers included."""
    settings = stack_settings(tmp_path / "data")
    env = dict(os.environ)
    env.update(
        {
            "DURABLE_RAG_DATA_DIR": str(settings.data_dir),
            "DURABLE_RAG_TEMPORAL_ADDRESS": settings.temporal.address,
            "DURABLE_RAG_TEMPORAL_UI_PORT": str(settings.temporal.ui_port),
            "DURABLE_RAG_TEMPORAL_METRICS_PORT": str(settings.temporal.metrics_port),
            "DURABLE_RAG_POSTGRES_PORT": str(settings.postgres.port),
            "DURABLE_RAG_GATEWAY_PORT": str(gateway_port := free_port()),
        }
    )
    cli = [sys.executable, "-m", "cli"]

    def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*cli, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout
        )

    try:
        up = run("up", "--no-llm")  # the LLM worker is covered by tests/workflows/test_answer.py
        assert up.returncode == 0, up.stdout + up.stderr
        assert "started  index worker" in up.stdout
        assert "started  gateway" in up.stdout
        status = run("status")
        running = {line.split()[0] for line in status.stdout.splitlines() if " running " in line}
        assert running >= {"temporal", "postgres", "worker-orchestrator", "worker-index", "gateway"}
        assert status.returncode == 0, status.stdout  # the LLM worker was not asked for
        assert "not started" in status.stdout
        # Versioned workers: each made its build current when it started (WORKER_PROMOTE).
        build = deployments.computed_build_id()
        current = f"orchestrator {build}, index {build}, llm none"
        said = " ".join(status.stdout.split())  # the console wraps long lines
        assert f"this checkout {build}; current: {current}" in said, status.stdout
        # Bulk embedding yields the CPU (worker.bulk_nice): the niceness of the worker's own
        # session, which it leads, is the one that weighs against the other parts'.
        index_pid = int((settings.data_dir / "run" / "worker-index.pid").read_text())
        deadline = time.monotonic() + 30
        while session_niceness(index_pid) != settings.worker.bulk_nice:
            assert time.monotonic() < deadline, Path(f"/proc/{index_pid}/autogroup").read_text()
            time.sleep(0.2)
        with urllib.request.urlopen(f"http://127.0.0.1:{gateway_port}/healthz") as health:
            assert health.status == 200
        # A shared drive as users keep one: the seven formats, and two files we do not read.
        docs = tmp_path / "drive"
        shutil.copytree(ROOT / "corpus" / "literature", docs)
        for sample in (
            "history/the-metric-system.docx",
            "technology/version-control.pptx",
            "science/highest-mountains.xlsx",
            "history/printing-press.html",
        ):
            shutil.copy(ROOT / "corpus" / sample, docs)
        (docs / "rivers.csv").write_text("river,sea\nRhine,North Sea\n")
        (docs / "photo.png").write_bytes(b"\x89PNG")
        (docs / "minutes.doc").write_bytes(b"\xd0\xcf\x11\xe0")
        ingest = run("ingest", str(docs))
        assert ingest.returncode == 0, ingest.stdout + ingest.stderr
        assert "0 failed" in ingest.stdout
        assert (
            "skipped 2 files: 1 .doc (unsupported_type: convert to .docx), "
            "1 .png (unsupported_type)" in ingest.stdout
        ), ingest.stdout
        search = run("search", "The tortoise beat the hare in a race", "-k", "2")
        assert search.returncode == 0, search.stdout + search.stderr
        assert "tortoise-and-the-hare" in search.stdout
        assert "score" in search.stdout and "timings:" in search.stdout
        slide = run("search", "Who wrote Git in April 2005?", "-k", "1")
        assert "version-control.pptx:" in slide.stdout, slide.stdout
        assert "Distributed: Git and Mercurial" in slide.stdout and "· slide 4" in slide.stdout
    finally:
        down = run("down")
    assert down.returncode == 0, down.stderr
    assert "stopped  index worker" in down.stdout and "stopped  gateway" in down.stdout
    assert "worker-llm" in run("status").stdout
    assert run("status").returncode == 1


def test_what_a_crashed_part_left_behind_is_stopped_with_it(tmp_path: Path) -> None:
    """A SIGKILLed LLM worker leaves vLLM's engine processes running (GBs each): stopping the
    part, or starting it again, stops its whole process group."""
    part = Process("part", tmp_path / "part.pid", tmp_path / "part.log")
    child_pid_file = tmp_path / "child.pid"
    part.spawn(["bash", "-c", f"sleep 300 & echo $! > {child_pid_file}; wait"])
    deadline = time.monotonic() + 10
    while not child_pid_file.exists() or not child_pid_file.read_text().strip():
        assert time.monotonic() < deadline, "the child never started"
        time.sleep(0.05)
    child = int(child_pid_file.read_text())
    leader = part.pid()
    assert leader is not None
    os.kill(leader, signal.SIGKILL)  # a crash: only the leader dies
    while pid_alive(leader):
        time.sleep(0.05)
    assert pid_alive(child), "the orphan outlived its parent, as vLLM's do"
    part.spawn(["sleep", "300"])  # starting the part again stops the orphans first
    deadline = time.monotonic() + 5
    while pid_alive(child):
        assert time.monotonic() < deadline, "the orphan was not stopped"
        time.sleep(0.05)
    part.stop()
