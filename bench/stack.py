"""The embedded stack as real processes, in a scratch folder on free ports: what the soak loads and
the fault matrix breaks.

Temporal dev server (SQLite file), Postgres, and the orchestrator, index and LLM workers each run
as their own process, as `durable-rag up` starts them, so a fault is a real one: a worker is
SIGKILLed, a server is stopped and started again on the same files. More than one worker of a kind
(instance 2, 3...) and gateways can be added, as a deployment that grows adds them (bench/
scaleout.py). Every worker serves its metrics on a port of its own. Parts are started and stopped
by PID; `close()` stops everything and removes the folder.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psutil
from temporalio.runtime import LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter

from durable_rag.stack.postgres import EmbeddedPostgres, migrate
from durable_rag.stack.process import Process, free_port, free_port_pair, port_in_use
from durable_rag.stack.temporal import TemporalDevServer
from durable_rag.stack.workers import (
    WORKER_KINDS,
    backend_nice,
    gateway_process,
    longest_start_first,
    serving_cpus,
    spawn_worker,
    wait_gateway_ready,
    wait_worker_ready,
    worker_process,
    worker_queue,
)
from ragkit import failpoints
from ragkit.codec import new_key_entry
from ragkit.llm.models import resolve_generator
from ragkit.settings import PACKAGED_SMOLLM2, Settings

ROOT = Path(__file__).resolve().parent.parent

# Timeouts the fault matrix shortens, through the operators' override (DURABLE_RAG_ACTIVITY_
# POLICIES): a SIGKILLed index worker's embedding is retried after 10 s rather than 60 s.
POLICY_OVERRIDES = {"index_documents": {"heartbeat_seconds": 10}}


class ProcessStack:
    def __init__(self, prefix: str = "stack", **overrides: Any) -> None:
        self.prefix = prefix
        self.work = Path(tempfile.mkdtemp(prefix=f"durable-rag-{prefix}-"))
        # Converted once into the checkout's .data (shared with `durable-rag up` and the tests).
        model = resolve_generator(PACKAGED_SMOLLM2, ROOT / ".data")
        tag = uuid.uuid4().hex[:6]
        values: dict[str, Any] = {
            "data_dir": str(self.work / "data"),
            "temporal_address": f"127.0.0.1:{free_port()}",
            "temporal_ui_port": free_port(),
            "temporal_metrics_port": free_port(),
            "postgres_port": free_port(),
            "workflow_task_queue": f"{prefix}-wf-{tag}",
            "index_task_queue": f"{prefix}-ix-{tag}",
            "live_task_queue": f"{prefix}-live-{tag}",
            "llm_model": model,
            "llm_served_name": f"smollm2-{tag}",
            "llm_max_num_seqs": 4,
            "llm_max_concurrent_generations": 4,
            "llm_cpu_kvcache_gib": 1,
            "conversation_idle_seconds": 5,
            "worker_drain_seconds": 5,
            "failpoints_file": str(self.work / "failpoints.json"),
            "activity_policies": json.dumps(POLICY_OVERRIDES),
            "metrics_port": 0,
            # Its own keyring, as `durable-rag up` makes one: payloads are sealed by default.
            "security_payload_keys": new_key_entry("bench"),
        }
        values.update(overrides)
        # The launcher's DURABLE_RAG_* settings stay out of the parts' environment, except the CPU
        # split: a run compares with the engine's CPUs shared (DURABLE_RAG_LLM_CPU_ENGINE_CPUS=off).
        self.env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("DURABLE_RAG_") or k == "DURABLE_RAG_LLM_CPU_ENGINE_CPUS"
        }
        self.env.update({f"DURABLE_RAG_{k.upper()}": str(v) for k, v in values.items()})
        self.env.update(
            HF_HUB_OFFLINE="1",
            TQDM_DISABLE="1",
            TOKENIZERS_PARALLELISM="false",
            VLLM_CACHE_ROOT=str(ROOT / ".data" / "vllm-cache"),
            VLLM_CPU_KVCACHE_SPACE="1",
        )
        # The launcher's own view: the same values, read the way the workers read them.
        self.settings = Settings(
            **{k: json.loads(v) if k == "activity_policies" else v for k, v in values.items()}
        )
        self.data_dir = self.settings.data_dir
        # As `durable-rag up` runs them: the serving parts beside the CPU engine, on their CPUs.
        self.serving = serving_cpus(self.settings)
        host_port = self.settings.temporal.address.rpartition(":")[2]
        self.temporal = TemporalDevServer(
            self.data_dir,
            int(host_port),
            self.settings.temporal.ui_port,
            self.settings.temporal.metrics_port,
            cpus=self.serving,
        )
        self.postgres = EmbeddedPostgres(
            self.data_dir / "postgres", self.settings.postgres.port, self.serving
        )
        self.backend_nice = backend_nice(self.settings, self.serving)
        self.temporal.nice = self.postgres.nice = self.backend_nice
        self.failpoints_file = self.work / "failpoints.json"
        # (kind, instance) of every worker started, with its metrics port (the SDK's is + 1).
        self.metrics_ports: dict[tuple[str, int], int] = {}
        self.gateway_ports: dict[int, int] = {}  # instance -> port

    # --- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Start every part and wait until each is ready (the LLM worker loads vLLM: ~1 min)."""
        self.temporal.start()
        self.postgres.start()
        self.postgres.ensure_database(self.settings.postgres.database)
        migrate(self.settings.postgres.sqlalchemy_url)
        self.start_workers(WORKER_KINDS)

    def close(self) -> None:
        for n in self.gateway_ports:
            self.gateway(n).stop(timeout=15)
        # Every worker was started by start_worker, which registers it here.
        for kind, n in reversed(list(self.metrics_ports)):
            self.worker(kind, n).stop(timeout=15)
        self.postgres.stop()
        self.temporal.stop()
        # The parts' logs outlive the scratch folder: where to look when a run went wrong.
        logs = ROOT / ".data" / "bench" / f"logs-{self.prefix}"
        shutil.rmtree(logs, ignore_errors=True)
        with contextlib.suppress(OSError):
            shutil.copytree(self.data_dir / "logs", logs)
        shutil.rmtree(self.work, ignore_errors=True)

    def worker(self, kind: str, n: int = 1) -> Process:
        """Instance `n` of a kind of worker; instance 1 is the one `durable-rag up` would run."""
        return worker_process(self.data_dir, kind, n)

    def start_worker(self, kind: str, n: int = 1) -> None:
        self.start_workers([kind], n)

    def start_workers(self, kinds: Sequence[str], n: int = 1, root: Path = ROOT) -> None:
        """Start instance `n` of each kind together, from the code at `root`, then wait until
        each polls: their imports and model loads overlap (the LLM worker's vLLM load is most
        of a stack's start)."""
        started = []
        for kind in longest_start_first(kinds):
            port = free_port_pair()
            self.metrics_ports[(kind, n)] = port
            env = {**self.env, "DURABLE_RAG_METRICS_PORT": str(port)}
            started.append(
                (
                    kind,
                    spawn_worker(
                        self.data_dir,
                        kind,
                        env,
                        n,
                        serving=self.serving,
                        backend_nice=self.backend_nice,
                        root=root,
                    ),
                )
            )
        for kind, process in started:
            wait_worker_ready(
                process,
                self.settings.temporal.address,
                self.settings.temporal.namespace,
                worker_queue(self.settings, kind),
                timeout=600 if kind == "llm" else 180,
            )

    def kill_worker(self, kind: str, n: int = 1) -> None:
        """SIGKILL, as a crash or the OOM killer would: no drain, no clean-up."""
        self.worker(kind, n).kill()

    def gateway(self, n: int) -> Process:
        return gateway_process(self.data_dir, n)

    def start_gateway(self, n: int = 1, **overrides: Any) -> str:
        """Start gateway instance `n` on a free port, with settings of its own if given; returns
        its base URL once /healthz answers."""
        process = self.gateway(n)
        port = free_port()
        env = {**self.env, "DURABLE_RAG_GATEWAY_PORT": str(port)}
        env.update({f"DURABLE_RAG_{k.upper()}": str(v) for k, v in overrides.items()})
        process.spawn([sys.executable, "-m", "gateway"], env=env, cwd=ROOT, cpus=self.serving)
        self.gateway_ports[n] = port
        wait_gateway_ready(process, port)
        return f"http://127.0.0.1:{port}"

    def stop_worker(self, kind: str) -> None:
        self.worker(kind).stop(timeout=15, sig=signal.SIGTERM)

    def restart_temporal(self, down_seconds: float = 1.0) -> None:
        """Stop the dev server and start it again on the same SQLite file and ports."""
        self.temporal.stop()
        ports = [self.temporal.port, self.temporal.metrics_port]
        ports += [self.temporal.ui_port] if self.temporal.ui_port else []
        _wait_ports_free(ports)
        time.sleep(down_seconds)
        self.temporal.start()

    def restart_postgres(self, down_seconds: float = 1.0) -> None:
        self.postgres.stop()
        _wait_ports_free([self.postgres.port])
        time.sleep(down_seconds)
        self.postgres.start()

    def set_failpoints(self, points: dict[str, dict[str, Any]]) -> None:
        failpoints.write(self.failpoints_file, points)

    # --- measurements ---------------------------------------------------------------------------

    def pids(self) -> dict[str, int | None]:
        parts: dict[str, int | None] = {
            "temporal": self.temporal.process.pid(),
            "postgres": self.postgres.pid(),
        }
        for kind in WORKER_KINDS:
            parts[f"worker-{kind}"] = self.worker(kind).pid()
        return parts

    def rss(self) -> dict[str, int]:
        """Resident memory of each part, in bytes, with its child processes (Postgres backends,
        vLLM's engine core)."""
        return self._memory(lambda proc: proc.memory_info().rss)

    def pss(self) -> dict[str, int]:
        """Proportional memory of each part, in bytes, with its child processes: a page shared
        by n processes counts 1/n in each. Summing RSS counts Postgres's shared buffers once per
        backend that touched them: it grows as backends touch more, with no memory added."""
        return self._memory(lambda proc: proc.memory_full_info().pss)

    def _memory(self, of: Callable[[psutil.Process], int]) -> dict[str, int]:
        sizes: dict[str, int] = {}
        for part, pid in self.pids().items():
            total = 0
            with contextlib.suppress(psutil.Error):
                root = psutil.Process(pid) if pid else None
                for proc in [root, *root.children(recursive=True)] if root else []:
                    with contextlib.suppress(psutil.Error):
                        total += of(proc)
            sizes[part] = total
        return sizes


@functools.cache
def quiet_runtime() -> Runtime:
    """A client runtime that logs errors only: the Rust core warns on every retried call, and
    while a fault lasts that is thousands of lines around the figures."""
    return Runtime(
        telemetry=TelemetryConfig(
            logging=LoggingConfig(filter=TelemetryFilter(core_level="ERROR", other_level="ERROR"))
        )
    )


def _wait_ports_free(ports: list[int], timeout: float = 30.0) -> None:
    """A stopped server's sockets can outlive it for a moment; starting again needs them."""
    deadline = time.monotonic() + timeout
    while any(port_in_use(p) for p in ports) and time.monotonic() < deadline:
        time.sleep(0.2)


async def started(prefix: str, **overrides: Any) -> ProcessStack:
    stack = ProcessStack(prefix, **overrides)
    try:
        await asyncio.to_thread(stack.start)
    except BaseException:
        await asyncio.to_thread(stack.close)
        raise
    return stack
