"""ragkit/deployments.py on the real dev server: a versioned worker gets no task until its build
is current; `if_none` makes a deployment's first build current and leaves a later one alone;
`always` moves new runs to the later build, while the first build's pinned run stays on it."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import Client
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.worker import UnsandboxedWorkflowRunner, Worker, WorkerDeploymentConfig

from ragkit import deployments

pytestmark = pytest.mark.integration


@workflow.defn(versioning_behavior=VersioningBehavior.PINNED)
class Which:
    def __init__(self) -> None:
        self.go = False

    @workflow.run
    async def run(self) -> str:
        await workflow.wait_condition(lambda: self.go)
        version = workflow.info().get_current_deployment_version()
        return version.build_id if version else ""

    @workflow.signal
    def release(self) -> None:
        self.go = True


def versioned(client: Client, queue: str, deployment: str, build: str) -> Worker:
    version = WorkerDeploymentVersion(deployment, build)
    return Worker(
        client,
        task_queue=queue,
        workflows=[Which],
        workflow_runner=UnsandboxedWorkflowRunner(),
        deployment_config=WorkerDeploymentConfig(version=version, use_worker_versioning=True),
    )


async def until(
    check: Callable[[], Awaitable[Any]], what: str, within: float = 30, every: float = 0.1
) -> None:
    """Until `check()` is truthy: the server's routing, pollers, visibility and drainage each
    lag a moment behind what caused them. The server limits the calls on one deployment to a
    few a second: a check of its routing polls every half second."""
    deadline = asyncio.get_running_loop().time() + within
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, f"never {what}"
        await asyncio.sleep(every)


async def polled_by(client: Client, queue: str, builds: set[str]) -> None:
    """A poller shows once its first poll has reached the server."""

    async def polled() -> bool:
        return await deployments.polling_builds(client, queue) == builds

    await until(polled, f"polled by {builds}")


async def on_build(handle: Any, build: str) -> bool:
    info = (await handle.describe()).raw_description.workflow_execution_info
    return bool(info.versioning_info.deployment_version.build_id == build)


async def drained_as(client: Client, deployment: str, build: str, status: str) -> bool:
    return await deployments.drainage(client, deployment, build) == status


async def started(client: Client, queue: str) -> Any:
    return await client.start_workflow(Which.run, id=f"which-{uuid.uuid4().hex}", task_queue=queue)


async def test_a_build_takes_new_runs_once_current_and_a_pinned_run_stays_on_its_own(
    client: Client,
) -> None:
    queue, deployment = f"dq-{uuid.uuid4().hex[:8]}", f"dep-{uuid.uuid4().hex[:8]}"
    assert await deployments.routing(client, deployment) is None  # no worker of it polled yet
    async with versioned(client, queue, deployment, "b1"):
        first = await started(client, queue)
        await asyncio.sleep(1)
        # No build is current yet: the task waits for one (none of its events is a start).
        events = [e async for e in first.fetch_history_events()]
        assert not any(e.HasField("workflow_task_started_event_attributes") for e in events)
        assert await deployments.make_current(client, deployment, "b1", "if_none")
        routing = await deployments.routing(client, deployment)
        assert routing is not None and routing.current == "b1"
        async with versioned(client, queue, deployment, "b2"):
            # b1 is current: a later build waits for a deploy to move traffic.
            assert not await deployments.make_current(client, deployment, "b2", "if_none")
            assert not await deployments.make_current(client, deployment, "b2", "never")
            await polled_by(client, queue, {"b1", "b2"})
            assert await deployments.make_current(client, deployment, "b2", "always")
            second = await started(client, queue)
            for handle in (first, second):
                await handle.signal(Which.release)
            # The first run began on b1 and is pinned there; the second began once b2 was current.
            assert await asyncio.wait_for(first.result(), 30) == "b1"
            assert await asyncio.wait_for(second.result(), 30) == "b2"
    with pytest.raises(ValueError, match="promote policy"):
        await deployments.make_current(client, deployment, "b2", "sometimes")


async def test_a_restart_onto_a_new_build_moves_the_old_builds_open_runs_onto_it(
    client: Client,
) -> None:
    """`durable-rag up` after `down`: the old build's workers are gone; its open pinned runs would
    wait for them for ever. Made current with `always`, the new build takes them over."""
    queue, deployment = f"dq-{uuid.uuid4().hex[:8]}", f"dep-{uuid.uuid4().hex[:8]}"
    async with versioned(client, queue, deployment, "old"):
        assert await deployments.make_current(client, deployment, "old", "always")
        open_run = await started(client, queue)
        # Its first task ran on the old build: it is pinned there.
        await until(lambda: on_build(open_run, "old"), "pinned to the old build")
    async with versioned(client, queue, deployment, "new"):
        assert await deployments.make_current(client, deployment, "new", "always")
        # Visibility lags the run's first task by a moment.
        await until(
            lambda: deployments.move_open_runs(client, deployment, "new"), "the open run listed"
        )
        await open_run.signal(Which.release)
        assert await asyncio.wait_for(open_run.result(), 30) == "new"
        assert await deployments.move_open_runs(client, deployment, "new") == 0


async def test_a_ramp_sends_new_runs_to_the_new_build_and_the_old_one_drains(
    client: Client,
) -> None:
    """What `durable-rag deploy` is made of: ramp, make current, wait for the old build to
    drain (the dev server checks drainage every second: durable_rag/stack/temporal.py)."""
    queue, deployment = f"dq-{uuid.uuid4().hex[:8]}", f"dep-{uuid.uuid4().hex[:8]}"
    async with versioned(client, queue, deployment, "b1"):
        assert await deployments.make_current(client, deployment, "b1")
        old_run = await started(client, queue)
        async with versioned(client, queue, deployment, "b2"):
            await polled_by(client, queue, {"b1", "b2"})
            await deployments.ramp(client, deployment, "b2", 100)
            routing = await deployments.routing(client, deployment)
            assert routing is not None
            assert (routing.current, routing.ramping, routing.ramp_percentage) == ("b1", "b2", 100)
            ramped_run = await started(client, queue)
            await ramped_run.signal(Which.release)
            assert await asyncio.wait_for(ramped_run.result(), 30) == "b2"
            with pytest.raises(ValueError, match="percentage"):
                await deployments.ramp(client, deployment, "b2", 150)

            await deployments.ramp(client, deployment, None, 0)
            assert await deployments.make_current(client, deployment, "b2")
            # b1 still has a run pinned to it: draining, until that run ends.
            await until(lambda: drained_as(client, deployment, "b1", "draining"), "draining")
            await old_run.signal(Which.release)
            assert await asyncio.wait_for(old_run.result(), 30) == "b1"
            await until(lambda: drained_as(client, deployment, "b1", "drained"), "drained")
            assert await deployments.drainage(client, deployment, "b2") == "unknown"  # current
