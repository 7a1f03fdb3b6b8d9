"""The fault matrix's `deploy` row, its mechanics (bench/faults.py runs it under the mixed load):
build B beside a running stack's build A, deployed with the real `durable-rag deploy` run from B's
code, or, for the figure of what a deploy cost before versioned workers, started in place of A's
workers (`restart_deploy`); then what Temporal says of the runs: how many closed on each build,
the conversations that moved to B at continue-as-new, and every workflow task failure, with the
non-determinism errors among them."""

from __future__ import annotations

import asyncio
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import Client
from temporalio.service import RPCError

from bench.next_build import next_build
from bench.stack import ProcessStack
from ragkit import deployments

NONDETERMINISM = WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_NON_DETERMINISTIC_ERROR
RAMP = "50"
PAUSE_SECONDS = 5.0  # at the ramp and after the activity kinds, before each health check


def stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class Rollout:
    """What one deploy of build B did, and what Temporal says of the runs around it."""

    build_a: str
    build_b: str
    how: str  # deploy | restart
    exit_code: int | None = None  # the deploy command's
    current_s: float = 0.0  # from the deploy's start until B was current for new runs
    drained_s: float = 0.0  # from "current" until A had drained (the command's own figure)
    runs: dict[str, int] = field(default_factory=dict)  # closed runs per build
    moved: int = 0  # conversations continued as new from A onto B
    task_failures: int = 0
    nondeterminism: int = 0
    output: list[str] = field(default_factory=list)  # the deploy command's last lines

    def lines(self) -> list[str]:
        runs = ", ".join(f"{build} {count}" for build, count in self.runs.items())
        found = [
            f"{self.how} {self.build_a} -> {self.build_b}: B current after {self.current_s:.1f} s"
            + (f", A drained {self.drained_s:.1f} s after" if self.how == "deploy" else ""),
            f"runs closed per build: {runs}; conversations moved to B at continue-as-new: "
            f"{self.moved}",
            f"workflow task failures {self.task_failures}, non-determinism {self.nondeterminism}",
        ]
        if self.exit_code:
            found += [f"deploy exited {self.exit_code}:", *self.output]
        return found


def build_b(stack: ProcessStack, name: str, commands: int = 1) -> tuple[Path, str]:
    """B's code beside the stack, and its build id. Rows in one run each deploy a build of their
    own (`commands`: the new commands' count), which the build before cannot replay."""
    root = next_build(stack.work / f"build-b-{name}", commands=commands)
    return root, deployments.computed_build_id(root)


async def current_build(client: Client, stack: ProcessStack, kind: str = "orchestrator") -> str:
    routing = await deployments.routing(client, deployment(stack, kind))
    if routing is None or routing.current is None:
        raise RuntimeError(f"no build of {deployment(stack, kind)} is current")
    return routing.current


def deployment(stack: ProcessStack, kind: str = "orchestrator") -> str:
    return deployments.deployment_name(stack.settings.worker.deployment_name, kind)


async def deploy(
    stack: ProcessStack, client: Client, root: Path, rollout: Rollout, kinds: Sequence[str]
) -> None:
    """`durable-rag deploy` as an operator runs it, from B's checkout, on the stack's settings."""
    began = time.monotonic()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "cli",
        "deploy",
        "--ramp",
        RAMP,
        "--pause",
        str(PAUSE_SECONDS),
        "--kinds",
        ",".join(kinds),
        "--drain-timeout",
        "300",
        cwd=root,
        env={**stack.env, "COLUMNS": "200"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    finished = asyncio.create_task(process.communicate())
    while not finished.done():
        if await current_build(client, stack) == rollout.build_b and not rollout.current_s:
            rollout.current_s = time.monotonic() - began
        await asyncio.sleep(0.5)
    output = (await finished)[0].decode(errors="replace").splitlines()
    rollout.exit_code = process.returncode
    rollout.output = output[-12:]
    for line in output:
        if match := re.search(r"drained in ([0-9.]+) s", line):
            rollout.drained_s = float(match.group(1))
    # Whatever happened, no new worker is left beside the stack's.
    for kind in kinds:
        stack.worker(kind, 2).stop(timeout=30)


def restart(stack: ProcessStack, root: Path, kinds: Sequence[str]) -> None:
    """What a deploy was before versioned workers: stop A's workers, start B's in their place
    (as `durable-rag up` does: B is made current, A's open runs move onto it)."""
    for kind in kinds:
        stack.stop_worker(kind)
    stack.start_workers(kinds, root=root)


async def account(
    client: Client, stack: ProcessStack, rollout: Rollout, since: datetime, switched: datetime
) -> None:
    """Runs closed per build, conversations moved, workflow task failures: from Temporal."""
    name = deployment(stack)
    after = f"StartTime >= '{stamp(since)}'"
    for build in (rollout.build_a, rollout.build_b):
        query = (
            f"TemporalWorkerDeploymentVersion = '{name}:{build}' AND {after} "
            "AND ExecutionStatus != 'Running'"
        )
        rollout.runs[build] = (await client.count_workflows(query)).count
    moved = (
        f"WorkflowType = 'ConversationWorkflow' AND ExecutionStatus = 'ContinuedAsNew' "
        f"AND TemporalWorkerDeploymentVersion = '{name}:{rollout.build_a}' "
        f"AND CloseTime >= '{stamp(switched)}'"
    )
    rollout.moved = (await client.count_workflows(moved)).count
    async for execution in client.list_workflows(after):
        handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
        try:
            async for event in handle.fetch_history_events():
                if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                    rollout.task_failures += 1
                    cause = event.workflow_task_failed_event_attributes.cause
                    rollout.nondeterminism += cause == NONDETERMINISM
        except RPCError:  # deleted meanwhile (a forgotten run)
            continue


async def terminate_stuck(client: Client, since: datetime) -> int:
    """End the runs a restart left stuck, so the stack takes the next row."""
    ended = 0
    async for execution in client.list_workflows(
        f"ExecutionStatus = 'Running' AND StartTime >= '{stamp(since)}'"
    ):
        handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
        try:
            await handle.terminate(reason="stuck after a restart onto new code (bench/faults.py)")
            ended += 1
        except RPCError:
            continue
    return ended
