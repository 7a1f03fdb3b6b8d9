"""What every worker process shares: the client connection, metrics and signal handling."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any

from prometheus_client import start_http_server
from sqlalchemy.orm import Session, sessionmaker
from temporalio import activity
from temporalio.common import WorkerDeploymentVersion
from temporalio.exceptions import CancelledError
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
    Worker,
    WorkflowInstance,
    WorkflowInstanceDetails,
)
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions
from temporalio.worker.workflow_sandbox._runner import _Instance as _SandboxedInstance

from ragkit import cuda, deployments, failpoints, metrics
from ragkit.embedding import Embedder, load_embedder
from ragkit.index.generations import Generations
from ragkit.index.reads import ActiveReader, IndexReader, ReadClient
from ragkit.policies import PolicyTable
from ragkit.settings import Settings
from workflows.calls import PolicyTableInterceptor

log = logging.getLogger(__name__)


def make_runtime(settings: Settings) -> Runtime | None:
    """Our metrics on metrics_port; the Temporal SDK's own (task slots, schedule-to-start
    latency) and the workflows' step metrics on metrics_port + 1."""
    if not settings.worker.metrics_port:
        return None
    start_http_server(settings.worker.metrics_port, addr="0.0.0.0")
    return temporal_runtime(f"0.0.0.0:{settings.worker.metrics_port + 1}")


def temporal_runtime(bind_address: str) -> Runtime:
    """A Temporal runtime serving its metrics (Prometheus text) on `bind_address`."""
    return Runtime(
        telemetry=TelemetryConfig(
            metrics=PrometheusConfig(
                bind_address=bind_address,
                # Counters end in _total, as Prometheus (and promtool) expect.
                counters_total_suffix=True,
                histogram_bucket_overrides={
                    metrics.WORKFLOW_STEP_SECONDS: list(metrics.WORKFLOW_STEP_BUCKETS)
                },
            )
        )
    )


def refuse_unless_cuda_works(what: str) -> None:
    """R30: a GPU worker whose driver, torch build and devices disagree exits at once, with the
    reason (exit status 1), before it loads a model or polls a queue."""
    facts = cuda.probe()
    try:
        cuda.check(facts, what)
    except cuda.CudaMismatch as exc:
        log.critical("refusing to start: %s", exc)
        raise SystemExit(f"refusing to start: {exc}") from exc
    log.info("CUDA check passed for %s: %s", what, facts.describe())


def worker_interceptors(settings: Settings) -> list[Interceptor]:
    """Every worker's interceptors: its policy table for the workflows it runs, activity
    metrics, and failpoints when the fault matrix switches them on (DURABLE_RAG_FAILPOINTS_FILE)."""
    failpoints.configure(settings.worker.failpoints_file)
    found: list[Interceptor] = [
        PolicyTableInterceptor(PolicyTable.from_settings(settings)),
        ActivityMetrics(),
    ]
    if settings.worker.failpoints_file is not None:
        found.append(Failpoints())
    return found


def workflow_runner() -> SandboxedWorkflowRunner:
    """The sandbox, with our own `workflows` package passed through: the sandbox otherwise
    re-imports each workflow module for every run, ~20 ms of an answer's CPU on 2 cores
    (bench/serving.py replays a recorded answer both ways). What the sandbox would have caught in
    that code (a clock, randomness, I/O) is kept out by tests/workflows/test_determinism.py and
    the import contracts, and tests/workflows/test_replay.py replays under the full sandbox."""
    return _Sandbox(restrictions=SandboxRestrictions.default.with_passthrough_modules("workflows"))


class _Sandbox(SandboxedWorkflowRunner):
    """The SDK's sandbox, with the per-payload context lookups made as plain calls."""

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return _DirectContextInstance(det, self.runner_class, self.restrictions)


