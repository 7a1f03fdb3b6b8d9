"""durable_rag/deploy.py on the real dev server, with a fleet of in-process versioned workers
(the stack's processes are bench/faults.py's `deploy` row): a deploy ramps, makes the new build
current, and stops the old workers only once the run pinned to them has ended; a failed health
check and `--abort` send new runs back to the old build, and its workers stop once their own
runs have ended."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any, Literal

import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from durable_rag.deploy import Deploy, DeployError, DeployState, Health
from ragkit import deployments
from tests.ragkit.test_deployments import Which, on_build, started, until, versioned

pytestmark = pytest.mark.integration


class Fleet:
    """One orchestrator worker per build, in this process: what EmbeddedFleet does with
    processes. `health` is what the new build's metrics read."""

    def __init__(self, client: Client, queue: str, prefix: str, new: str) -> None:
        self.client, self.queue_name, self.new = client, queue, new
        self.deployment = deployments.deployment_name(prefix, "orchestrator")
        self.loop = asyncio.get_running_loop()
        self.workers: dict[str, Worker] = {}
        self.running: dict[str, asyncio.Task[None]] = {}
        self.stopped: list[str] = []
        self.reads = [Health()]

    async def start(self, side: str, build: str) -> None:
        worker = versioned(self.client, self.queue_name, self.deployment, build)
        self.workers[side] = worker
        self.running[side] = asyncio.create_task(worker.run())

    def _on_loop(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    # --- the Fleet protocol (called from a thread) ----------------------------------------------

    def queue(self, kind: str) -> str:
        return self.queue_name

    def start_new(self, kind: str) -> None:
        self._on_loop(self.start("new", self.new))

    def health(self, kind: str) -> Health:
        return self.reads.pop(0) if len(self.reads) > 1 else self.reads[0]

    def stop(self, kind: str, which: Literal["old", "new"]) -> None:
        if which in self.workers:  # a side that never started has nothing to stop
            self._on_loop(self.workers[which].shutdown())
        self.stopped.append(which)

    def promote_new(self, kind: str) -> None:
        self.workers["old"] = self.workers.pop("new")

    def side_by_side(self, kind: str) -> bool:
        return True

    def replace(self, kind: str) -> None:
        raise AssertionError("the orchestrator runs side by side")


@pytest.fixture
async def deployed(client: Client, tmp_path: Path) -> AsyncIterator[tuple[Fleet, Deploy]]:
    """Build b1's worker serving and current; a deploy of b2 over it. Its workers stop with the
    test, however it ends."""
    prefix = f"dep-{uuid.uuid4().hex[:8]}"
    fleet = Fleet(client, f"dq-{uuid.uuid4().hex[:8]}", prefix, "b2")
    await fleet.start("old", "b1")
    try:
        assert await deployments.make_current(client, fleet.deployment, "b1")
        yield (
            fleet,
            Deploy(client, fleet, prefix, tmp_path / "deploy.json", echo=lambda _: None, poll=0.5),
        )
    finally:
        for task in fleet.running.values():
            task.cancel()


async def current(client: Client, fleet: Fleet) -> tuple[str | None, str | None]:
    routing = await deployments.routing(client, fleet.deployment)
    assert routing is not None
    return routing.current, routing.ramping


async def test_a_deploy_ramps_makes_current_and_stops_the_old_build_once_drained(
    client: Client, tmp_path: Path, deployed: tuple[Fleet, Deploy]
) -> None:
    fleet, deploy = deployed
    old_run = await started(client, fleet.queue_name)
    await until(lambda: on_build(old_run, "b1"), "pinned to b1")
    running = asyncio.create_task(deploy.run("b2", ["orchestrator"], [50], pause=0.3))

    async def is_current() -> bool:
        return await current(client, fleet) == ("b2", None)

    await until(is_current, "b2 current", every=0.5)
    state = DeployState.load(tmp_path / "deploy.json")
    assert state is not None and (state.step, state.previous) == ("current", {"orchestrator": "b1"})
    new_run = await started(client, fleet.queue_name)
    await new_run.signal(Which.release)
    assert await asyncio.wait_for(new_run.result(), 30) == "b2"
    # A run is pinned to b1: its workers wait for it.
    await asyncio.sleep(1)
    assert not running.done() and fleet.stopped == []
    await old_run.signal(Which.release)
    assert await asyncio.wait_for(old_run.result(), 30) == "b1"
    report = await asyncio.wait_for(running, 60)
    assert fleet.stopped == ["old"]
    assert report.previous == {"orchestrator": "b1"} and "orchestrator 50%" in report.health
    assert not (tmp_path / "deploy.json").exists()
    # Deploying the current build again does nothing.
    again = await deploy.run("b2", ["orchestrator"], [50], pause=0)
    assert again.previous == {} and fleet.stopped == ["old"]


async def test_a_failed_health_check_sends_new_runs_back_to_the_old_build(
    client: Client, tmp_path: Path, deployed: tuple[Fleet, Deploy]
) -> None:
    fleet, deploy = deployed
    # At the ramp's health check the new build's metrics count a non-determinism error.
    fleet.reads = [Health(), Health(workflow_task_failures=1, nondeterminism=1)]
    with pytest.raises(DeployError, match=r"1 workflow task failure.*1 of them non-determinism"):
        await deploy.run("b2", ["orchestrator"], [10, 50], pause=0.2)
    assert await current(client, fleet) == ("b1", None)
    assert fleet.stopped == ["new"]
    assert not (tmp_path / "deploy.json").exists()
    later = await started(client, fleet.queue_name)
    await later.signal(Which.release)
    assert await asyncio.wait_for(later.result(), 30) == "b1"


async def test_abort_after_current_routes_back_and_waits_for_the_new_builds_runs(
    client: Client, tmp_path: Path, deployed: tuple[Fleet, Deploy]
) -> None:
    fleet, deploy = deployed
    held = await started(client, fleet.queue_name)  # holds b1: the deploy waits for it
    await until(lambda: on_build(held, "b1"), "pinned to b1")
    running = asyncio.create_task(deploy.run("b2", ["orchestrator"], [], pause=0))

    async def is_current() -> bool:
        return await current(client, fleet) == ("b2", None)

    await until(is_current, "b2 current", every=0.5)
    on_new = await started(client, fleet.queue_name)
    await until(lambda: on_build(on_new, "b2"), "pinned to b2")
    # `--abort` from another terminal: the running deploy sees it and stops where it is.
    other = Deploy(client, fleet, deploy.prefix, tmp_path / "deploy.json", echo=lambda _: None)
    other.poll = 0.5
    aborting = asyncio.create_task(other.abort())
    with pytest.raises(DeployError, match="aborted"):
        await asyncio.wait_for(running, 30)

    async def back() -> bool:
        return await current(client, fleet) == ("b1", None)

    await until(back, "b1 current again", every=0.5)
    await asyncio.sleep(1)
    assert not aborting.done() and fleet.stopped == []  # a run is pinned to b2
    await on_new.signal(Which.release)
    assert await asyncio.wait_for(on_new.result(), 30) == "b2"
    await asyncio.wait_for(aborting, 60)
    assert fleet.stopped == ["new"]
    await held.signal(Which.release)
    assert await asyncio.wait_for(held.result(), 30) == "b1"
    with pytest.raises(DeployError, match="no deploy in progress"):
        await other.abort()
    later = await started(client, fleet.queue_name)
    await later.signal(Which.release)
    assert await asyncio.wait_for(later.result(), 30) == "b1"


async def test_a_new_build_that_does_not_start_leaves_the_old_one_serving(
    client: Client, tmp_path: Path, deployed: tuple[Fleet, Deploy]
) -> None:
    """The embedded index's second opener was refused: the deploy stops at once, and nothing
    waits on a build that never polled."""
    fleet, deploy = deployed

    def refused(kind: str) -> None:
        raise RuntimeError("index worker 2 exited while starting")

    fleet.start_new = refused  # type: ignore[method-assign]
    with pytest.raises(DeployError, match=r"did not start.*exited while starting"):
        await asyncio.wait_for(deploy.run("b2", ["orchestrator"], [50], pause=0), 60)
    assert await current(client, fleet) == ("b1", None)
    assert fleet.stopped == ["new"]
    assert not (tmp_path / "deploy.json").exists()


async def test_a_deploy_that_timed_out_draining_goes_on_where_it_stopped(
    client: Client, tmp_path: Path, deployed: tuple[Fleet, Deploy]
) -> None:
    fleet, deploy = deployed
    held = await started(client, fleet.queue_name)
    await until(lambda: on_build(held, "b1"), "pinned to b1")
    deploy.drain_timeout = 2
    with pytest.raises(DeployError, match="still has 1 open run"):
        await deploy.run("b2", ["orchestrator"], [], pause=0)
    assert fleet.stopped == []  # b1's workers keep running for the run pinned to them
    state = DeployState.load(tmp_path / "deploy.json")
    assert state is not None and state.step == "current"
    await held.signal(Which.release)
    assert await asyncio.wait_for(held.result(), 30) == "b1"
    deploy.drain_timeout = 60
    report = await deploy.run("b2", ["orchestrator"], [], pause=0)
    assert report.previous == {"orchestrator": "b1"} and fleet.stopped == ["old"]
    assert not (tmp_path / "deploy.json").exists()
