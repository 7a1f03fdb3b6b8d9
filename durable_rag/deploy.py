"""`durable-rag deploy`: new workflow code onto a running stack, under load, with nothing dropped
(README, *Deploying a new version*; ARCHITECTURE, *Versioned workers*).

A deploy of build B over build A, per worker kind (each a Worker Deployment of its own):
1. B's workers start beside A's. They poll and get no task: A is current.
2. The activity kinds (LLM, index) first: B becomes current at once. Their tasks carry no history
   to replay; the workflows still pinned to A call B's activities with A's inputs, which B accepts
   (tests/workflows/test_activity_contracts.py). A pause, then a health check.
3. The orchestrator: a share of new runs goes to B at each ramp step (`--ramp 10,50`), each
   followed by a pause and a health check; then B becomes current.
4. Conversations pinned to A are told to `reload`: they continue as new onto B at once, where an
   idle one would hold A until it closes, 15 minutes after its last turn. Ingests move at their
   next batch; answers and searches finish where they started.
5. Once A has drained (no open run pinned to it), A's workers stop; each lets its running
   activities finish first.

A failed health check (a workflow task failure on B, non-determinism among them, or B's activity
error rate over the limit) sends every kind's new runs back to A and stops B once its own runs
have ended: what `durable-rag deploy --abort` does at any step.

The processes are the `Fleet`'s business (the embedded stack's: durable_rag/stack/fleet.py); the
routing is Temporal's (ragkit/deployments.py). A deploy in progress is a JSON file, so `--abort`
from another terminal finds it, and a deploy that timed out waiting for A to drain goes on where
it stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from prometheus_client.parser import text_string_to_metric_families
from temporalio.client import Client
from temporalio.service import RPCError

from durable_rag.stack.process import pid_alive
from ragkit import deployments, ids
from ragkit.deployments import KINDS
from schemas.conversation import ConversationKey
from workflows.conversation import ConversationWorkflow

# Activity kinds before the orchestrator: by the time a workflow runs on B, B's activities do.
ORDER = ("llm", "index", "orchestrator")
ACTIVITY_KINDS = ("llm", "index")
WORKFLOW_KIND = "orchestrator"

# The counters a health check reads from a build's workers: the SDK's (workflow task failures,
# by failure_reason) and ours (every activity attempt, by outcome; ragkit/metrics.py).
TASK_FAILURES = "temporal_workflow_task_execution_failed"
NONDETERMINISM = "NonDeterminismError"
ACTIVITY_ATTEMPTS = "durable_rag_activity_seconds"


class DeployError(RuntimeError):
    """The deploy stopped: the message says where, and what serves new runs now."""


@dataclass(frozen=True)
class Health:
    """A build's counters, summed over its workers; a step's are the difference of two reads."""

    workflow_task_failures: float = 0.0
    nondeterminism: float = 0.0
    activities: float = 0.0
    activities_failed: float = 0.0
    unreachable: tuple[str, ...] = ()  # metrics endpoints that did not answer

    def since(self, before: Health) -> Health:
        return Health(
            self.workflow_task_failures - before.workflow_task_failures,
            self.nondeterminism - before.nondeterminism,
            self.activities - before.activities,
            self.activities_failed - before.activities_failed,
            self.unreachable,
        )

    @property
    def error_rate(self) -> float:
        return self.activities_failed / self.activities if self.activities else 0.0

    def problems(self, max_error_rate: float) -> list[str]:
        found = [f"metrics unreachable at {url}" for url in self.unreachable]
        if self.workflow_task_failures:
            found.append(
                f"{self.workflow_task_failures:.0f} workflow task failure(s), "
                f"{self.nondeterminism:.0f} of them non-determinism"
            )
        if self.error_rate > max_error_rate:
            found.append(
                f"activity error rate {self.error_rate:.0%} ({self.activities_failed:.0f} of "
                f"{self.activities:.0f}) over {max_error_rate:.0%}"
            )
        return found

    def describe(self) -> str:
        return (
            f"{self.workflow_task_failures:.0f} workflow task failures, "
            f"{self.activities_failed:.0f}/{self.activities:.0f} activities failed"
        )


def read_health(expositions: Iterable[str]) -> Health:
    """The health counters in Prometheus text expositions (a worker serves ours on its metrics
    port and the SDK's on the next)."""
    failures = nondeterminism = attempts = failed = 0.0
    for text in expositions:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name.startswith(TASK_FAILURES):
                    failures += sample.value
                    if sample.labels.get("failure_reason") == NONDETERMINISM:
                        nondeterminism += sample.value
                elif sample.name == f"{ACTIVITY_ATTEMPTS}_count":
                    attempts += sample.value
                    if sample.labels.get("outcome") == "failed":
                        failed += sample.value
    return Health(failures, nondeterminism, attempts, failed)


def scrape(urls: Sequence[str], timeout: float = 3.0) -> Health:
    texts, unreachable = [], []
    for url in urls:
        try:
            with urllib.request.urlopen(url, timeout=timeout) as reply:
                texts.append(reply.read().decode())
        except (urllib.error.URLError, OSError):
            unreachable.append(url)
    health = read_health(texts)
    return Health(**{**asdict(health), "unreachable": tuple(unreachable)})


Echo = Callable[[str], object]


class Fleet(Protocol):
    """The worker processes of a stack, as a deploy starts and stops them: `old` are the
    running build's, `new` the ones this deploy starts from the new code."""

    def queue(self, kind: str) -> str:
        """A task queue the workers of `kind` poll."""
        ...

    def start_new(self, kind: str) -> None:
        """Start the new build's workers of `kind` beside the old; return once they poll."""
        ...

    def health(self, kind: str) -> Health:
        """The new build's workers' counters of `kind`, so far."""
        ...

    def stop(self, kind: str, which: Literal["old", "new"]) -> None:
        """Stop (and drain) one side's workers of `kind`."""
        ...

    def promote_new(self, kind: str) -> None:
        """The new workers of `kind` take the old ones' place (`durable-rag status`, `down`)."""
        ...

    def side_by_side(self, kind: str) -> bool:
        """Whether workers of two builds of `kind` can run at once; False: `replace` them."""
        ...

    def replace(self, kind: str) -> None:
        """Stop the old workers of `kind`, then start the new ones in their place, current."""
        ...


class ExternalFleet:
    """Workers someone else starts and stops (compose services, a Kubernetes Deployment): the
    deploy waits until the new build polls, reads its health from `metrics` (its workers'
    Prometheus endpoints, ours and the SDK's), and says when to stop which side."""

    def __init__(self, queues: dict[str, str], metrics: Sequence[str], echo: Echo = print) -> None:
        self.queues, self.metrics, self.echo = queues, list(metrics), echo

    def queue(self, kind: str) -> str:
        return self.queues[kind]

    def start_new(self, kind: str) -> None:
        self.echo(f"waiting  for the new build's {kind} workers to poll {self.queues[kind]}")

    def health(self, kind: str) -> Health:
        return scrape(self.metrics)

    def stop(self, kind: str, which: Literal["old", "new"]) -> None:
        self.echo(f"STOP NOW the {which} build's {kind} workers (they take no new work)")

    def promote_new(self, kind: str) -> None:
        pass

    def side_by_side(self, kind: str) -> bool:
        return True

    def replace(self, kind: str) -> None:
        raise NotImplementedError("an external fleet runs both builds side by side")


@dataclass
class DeployState:
    """A deploy in progress, in a file: what `--abort` and a rerun read."""

    build: str
    previous: dict[str, str]  # kind -> the build current when the deploy began
    step: str = "starting"  # starting | ramping | current | retiring | aborting
    pid: int = field(default_factory=os.getpid)
    # A pid means that process only on the host (the container) that wrote it.
    host: str = field(default_factory=socket.gethostname)
    writer: str = ""  # the Deploy that wrote it last: a deploy sees another's abort

    def running_elsewhere(self) -> bool:
        """Whether the deploy that wrote this runs in another live process here."""
        here = self.host == socket.gethostname()
        return here and self.pid != os.getpid() and pid_alive(self.pid)

    def save(self, path: Path | None, writer: str = "") -> None:
        self.writer = writer or self.writer
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(asdict(self)))

    @classmethod
    def load(cls, path: Path | None) -> DeployState | None:
        if path is None or not path.exists():
            return None
        return cls(**json.loads(path.read_text()))