class _DirectContextInstance(_SandboxedInstance):
    """The SDK (temporalio 1.35) asks a sandboxed run for a payload's serialization and storage
    context once per payload of every activation and completion, ~60 times an answer, and
    each ask `exec`s a snippet inside the sandbox with its import hooks applied: 6-7 ms of an
    answer's CPU, a third of its workflow code (bench/serving.py's replay rows). Both lookups only
    read the run's own table of pending commands in temporalio's code, which is passed through
    the sandbox, so they reach nothing the sandbox guards. The workflow code itself still runs
    inside it. tests/workers/test_common.py checks both lookups against the SDK's own."""

    def get_serialization_context(self, command_info: Any) -> Any:
        in_sandbox: Any = self.globals_and_locals["__temporal_in_sandbox"]
        return in_sandbox.get_serialization_context(command_info)

    def get_external_store_context(self, command_info: Any) -> Any:
        in_sandbox: Any = self.globals_and_locals["__temporal_in_sandbox"]
        return in_sandbox.get_external_store_context(command_info)


class Failpoints(Interceptor):
    """Slows an activity down on purpose (`activity:<name>` failpoints), so that it outlives
    its declared timeout the way a stuck dependency would."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _FailpointsInbound(next)


class _FailpointsInbound(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        delay = failpoints.delay_for(activity.info().activity_type)
        if delay:
            await asyncio.sleep(delay)
        return await self.next.execute_activity(input)


class ActivityMetrics(Interceptor):
    """Every worker's activities: latency by outcome, and retries (attempts after the first)."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _ActivityMetricsInbound(next)


class _ActivityMetricsInbound(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        if info.attempt > 1:
            metrics.ACTIVITY_RETRIES.labels(info.activity_type).inc()
        started = time.perf_counter()
        outcome = "failed"
        try:
            result = await self.next.execute_activity(input)
            outcome = "completed"
            return result
        except (asyncio.CancelledError, CancelledError):
            outcome = "cancelled"
            raise
        finally:
            metrics.ACTIVITY_SECONDS.labels(info.activity_type, outcome).observe(
                time.perf_counter() - started
            )


async def run_until_signalled(
    *workers: Worker,
    promote: str = "never",
    on_stop: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Run workers until SIGINT/SIGTERM, then let in-flight activities finish (graceful). A
    versioned worker's build is made current once it polls, per `promote`
    (ragkit.deployments.make_current; `DURABLE_RAG_WORKER_PROMOTE`)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with contextlib.AsyncExitStack() as running:
        versions: set[WorkerDeploymentVersion] = set()
        for worker in workers:
            await running.enter_async_context(worker)
            deployed = deployed_as(worker)
            build = f"build {deployed.build_id} of {deployed.deployment_name}" if deployed else ""
            log.info("worker polling task queue %s %s", worker.task_queue, build or "unversioned")
            metrics.WORKER_BUILD.labels(worker.task_queue).info(
                {
                    "deployment": deployed.deployment_name if deployed else "",
                    "build_id": deployed.build_id if deployed else "",
                }
            )
            if deployed is not None:
                versions.add(deployed)
        for version in versions:
            client, name, build = workers[0].client, version.deployment_name, version.build_id
            if await deployments.make_current(client, name, build, promote) and (
                promote == "always"
            ):
                # A restart onto new code: the old build's workers are gone.
                await deployments.move_open_runs(client, name, build)
        await stop.wait()
        log.info("workers on %s shutting down", ", ".join(w.task_queue for w in workers))
    if on_stop is not None:
        await on_stop()


def deployed_as(worker: Worker) -> WorkerDeploymentVersion | None:
    """The deployment version a worker polls as; None: unversioned."""
    config = worker.config().get("deployment_config")
    if config is None or not config.use_worker_versioning:
        return None
    return config.version


def load_embedder_for(settings: Settings) -> Embedder:
    """The configured embedding model, loaded (the index worker's for passages, the
    orchestrator's for queries)."""
    if settings.profile == "embedded":
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing downloads on an embedded machine
    return load_embedder(
        settings.embedding.model,
        settings.embedding.device,
        settings.embedding.max_length,
        settings.embedding.batch_size,
    )


def open_reader(
    settings: Settings, sessions: sessionmaker[Session], embedder: Embedder
) -> IndexReader:
    """How live retrieval reads the index: a Qdrant server directly; the Edge index through
    its one opener, the index worker, on its read socket."""
    if settings.index.backend == "qdrant":
        return ActiveReader(Generations(settings, sessions, embedder.name, embedder.dimension))
    return ReadClient(
        settings.read_socket_path, embedder.name, settings.index.qdrant_timeout_seconds
    )
