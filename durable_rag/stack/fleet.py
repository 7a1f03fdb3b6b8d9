"""The embedded stack's workers as a deploy sees them (durable_rag/deploy.py): the running build's
are instance 1 of each kind (what `durable-rag up` started); the new build's are instance 2,
started from the new code beside them, leaving routing alone, with metrics on ports of their own
for the health checks. Once the old ones stop, the new ones take over instance 1's PID file."""

from __future__ import annotations

import os
import time
from collections.abc import Collection
from pathlib import Path
from typing import Literal

from durable_rag.deploy import Health, scrape
from durable_rag.stack.process import Process, StackError, free_port_pair
from durable_rag.stack.workers import (
    ROOT,
    spawn_worker,
    wait_worker_ready,
    worker_process,
    worker_queue,
)
from ragkit.index.base import WAITING_FOR_OPENER
from ragkit.settings import Settings

OLD, NEW = 1, 2


class EmbeddedFleet:
    def __init__(
        self,
        settings: Settings,
        env: dict[str, str] | None = None,
        root: Path = ROOT,
        serving: Collection[int] | None = None,
        backend_nice: int = 0,
    ) -> None:
        self.settings = settings
        self.data_dir = settings.data_dir.resolve()
        self.env = dict(os.environ if env is None else env)
        self.env["DURABLE_RAG_DATA_DIR"] = str(self.data_dir)
        self.root, self.serving, self.backend_nice = root, serving, backend_nice
        self.metrics: dict[str, list[str]] = {}

    def queue(self, kind: str) -> str:
        return worker_queue(self.settings, kind)

    def start_new(self, kind: str) -> None:
        process = self._spawn(kind, NEW, {"DURABLE_RAG_WORKER_PROMOTE": "never"})
        self._wait_polling(kind, process)

    def _spawn(self, kind: str, n: int, extra: dict[str, str]) -> Process:
        process = worker_process(self.data_dir, kind, n)
        if process.running():
            raise StackError(
                f"a {kind} worker runs already as instance {n} (pid {process.pid()}): stop it "
                f"(kill {process.pid()}) or abort the deploy it belongs to"
            )
        port = free_port_pair()
        # Beside the old build, `never`: the deploy decides when the new one takes runs.
        env = {**self.env, "DURABLE_RAG_METRICS_PORT": str(port), **extra}
        spawn_worker(
            self.data_dir,
            kind,
            env,
            n,
            serving=self.serving,
            backend_nice=self.backend_nice,
            root=self.root,
        )
        self.metrics[kind] = [f"http://127.0.0.1:{p}/metrics" for p in (port, port + 1)]
        return process

    def _wait_polling(self, kind: str, process: Process) -> None:
        wait_worker_ready(
            process,
            self.settings.temporal.address,
            self.settings.temporal.namespace,
            self.queue(kind),
            timeout=600 if kind == "llm" else 180,
        )

    def health(self, kind: str) -> Health:
        return scrape(self.metrics.get(kind, []))

    def stop(self, kind: str, which: Literal["old", "new"]) -> None:
        # A worker drains its running activities for drain_seconds before it exits.
        timeout = self.settings.worker.drain_seconds + 15
        worker_process(self.data_dir, kind, OLD if which == "old" else NEW).stop(timeout=timeout)

    def promote_new(self, kind: str) -> None:
        new, old = (
            worker_process(self.data_dir, kind, NEW),
            worker_process(self.data_dir, kind, OLD),
        )
        if new.pid_file.exists() and not old.running():
            new.pid_file.replace(old.pid_file)

    def side_by_side(self, kind: str) -> bool:
        # The embedded index is open in one process only (the index worker's; ragkit/index/edge.py).
        return not (kind == "index" and self.settings.index.backend != "qdrant")

    def replace(self, kind: str) -> None:
        """The embedded index's worker, which cannot run beside another: the new one loads
        beside the old and waits for the index (`DURABLE_RAG_EDGE_OPEN_WAIT_SECONDS`); the old
        one stops once the new one waits, and the new one opens the index the moment it is let
        go, and makes its build current as it polls. The gap is the old one's stop, not the new
        one's start."""
        new = worker_process(self.data_dir, kind, NEW)
        seen = new.log_file.stat().st_size if new.log_file.exists() else 0
        process = self._spawn(
            kind,
            NEW,
            {"DURABLE_RAG_WORKER_PROMOTE": "always", "DURABLE_RAG_EDGE_OPEN_WAIT_SECONDS": "300"},
        )
        deadline = time.monotonic() + 300
        while WAITING_FOR_OPENER not in _read_from(process.log_file, seen):
            if not process.running():
                raise process.fail("exited while starting")
            if time.monotonic() > deadline:
                raise process.fail("did not reach the index within 300 s")
            time.sleep(0.2)
        self.stop(kind, "old")
        self._wait_polling(kind, process)
        self.promote_new(kind)


def _read_from(path: Path, offset: int) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            return handle.read().decode(errors="replace")
    except OSError:
        return ""