@dataclass
class Report:
    build: str
    previous: dict[str, str]
    current_s: float = 0.0  # from the deploy's start until B was current for every kind
    drained_s: float = 0.0  # from "current" until A had drained
    conversations_moved: int = 0  # told to reload onto the new current build
    health: dict[str, str] = field(default_factory=dict)  # step -> what the check read
    replaced_s: dict[str, float] = field(default_factory=dict)  # kind -> its gap, in place


def parse_ramp(text: str) -> list[float]:
    """`10,50` -> [10.0, 50.0]: increasing percentages, each above 0 and below 100."""
    try:
        steps = [float(part) for part in text.split(",") if part.strip()] if text else []
    except ValueError as exc:
        raise ValueError(f"--ramp takes percentages separated by commas, not {text!r}") from exc
    if any(not 0 < step < 100 for step in steps) or steps != sorted(set(steps)):
        raise ValueError(f"--ramp steps must increase, each above 0 and below 100: {text!r}")
    return steps


class Deploy:
    """One deploy (or its abort) on a stack: the client, the fleet and the settings it runs
    with."""

    def __init__(
        self,
        client: Client,
        fleet: Fleet,
        prefix: str,
        state_path: Path | None = None,
        echo: Echo = print,
        drain_timeout: float = 900.0,
        poll: float = 0.5,
        start_timeout: float = 120.0,
    ) -> None:
        self.client, self.fleet, self.prefix = client, fleet, prefix
        self.state_path, self.echo = state_path, echo
        self.drain_timeout, self.poll, self.start_timeout = drain_timeout, poll, start_timeout
        self.token = uuid.uuid4().hex

    def deployment(self, kind: str) -> str:
        return deployments.deployment_name(self.prefix, kind)

    async def run(
        self,
        build: str,
        kinds: Sequence[str] = KINDS,
        ramps: Sequence[float] = (10.0, 50.0),
        pause: float = 30.0,
        max_error_rate: float = 0.05,
    ) -> Report:
        began = time.monotonic()
        state = DeployState.load(self.state_path)
        if state is not None and state.running_elsewhere():
            raise DeployError(
                f"a deploy of {state.build} is in progress (pid {state.pid}): wait for it, or "
                "`durable-rag deploy --abort`"
            )
        if state is not None and state.build != build:
            raise DeployError(
                f"a deploy of {state.build} stopped at step {state.step!r}: finish it from its "
                "own code, or `durable-rag deploy --abort`"
            )
        if state is not None and state.step in ("current", "retiring"):
            self.echo(f"resume   the deploy of {build}: waiting for the old build to drain")
            report = Report(build, state.previous)
            in_place = [kind for kind in state.previous if not self.fleet.side_by_side(kind)]
            await self._retire(state, report, in_place)
            return report
        if state is None:
            state = DeployState(build, await self._previous(build, kinds))
        report = Report(build, state.previous)
        todo = [kind for kind in ORDER if kind in state.previous]
        if not todo:
            self.echo(f"build {build} is already current for {', '.join(kinds)}: nothing to do")
            return report
        state.pid, state.host = os.getpid(), socket.gethostname()
        state.save(self.state_path, self.token)
        moves = ", ".join(f"{kind} {state.previous[kind]}" for kind in todo)
        self.echo(f"deploy   build {build} over {moves}")
        # One at a time (the embedded index has one opener): replaced once the rest is done.
        in_place = [kind for kind in todo if not self.fleet.side_by_side(kind)]
        todo = [kind for kind in todo if kind not in in_place]
        try:
            baseline = {}
            for kind in todo:
                await asyncio.to_thread(self.fleet.start_new, kind)
                await self._until_polled(kind, build)
                baseline[kind] = await asyncio.to_thread(self.fleet.health, kind)
                self.echo(f"started  {kind} worker of {build} beside {state.previous[kind]}")
            activity_kinds = [kind for kind in todo if kind in ACTIVITY_KINDS]
            for kind in activity_kinds:
                await deployments.make_current(self.client, self.deployment(kind), build)
                self.echo(f"current  {kind}: {build}")
            if activity_kinds:
                await self._check(activity_kinds, baseline, pause, max_error_rate, report, "")
            if WORKFLOW_KIND in todo:
                state.step = "ramping"
                state.save(self.state_path, self.token)
                deployment = self.deployment(WORKFLOW_KIND)
                for percentage in ramps:
                    await deployments.ramp(self.client, deployment, build, percentage)
                    self.echo(f"ramp     {WORKFLOW_KIND}: {percentage:g}% of new runs to {build}")
                    await self._check(
                        [WORKFLOW_KIND], baseline, pause, max_error_rate, report, f"{percentage:g}%"
                    )
                await deployments.make_current(self.client, deployment, build)
                self.echo(f"current  {WORKFLOW_KIND}: {build}")
        except _Aborted as exc:
            raise DeployError(str(exc)) from exc
        except Exception as exc:  # not a ^C or a cancel: those leave the state for --abort
            back = ", ".join(sorted(set(state.previous.values())))
            why = (
                f"failed its health check ({exc})"
                if isinstance(exc, _Unhealthy)
                else f"did not start ({type(exc).__name__}: {exc})"
            )
            self.echo(f"FAILED   build {build} {why}: sending new runs back to {back}")
            await self._roll_back(state)
            raise DeployError(
                f"build {build} {why}; new runs went back to {back} and its workers stopped"
            ) from exc
        report.current_s = time.monotonic() - began
        state.step = "current"
        state.save(self.state_path, self.token)
        await self._retire(state, report, in_place)
        return report

    async def abort(self) -> DeployState:
        """New runs back to the build the deploy began from, at any step; the new build's
        workers stop once the runs pinned to them have ended."""
        state = DeployState.load(self.state_path)
        if state is None:
            raise DeployError("no deploy in progress: nothing to abort")
        if state.step == "retiring":
            raise DeployError(
                f"the deploy of {state.build} is stopping the old build's workers: too late to "
                "abort; deploy the old code again instead"
            )
        if state.running_elsewhere():
            self.echo(f"stopping the deploy in progress (pid {state.pid})")
            os.kill(state.pid, signal.SIGTERM)
            deadline = time.monotonic() + 30
            while pid_alive(state.pid) and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
        await self._roll_back(state)
        return state

    # --- the steps ------------------------------------------------------------------------------

    def _stop_if_aborted(self) -> None:
        """`--abort` from elsewhere (another terminal, another container) took over: it rolls
        back; this deploy stops where it is."""
        state = DeployState.load(self.state_path)
        if state is not None and state.step == "aborting" and state.writer != self.token:
            raise _Aborted("the deploy was aborted (`durable-rag deploy --abort`)")

    async def _previous(self, build: str, kinds: Sequence[str]) -> dict[str, str]:
        """Each kind's current build, for the kinds whose current build is not `build`."""
        previous = {}
        for kind in kinds:
            routing = await deployments.routing(self.client, self.deployment(kind))
            if routing is None or routing.current is None:
                raise DeployError(
                    f"no build of {self.deployment(kind)} is current: start the stack "
                    "(`durable-rag up`, versioned workers) before deploying onto it"
                )
            if routing.ramping and routing.ramping != build:
                raise DeployError(
                    f"{self.deployment(kind)} is ramping to {routing.ramping}: finish or abort "
                    "that deploy first"
                )
            if routing.current != build:
                previous[kind] = routing.current
        return previous

    async def _until_polled(self, kind: str, build: str) -> None:
        deadline = time.monotonic() + self.start_timeout
        queue = self.fleet.queue(kind)
        while build not in await deployments.polling_builds(self.client, queue):
            if time.monotonic() > deadline:
                raise DeployError(
                    f"no worker polls {queue} as build {build} after {self.start_timeout:g} s: "
                    "is the new worker started, from the new code?"
                )
            await asyncio.sleep(self.poll)

    async def _check(
        self,
        kinds: list[str],
        baseline: dict[str, Health],
        pause: float,
        max_error_rate: float,
        report: Report,
        step: str,
    ) -> None:
        await asyncio.sleep(pause)
        self._stop_if_aborted()
        for kind in kinds:
            health = (await asyncio.to_thread(self.fleet.health, kind)).since(baseline[kind])
            name = f"{kind} {step}".strip()
            report.health[name] = health.describe()
            problems = health.problems(max_error_rate)
            if problems:
                raise _Unhealthy(f"{name}: {'; '.join(problems)}")
            self.echo(f"healthy  {name}: {health.describe()} in {pause:g} s")

    async def _retire(
        self, state: DeployState, report: Report, in_place: Sequence[str] = ()
    ) -> None:
        """Wait until the old build has drained, then stop its workers for good; then replace
        the workers of `in_place` (activities only: their tasks wait in the queue meanwhile)."""
        began = time.monotonic()
        if WORKFLOW_KIND in state.previous:
            try:
                report.conversations_moved = await self._drain(
                    self.deployment(WORKFLOW_KIND), state.previous[WORKFLOW_KIND]
                )
            except _Aborted as exc:
                raise DeployError(str(exc)) from exc
        report.drained_s = time.monotonic() - began
        # From here the old build's workers go: nothing can send runs back to it.
        state.step = "retiring"
        state.save(self.state_path, self.token)
        for kind in [k for k in ORDER if k in state.previous and k not in in_place]:
            await asyncio.to_thread(self.fleet.stop, kind, "old")
            await asyncio.to_thread(self.fleet.promote_new, kind)
            self.echo(f"stopped  {kind} worker of {state.previous[kind]}")
        for kind in in_place:
            began_kind = time.monotonic()
            await asyncio.to_thread(self.fleet.replace, kind)
            await self._until_polled(kind, state.build)
            await deployments.make_current(self.client, self.deployment(kind), state.build)
            report.replaced_s[kind] = time.monotonic() - began_kind
            self.echo(
                f"replaced {kind} worker of {state.previous[kind]} by {state.build} in "
                f"{report.replaced_s[kind]:.1f} s (one at a time: its tasks waited meanwhile)"
            )
        if self.state_path is not None:
            self.state_path.unlink(missing_ok=True)
        self.echo(
            f"deployed {state.build}: current for {', '.join(state.previous)}; the old build "
            f"drained in {report.drained_s:.1f} s"
        )

    async def _roll_back(self, state: DeployState) -> None:
        state.step = "aborting"
        state.save(self.state_path, self.token)
        for kind in [k for k in ORDER if k in state.previous]:
            deployment, old = self.deployment(kind), state.previous[kind]
            routing = await deployments.routing(self.client, deployment)
            if routing is not None and routing.ramping:
                await deployments.ramp(self.client, deployment, None, 0)
            if routing is not None and routing.current != old:
                await deployments.make_current(self.client, deployment, old)
            self.echo(f"current  {kind}: {old} (back)")
        if WORKFLOW_KIND in state.previous:
            await self._drain(self.deployment(WORKFLOW_KIND), state.build, rolling_back=True)
        for kind in [k for k in ORDER if k in state.previous]:
            await asyncio.to_thread(self.fleet.stop, kind, "new")
            self.echo(f"stopped  {kind} worker of {state.build}")
        if self.state_path is not None:
            self.state_path.unlink(missing_ok=True)

    async def _drain(self, deployment: str, build: str, rolling_back: bool = False) -> int:
        """Until no open run is pinned to `build`: conversations pinned to it are told to reload
        (continue as new onto the current build), again while any is open. Returns how many were
        told. Drained: the server says so, or visibility shows no open run pinned to the build
        twice, `settle` apart (a build that never took a run may never read `drained`)."""
        began = time.monotonic()
        told: set[str] = set()
        empty_since: float | None = None
        settle = 3.0
        last_said = 0.0
        while True:
            if not rolling_back:
                self._stop_if_aborted()
            told |= await self._reload_conversations(deployment, build, told)
            if await deployments.drainage(self.client, deployment, build) == "drained":
                return len(told)
            open_runs = await self._open_pinned(deployment, build)
            now = time.monotonic()
            if open_runs:
                empty_since = None
            elif empty_since is None:
                empty_since = now
            elif now - empty_since >= settle:
                return len(told)
            if now - last_said > 10 and open_runs:
                self.echo(f"draining {build}: {open_runs} open run(s) pinned to it")
                last_said = now
            if now - began > self.drain_timeout:
                raise DeployError(
                    f"{build} still has {open_runs} open run(s) after {self.drain_timeout:g} s "
                    f"({deployment}): its workers keep running. Run `durable-rag deploy` again "
                    "to wait on, or list them: TemporalWorkerDeploymentVersion = "
                    f"'{deployment}:{build}' AND ExecutionStatus = 'Running'"
                )
            await asyncio.sleep(self.poll)

    def _pinned_query(self, deployment: str, build: str) -> str:
        return (
            f"TemporalWorkerDeploymentVersion = '{deployment}:{build}' "
            "AND ExecutionStatus = 'Running'"
        )

    async def _open_pinned(self, deployment: str, build: str) -> int:
        return (await self.client.count_workflows(self._pinned_query(deployment, build))).count

    async def _reload_conversations(self, deployment: str, build: str, told: set[str]) -> set[str]:
        """Signal `reload` to each open conversation run pinned to `build` not told yet."""
        query = f"{self._pinned_query(deployment, build)} AND WorkflowType = 'ConversationWorkflow'"
        now_told: set[str] = set()
        async for execution in self.client.list_workflows(query):
            run = f"{execution.id}/{execution.run_id}"
            pair = ids.conversation_of(execution.id)
            if run in told or pair is None:
                continue
            handle = self.client.get_workflow_handle(execution.id, run_id=execution.run_id)
            # Closed meanwhile: nothing to move.
            with contextlib.suppress(RPCError):
                key = ConversationKey(tenant=pair[0], conversation_id=pair[1])
                await handle.signal(ConversationWorkflow.reload, key)
                now_told.add(run)
        return now_told


class _Unhealthy(Exception):
    pass


class _Aborted(Exception):
    pass
