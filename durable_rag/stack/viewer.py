"""The embedded stack's trace viewer: Arize Phoenix (`durable-rag up --tracing`).

Phoenix reads OpenInference's span kinds and attributes, so an answer shows as one tree with its
retriever, reranker and LLM steps, their documents, scores and token counts. It installs from the
registry into a venv of its own (`.venv-phoenix`, from `requirements-phoenix.lock`): its FastAPI
and uvicorn pins are not ours. It runs offline (no telemetry, no external resources), on
127.0.0.1, its SQLite database under `<data_dir>/phoenix`, and receives OTLP over HTTP on its UI's
port (`/v1/traces`), where every part of a stack brought up with `--tracing` exports.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import urllib.request
from pathlib import Path

from durable_rag.stack.process import Process, StackError, free_port, port_in_use
from durable_rag.stack.workers import ROOT

LOCK = ROOT / "requirements-phoenix.lock"
VENV = ROOT / ".venv-phoenix"


def installed(venv: Path = VENV) -> bool:
    return (venv / f".installed-{_lock_hash()}").exists()


def _lock_hash() -> str:
    return hashlib.sha1(LOCK.read_bytes()).hexdigest()[:12]


def install(venv: Path = VENV, echo: object = print) -> Path:
    """Phoenix's venv, made from the lock if it is not there yet (~1.5 min, ~0.9 GB); its
    `phoenix` command."""
    phoenix = venv / "bin" / "phoenix"
    if installed(venv):
        return phoenix
    if callable(echo):
        echo(f"installing the trace viewer (Arize Phoenix) into {venv}: about a minute")
    steps = [
        [sys.executable, "-m", "venv", "--clear", str(venv)],
        [str(venv / "bin" / "pip"), "install", "-q", "--no-deps", "-r", str(LOCK)],
    ]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True, timeout=1_200)
        if done.returncode != 0:
            raise StackError(
                f"installing the trace viewer failed ({' '.join(step[:3])} ...): "
                f"{(done.stderr or done.stdout)[-1500:]}"
            )
    (venv / f".installed-{_lock_hash()}").touch()
    return phoenix


class TraceViewer:
    """Phoenix on 127.0.0.1:`port`, tracked by its PID file like every part of the stack."""

    def __init__(self, data_dir: Path, port: int) -> None:
        self.data_dir, self.port = data_dir, port
        self.process = Process(
            "trace viewer (Phoenix)",
            data_dir / "run" / "phoenix.pid",
            data_dir / "logs" / "phoenix.log",
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def traces_endpoint(self) -> str:
        """Where the parts export (OTLP over HTTP)."""
        return f"{self.url}/v1/traces"

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    def start(self, timeout: float = 180.0, echo: object = print) -> bool:
        """Install if needed, start unless running; True if it started it."""
        if self.process.running():
            self.wait_healthy(timeout)
            return False
        if port_in_use(self.port):
            raise StackError(
                f"port {self.port} is taken by a process durable-rag did not start; stop it or "
                "choose another (DURABLE_RAG_TRACING_VIEWER_PORT)"
            )
        phoenix = install(echo=echo)
        working = self.data_dir / "phoenix"
        working.mkdir(parents=True, exist_ok=True)
        env = {
            "PATH": f"{phoenix.parent}:/usr/bin:/bin",
            "HOME": str(working),
            "PHOENIX_WORKING_DIR": str(working),
            "PHOENIX_HOST": "127.0.0.1",
            "PHOENIX_PORT": str(self.port),
            # Phoenix's OTLP/gRPC receiver: unused (the parts send OTLP/HTTP), on a free port so
            # it never takes a collector's 4317.
            "PHOENIX_GRPC_PORT": str(free_port()),
            "PHOENIX_TELEMETRY_ENABLED": "false",
            "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
        }
        self.process.spawn([str(phoenix), "serve"], env=env)
        try:
            self.wait_healthy(timeout)
        except BaseException:
            self.process.stop(timeout=5)
            raise
        return True

    def wait_healthy(self, timeout: float) -> None:
        self.process.wait_ready(self.healthy, timeout, 0.5, "did not answer /healthz")

    def stop(self) -> bool:
        return self.process.stop()

    def trace_link(self, trace_id: str) -> str:
        return f"{self.url}/redirects/traces/{trace_id}"

    def spans(self, project: str = "durable-rag") -> list[dict[str, object]]:
        """The spans Phoenix holds for `project` (its REST API), newest first."""
        url = f"{self.url}/v1/projects/{project}/spans?limit=1000"
        with urllib.request.urlopen(url, timeout=10) as answer:
            data = json.loads(answer.read())
        return list(data.get("data", []))
