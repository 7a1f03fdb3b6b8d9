"""Worker Deployment Versions in Temporal: a tree's build id, which build of a worker kind is
current, which builds poll a queue, and making a build current (ARCHITECTURE.md, *Versioned
workers*).

The build id is the package's version and a hash of what decides a workflow's commands on replay:
the modules of `workflows/`, and every module of ours they import, transitively (the contracts in
`schemas/`, `ragkit.ids`, the policy table, ...), read from the tree as files (this module imports
none of them), so two identical trees get the same id whatever a process has imported, and a
change to activities alone (which runs never replay) keeps it.

The Python SDK has no high-level client for deployments yet (sdk-python #870): these are the raw
WorkflowService calls, behind our own small types.
"""

from __future__ import annotations

import ast
import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import TypeVar

from google.protobuf.field_mask_pb2 import FieldMask
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.deployment.v1 import WorkerDeploymentVersion
from temporalio.api.enums.v1 import VersionDrainageStatus
from temporalio.api.workflow.v1 import VersioningOverride, WorkflowExecutionOptions
from temporalio.api.workflowservice.v1 import (
    DescribeWorkerDeploymentRequest,
    DescribeWorkerDeploymentVersionRequest,
    SetWorkerDeploymentCurrentVersionRequest,
    SetWorkerDeploymentRampingVersionRequest,
    UpdateWorkflowExecutionOptionsRequest,
)
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from ragkit.temporal import pollers

log = logging.getLogger(__name__)
T = TypeVar("T")

ROOT = Path(__file__).resolve().parent.parent  # the tree: workflows/, schemas/, ragkit/
PACKAGE = "durable-rag"
# Our top-level packages a workflow's imports are followed into.
OURS = ("workflows", "schemas", "ragkit")


def _module_file(name: str, root: Path) -> Path | None:
    parts = name.split(".")
    if parts[0] not in OURS:
        return None
    base = root.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imports(path: Path, root: Path) -> set[Path]:
    """The files of ours that `path` imports (and their packages' __init__)."""
    found: set[Path] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        for name in names:
            parts = name.split(".")
            for depth in range(1, len(parts) + 1):
                module = _module_file(".".join(parts[:depth]), root)
                if module is not None:
                    found.add(module)
    return found


def workflow_sources(root: Path = ROOT) -> list[Path]:
    """Every file of ours the workflows' code is made of, sorted."""
    seen: set[Path] = set()
    frontier = sorted((root / "workflows").glob("*.py"))
    while frontier:
        path = frontier.pop()
        if path in seen:
            continue
        seen.add(path)
        frontier.extend(_imports(path, root) - seen)
    return sorted(seen)


def computed_build_id(root: Path = ROOT) -> str:
    """`<package version>-<12 hex digits>`: the same for the same workflow code."""
    digest = hashlib.sha256()
    for path in workflow_sources(root):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return f"{version(PACKAGE)}-{digest.hexdigest()[:12]}"


# The worker kinds; each is a deployment of its own (deployment_name).
KINDS = ("orchestrator", "index", "llm")


def deployment_name(prefix: str, kind: str) -> str:
    """One deployment per worker kind: the LLM and index workers' activities go to their own
    current build, whichever build the workflow that called them is pinned to."""
    if kind not in KINDS:
        raise ValueError(f"unknown worker kind {kind!r}; one of {', '.join(KINDS)}")
    return f"{prefix}-{kind}"


# How a worker process treats its own build when it starts (`DURABLE_RAG_WORKER_PROMOTE`).
PROMOTE_POLICIES = ("always", "if_none", "never")


# The server limits the calls on one deployment (a few a second): a burst of reads waits its turn.
# A busy server may also cancel a call it could not finish (CI: "operation was canceled").
BUSY = (
    RPCStatusCode.RESOURCE_EXHAUSTED,
    RPCStatusCode.UNAVAILABLE,
    RPCStatusCode.CANCELLED,
    RPCStatusCode.DEADLINE_EXCEEDED,
)


async def _patiently(call: Callable[[], Awaitable[T]], within: float = 30.0) -> T:
    delay, deadline = 0.1, time.monotonic() + within
    while True:
        try:
            return await call()
        except RPCError as exc:
            if exc.status not in BUSY or time.monotonic() > deadline:
                raise
        await asyncio.sleep(delay)
        delay = min(delay * 2, 2.0)


@dataclass(frozen=True)
class Routing:
    """Where a deployment's new runs go."""

    deployment: str
    current: str | None  # the current build id; None: unversioned workers get the tasks
    ramping: str | None
    ramp_percentage: float


async def routing(client: Client, deployment: str) -> Routing | None:
    """The deployment's routing; None until a worker of it has polled."""
    try:
        response = await _patiently(
            lambda: client.workflow_service.describe_worker_deployment(
                DescribeWorkerDeploymentRequest(
                    namespace=client.namespace, deployment_name=deployment
                )
            )
        )
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    config = response.worker_deployment_info.routing_config
    return Routing(
        deployment,
        config.current_deployment_version.build_id or None,
        config.ramping_deployment_version.build_id or None,
        config.ramping_version_percentage,
    )


