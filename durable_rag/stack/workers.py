"""The embedded stack's worker and gateway processes: where each runs from, its PID and log files,
and when it counts as ready (it polls its task queue; the gateway answers /healthz)."""

from __future__ import annotations

import asyncio
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Collection, Iterable
from pathlib import Path

from temporalio.client import Client

from durable_rag.stack.process import Process, StackError
from ragkit.cpus import CpuIsolationError, engine_split
from ragkit.deployments import KINDS
from ragkit.policies import llm_queue
from ragkit.settings import Settings
from ragkit.temporal import queue_has_poller

# The checkout the processes run from (python -m workers.<kind>, python -m gateway).
ROOT = Path(__file__).resolve().parents[2]

WORKER_KINDS = KINDS  # each a Worker Deployment of its own (ragkit.deployments)


def longest_start_first(kinds: Iterable[str]) -> list[str]:
    """Kinds in the order to spawn them when they start together: the LLM worker (its vLLM load
    is most of a stack's start) first."""
    return sorted(kinds, key=lambda kind: kind != "llm")


def _suffix(n: int, sep: str) -> str:
    """Instance 1 is the one `durable-rag up` runs; more of a kind (2, 3...) run where a
    deployment scales out (bench/scaleout.py), each with its own pid and log file."""
    return "" if n == 1 else f"{sep}{n}"


def worker_process(data_dir: Path, kind: str, n: int = 1) -> Process:
    stem = f"worker-{kind}{_suffix(n, '-')}"
    return Process(
        f"{kind} worker{_suffix(n, ' ')}",
        data_dir / "run" / f"{stem}.pid",
        data_dir / "logs" / f"{stem}.log",
    )


# Beside a CPU engine, the parts that answer live questions start on the serving CPUs (`serving`,
# ragkit/cpus.py), the orchestrator at `backend_nice` behind the gateway. The index worker embeds
# in bulk, niced, on whatever CPU is idle; the LLM worker starts unpinned and moves itself once
# its engine's threads are bound (workers/llm.py).
PINNED_KINDS = ("orchestrator",)


def spawn_worker(
    data_dir: Path,
    kind: str,
    env: dict[str, str] | None = None,
    n: int = 1,
    serving: Collection[int] | None = None,
    backend_nice: int = 0,
    root: Path = ROOT,
) -> Process:
    """Start instance `n` of `kind` from the checkout at `root` (a deploy's new build may run
    from another tree than the launcher's)."""
    process = worker_process(data_dir, kind, n)
    pinned = kind in PINNED_KINDS and serving is not None
    process.spawn(
        [sys.executable, "-m", f"workers.{kind}"],
        env=env,
        cwd=root,
        cpus=serving if pinned else None,
        nice=backend_nice if pinned else 0,
    )
    return process


def backend_nice(settings: Settings, serving: Collection[int] | None) -> int:
    """The niceness of the parts behind the gateway on the serving CPUs (Temporal, Postgres,
    the orchestrator): the settings' beside a CPU engine, else 0 (nothing shares that way)."""
    return settings.worker.backend_nice if serving else 0


def serving_cpus(settings: Settings) -> tuple[int, ...] | None:
    """The CPUs the serving parts run on beside the settings' CPU engine; None: unpinned."""
    try:
        split = engine_split(settings)
    except CpuIsolationError as exc:
        raise StackError(str(exc)) from exc
    return split.serving if split else None


def polled(address: str, namespace: str, queue: str) -> bool:
    """Whether any worker polls `queue` now."""
    return asyncio.run(_queue_has_poller(address, namespace, queue, None))


async def _queue_has_poller(address: str, namespace: str, queue: str, pid: int | None) -> bool:
    try:
        client = await asyncio.wait_for(Client.connect(address, namespace=namespace), timeout=2)
        return await queue_has_poller(client, queue, pid)
    except Exception:  # the server is not up yet: not ready
        return False


def wait_worker_ready(
    process: Process, address: str, namespace: str, queue: str, timeout: float = 180.0
) -> None:
    """Ready means: this process polls its task queue (it polls only once its model is loaded)."""
    pid = process.pid()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not process.running():
            raise process.fail("exited while starting")
        if pid and asyncio.run(_queue_has_poller(address, namespace, queue, pid)):
            return
        time.sleep(0.5)
    raise process.fail(f"did not poll task queue {queue!r} within {timeout:.0f}s")


def gateway_process(data_dir: Path, n: int = 1) -> Process:
    stem = f"gateway{_suffix(n, '-')}"
    return Process(
        f"gateway{_suffix(n, ' ')}",
        data_dir / "run" / f"{stem}.pid",
        data_dir / "logs" / f"{stem}.log",
    )


def wait_gateway_ready(process: Process, port: int, timeout: float = 60.0) -> None:
    """Ready means: /healthz answers (readiness of the workers is /readyz's business)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not process.running():
            raise process.fail("exited while starting")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.3)
    raise process.fail(f"did not answer /healthz on port {port} within {timeout:.0f}s")


def worker_queue(settings: Settings, kind: str) -> str:
    """The task queue a worker of `kind` (one of WORKER_KINDS) polls."""
    return {
        "orchestrator": settings.temporal.workflow_task_queue,
        "index": settings.temporal.index_task_queue,
        "llm": llm_queue(settings.llm.name),
    }[kind]
