"""The embedded stack's workers as a deploy sees them (durable_rag/deploy.py): the running build's
are instance 1 of each kind (what `durable-rag up` started); the new build's are instance 2,
started from the new code beside them, leaving routing alone, with metrics on ports of their own
for the health checks. Once the old ones stop, the new ones take over instance 1's PID file."""

from __future__ import annotations

import os
from collections.abc import Collection
from pathlib import Path
from typing import Literal

from durable_rag.deploy import Health, scrape
from durable_rag.stack.process import StackError, free_port_pair
from durable_rag.stack.workers import (
    ROOT,
    spawn_worker,
    wait_worker_ready,
    worker_process,
    worker_queue,
)
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

    def start_new(self, kind: str, n: int = NEW, promote: str = "never") -> None:
        process = worker_process(self.data_dir, kind, n)
        if process.running():
            raise StackError(
                f"a {kind} worker runs already as instance {n} (pid {process.pid()}): stop it "
                f"(kill {process.pid()}) or abort the deploy it belongs to"
            )
        port = free_port_pair()
        env = {
            **self.env,
            # Beside the old build: the deploy decides when the new one takes runs.
            "DURABLE_RAG_WORKER_PROMOTE": promote,
            "DURABLE_RAG_METRICS_PORT": str(port),
        }
        spawn_worker(
            self.data_dir,
            kind,
            env,
            n,
            serving=self.serving,
            backend_nice=self.backend_nice,
            root=self.root,
        )
        wait_worker_ready(
            process,
            self.settings.temporal.address,
            self.settings.temporal.namespace,
            self.queue(kind),
            timeout=600 if kind == "llm" else 180,
        )
        self.metrics[kind] = [f"http://127.0.0.1:{p}/metrics" for p in (port, port + 1)]

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
        self.stop(kind, "old")
        self.start_new(kind, OLD, promote="always")