async def make_current(
    client: Client, deployment: str, build: str, policy: str = "always", within: float = 60.0
) -> bool:
    """Make `build` the current build of `deployment` for new runs, per `policy`: `always`;
    `if_none`: only where no build is current yet (a deployment's first start); `never`. True
    when `build` is current at the end. A build becomes known to the server with its first poll:
    until then (at most `within` seconds) this waits."""
    if policy not in PROMOTE_POLICIES:
        raise ValueError(f"promote policy {policy!r}: one of {', '.join(PROMOTE_POLICIES)}")
    if policy == "never":
        return False
    deadline = time.monotonic() + within
    while True:
        try:
            response = await client.workflow_service.describe_worker_deployment(
                DescribeWorkerDeploymentRequest(
                    namespace=client.namespace, deployment_name=deployment
                )
            )
            current = response.worker_deployment_info.routing_config.current_deployment_version
            if current.build_id == build:
                return True
            if policy == "if_none" and current.build_id:
                return False
            await client.workflow_service.set_worker_deployment_current_version(
                SetWorkerDeploymentCurrentVersionRequest(
                    namespace=client.namespace,
                    deployment_name=deployment,
                    build_id=build,
                    conflict_token=response.conflict_token,
                    identity=client.identity,
                    # A restart onto another model polls other LLM queues than the build it
                    # replaces: the server would refuse it as a version missing queues.
                    ignore_missing_task_queues=True,
                )
            )
            log.info("build %s is now current for %s", build, deployment)
            return True
        except RPCError as exc:
            # NOT_FOUND: no poll of this deployment (or version) seen yet; the others: another
            # process changed the routing between our read and our write.
            retry = {
                RPCStatusCode.NOT_FOUND,
                RPCStatusCode.FAILED_PRECONDITION,
                RPCStatusCode.ABORTED,
                *BUSY,
            }
            if exc.status not in retry or time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.2)


async def ramp(client: Client, deployment: str, build: str | None, percentage: float) -> None:
    """Send `percentage` of `deployment`'s new runs to `build` (the rest to the current build);
    `build=None` ends the ramp. A ramp of 100 % does not make a build current (`make_current`).
    The build must have polled already."""
    if not 0 <= percentage <= 100:
        raise ValueError(f"a ramp is a percentage from 0 to 100, not {percentage}")

    async def set_ramp() -> None:
        response = await client.workflow_service.describe_worker_deployment(
            DescribeWorkerDeploymentRequest(namespace=client.namespace, deployment_name=deployment)
        )
        await client.workflow_service.set_worker_deployment_ramping_version(
            SetWorkerDeploymentRampingVersionRequest(
                namespace=client.namespace,
                deployment_name=deployment,
                build_id=build or "",
                percentage=percentage if build else 0,
                conflict_token=response.conflict_token,
                identity=client.identity,
                ignore_missing_task_queues=True,  # as make_current
            )
        )

    await _patiently(set_ramp)


# A build's drainage, as the server says it once the build is neither current nor ramping.
DRAINAGE = {
    VersionDrainageStatus.VERSION_DRAINAGE_STATUS_UNSPECIFIED: "unknown",
    VersionDrainageStatus.VERSION_DRAINAGE_STATUS_DRAINING: "draining",
    VersionDrainageStatus.VERSION_DRAINAGE_STATUS_DRAINED: "drained",
}


async def drainage(client: Client, deployment: str, build: str) -> str:
    """`draining` while runs pinned to `build` are open, then `drained` (its workers may stop);
    `unknown` while it is current or ramping, and for a while after it stops being either (the
    server checks every `matching.wv.VersionDrainageStatusRefreshInterval`), and for a build
    that never polled: never stop a build's workers on `unknown`."""
    try:
        response = await _patiently(
            lambda: client.workflow_service.describe_worker_deployment_version(
                DescribeWorkerDeploymentVersionRequest(
                    namespace=client.namespace,
                    deployment_version=WorkerDeploymentVersion(
                        deployment_name=deployment, build_id=build
                    ),
                )
            )
        )
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:  # a build that never polled
            return "unknown"
        raise
    status = response.worker_deployment_version_info.drainage_info.status
    return DRAINAGE.get(status, "unknown")


async def move_open_runs(client: Client, deployment: str, build: str) -> int:
    """Move the open runs pinned to another build of `deployment` onto `build` (they follow the
    current build from then on): what a restart onto new code needs, whose old workers are gone
    and would never take those runs' next tasks. Each run replays its history on the new code,
    as every run did before versioning: a change that needs a patch still needs it here.
    Returns how many moved."""
    moved = 0
    # Visibility's view (a list does not carry the runs' versioning info): a moved run's
    # behaviour reads AutoUpgrade from then on.
    query = (
        f"TemporalWorkerDeployment = '{deployment}' AND ExecutionStatus = 'Running' "
        f"AND TemporalWorkflowVersioningBehavior = 'Pinned' "
        f"AND TemporalWorkerDeploymentVersion != '{deployment}:{build}'"
    )
    async for execution in client.list_workflows(query):
        await client.workflow_service.update_workflow_execution_options(
            UpdateWorkflowExecutionOptionsRequest(
                namespace=client.namespace,
                workflow_execution=WorkflowExecution(
                    workflow_id=execution.id, run_id=execution.run_id or ""
                ),
                workflow_execution_options=WorkflowExecutionOptions(
                    versioning_override=VersioningOverride(auto_upgrade=True)
                ),
                update_mask=FieldMask(paths=["versioning_override"]),
                identity=client.identity,
            )
        )
        moved += 1
    if moved:
        log.info("moved %d open run(s) of %s from older builds onto %s", moved, deployment, build)
    return moved


async def polling_builds(client: Client, queue: str) -> set[str]:
    """The builds of the workers polling `queue` now ("" for an unversioned one)."""
    return {p.deployment_options.build_id for p in await pollers(client, queue)}
