"""Scale-out, proven: two orchestrator workers, two LLM workers and two gateways against one
Temporal server, under the fault matrix's mixed load, with one of each SIGKILLed mid-load.

    .venv/bin/python bench/faults.py --faults scale_out [--window SECONDS]

This is how the project grows past one machine: more workers polling the same task queues, more
gateways behind a load balancer. The run, on one tenant of its own (bench/faults.py):

1. one of each (the stack's orchestrator and LLM worker, one gateway): the mixed load for a
   phase; its throughput is requests completed per second;
2. a second orchestrator, LLM worker (same model, same `llm-<model>` queue) and gateway start,
   the load holding its next requests until they poll (a second CPU engine beside a busy one
   took 8 to over 10 minutes to load on 2 CPUs); then the same load, now spread over both
   gateways, for a phase of the same length. Each process's
   own metrics say how much of the work it did;
3. the first orchestrator, LLM worker and gateway are SIGKILLed mid-load; the survivors carry it
   for the window. Clients retry a request that lost its gateway on the other one, with the same
   id, so it attaches to the run it started.

Then the fault matrix's checks: nothing failed, lost, duplicated or left running. The index worker
stays one: the embedded index has one opener (Qdrant Edge); with the Qdrant server, index workers
scale as the others do.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from temporalio.client import Client

from bench.load import (
    QUESTIONS,
    REQUEST_DEADLINE,
    Answered,
    MixedLoad,
    Outcome,
    answer_workflow_for,
    answered,
)
from bench.stack import ProcessStack
from ragkit.db import make_sessionmaker
from ragkit.settings import Settings
from ragkit.store import keys
from schemas.answer import Answer

# Of every request a gateway served, these are not the load's.
NOT_LOAD = ("/healthz", "/readyz", "/metrics")
# What a gateway answers while it cannot take a request now: ask another, or again.
TRY_AGAIN = {429, 502, 503}


class GatewayLoad(MixedLoad):
    """The mixed load with answers and conversation turns sent to gateways over HTTP, round
    robin, as clients behind a load balancer. A request that loses its gateway (connection
    refused or reset) goes to the next one with the same X-Request-ID / message id. Ingests go
    through the Temporal client, as a backend service sends them."""

    def __init__(
        self,
        client: Client,
        settings: Settings,
        tenant: str,
        corpus: Path,
        api_key: str,
        gateways: list[str],
        answer_loops: int = 4,
    ) -> None:
        super().__init__(client, settings, tenant, corpus, answer_loops=answer_loops)
        self.gateways = gateways  # replaced while the load runs, as a load balancer's pool is
        self.api_key = api_key
        self.http = httpx.AsyncClient(timeout=httpx.Timeout(REQUEST_DEADLINE, connect=2.0))
        self._next = itertools.count()
        self.failovers = 0  # requests sent again to another gateway after losing theirs

    async def close(self) -> None:
        await self.http.aclose()

    async def _post(self, path: str, body: dict[str, Any], request_id: str) -> dict[str, Any]:
        deadline = time.monotonic() + REQUEST_DEADLINE
        while True:
            base = self.gateways[next(self._next) % len(self.gateways)]
            try:
                reply = await self.http.post(
                    base + path,
                    json=body,
                    headers={"Authorization": f"Bearer {self.api_key}", "X-Request-ID": request_id},
                )
            except httpx.TransportError:
                self.failovers += 1
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
                continue
            if reply.status_code in TRY_AGAIN and time.monotonic() < deadline:
                await asyncio.sleep(float(reply.headers.get("Retry-After", "1")))
                continue
            if reply.status_code != 200:
                raise RuntimeError(f"{path}: HTTP {reply.status_code}: {reply.text[:200]}")
            result: dict[str, Any] = reply.json()
            return result

    async def answer(self, n: int) -> Outcome:
        question = self._question(n)
        trace_id = f"load-{uuid.uuid4().hex}"

        async def call() -> Answered:
            self.in_flight[trace_id] = time.monotonic()
            try:
                body = {"question": question, "top_k": 3, "max_answer_tokens": self.max_tokens}
                reply = await self._post("/v1/ask", body, trace_id)
            finally:
                self.in_flight.pop(trace_id, None)
            return answered(Answer.model_validate(reply))

        return await self._timed("answer", call, answer_workflow_for(self.tenant, trace_id))

    async def turn(self, n: int) -> Outcome:
        message_id = f"m-{uuid.uuid4().hex}"

        async def call() -> Answered:
            body = {
                "message": self._question(n),
                "message_id": message_id,
                "top_k": 3,
                "max_answer_tokens": self.max_tokens,
            }
            reply = await self._post("/v1/conversations/load/messages", body, message_id)
            self.ledger.turns.add(message_id)
            return answered(Answer.model_validate(reply["answer"]))

        outcome = await self._timed("turn", call)
        outcome.workflow_id = f"conversation of {self.tenant}"
        return outcome

    @staticmethod
    def _question(n: int) -> str:
        return QUESTIONS[n % len(QUESTIONS)]


def scrape(port: int) -> dict[str, float]:
    """A Prometheus endpoint's samples, by name with labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def work_done(samples: dict[str, float], prefix: str, keep: Callable[[str], bool]) -> float:
    return sum(v for name, v in samples.items() if name.startswith(prefix) and keep(name))


def worker_work(port: int) -> float:
    """Activity attempts this worker ran (local ones included: an orchestrator runs retrieval)."""
    return work_done(scrape(port), "durable_rag_activity_seconds_count", lambda _: True)


def gateway_work(port: int) -> float:
    """Requests this gateway served, health checks and scrapes left out."""
    return work_done(
        scrape(port),
        "durable_rag_http_requests_total",
        lambda name: not any(f'route="{p}"' in name for p in NOT_LOAD),
    )


@dataclass
class ScaleOut:
    phase_s: float
    one: dict[str, float] = field(default_factory=dict)  # requests/s by kind, "all" too
    two: dict[str, float] = field(default_factory=dict)
    # Work each process did in phase 2: "orchestrator 1" -> activity attempts...
    spread: dict[str, float] = field(default_factory=dict)
    failovers: int = 0

    @property
    def ratio(self) -> float:
        return self.two["all"] / self.one["all"] if self.one.get("all") else float("nan")

    def lines(self) -> list[str]:
        def rates(r: dict[str, float]) -> str:
            return ", ".join(f"{k} {v:.2f}" for k, v in r.items())

        spread = ", ".join(f"{k} {v:.0f}" for k, v in self.spread.items())
        return [
            f"throughput, requests/s over {self.phase_s:.0f} s: one of each: {rates(self.one)}; "
            f"two of each: {rates(self.two)}; ratio x{self.ratio:.2f}",
            f"work per process in the two-of-each phase (activity attempts; gateway requests): "
            f"{spread}",
            f"{self.failovers} request(s) sent again to the other gateway after losing theirs",
        ]


def completed_per_second(outcomes: list[Outcome], start: float, end: float) -> dict[str, float]:
    """Requests completed (not failed) between `start` and `end`, per second, by kind."""
    done = [o for o in outcomes if o.status != "failed" and start <= o.started + o.seconds < end]
    span = end - start
    rates = {"all": len(done) / span}
    for kind in ("answer", "turn", "ingest"):
        rates[kind] = sum(1 for o in done if o.kind == kind) / span
    return rates


# The kinds of worker that scale by adding processes here: the embedded index has one opener.
SCALED = ("orchestrator", "llm")


def snapshot(stack: ProcessStack) -> dict[str, float]:
    work = {
        f"{kind} {n}": worker_work(port)
        for (kind, n), port in stack.metrics_ports.items()
        if kind in SCALED and stack.worker(kind, n).running()
    }
    for n, port in stack.gateway_ports.items():
        if stack.gateway(n).running():
            work[f"gateway {n}"] = gateway_work(port)
    return work


async def scale_out(
    stack: ProcessStack, load: GatewayLoad, phase: float, kinds: tuple[str, ...] = SCALED
) -> ScaleOut:
    """Phases 1 and 2 (the module's docstring), on a load already running through gateway 1:
    a second worker of each of `kinds` and a second gateway join between them."""
    result = ScaleOut(phase_s=phase)
    await asyncio.sleep(5)  # past the load's start
    start = time.monotonic()
    await asyncio.sleep(phase)
    result.one = completed_per_second(load.ledger.outcomes, start, time.monotonic())

    # The load holds while the second of each loads: a second vLLM engine beside one that is
    # serving did not load in 10 minutes on 2 CPUs (both engines' threads on the one engine
    # CPU), and how long a process takes to load is not what the phases measure.
    load.flowing.clear()
    try:
        for kind in kinds:
            await asyncio.to_thread(stack.start_worker, kind, 2)
        load.gateways = [*load.gateways, await asyncio.to_thread(stack.start_gateway, 2)]
    finally:
        load.flowing.set()
    await asyncio.sleep(5)  # requests started before the second of each settle
    before = await asyncio.to_thread(snapshot, stack)
    start = time.monotonic()
    await asyncio.sleep(phase)
    end = time.monotonic()
    after = await asyncio.to_thread(snapshot, stack)
    result.two = completed_per_second(load.ledger.outcomes, start, end)
    result.spread = {k: after[k] - before.get(k, 0.0) for k in after}
    return result


def kill_one_of_each(stack: ProcessStack, kinds: tuple[str, ...] = SCALED) -> None:
    for kind in kinds:
        stack.kill_worker(kind, 1)
    stack.gateway(1).kill()


def restore_one_of_each(stack: ProcessStack, kinds: tuple[str, ...] = SCALED) -> None:
    """Back to the stack other faults expect: instance 1 of each worker, no extra ones."""
    for kind in kinds:
        stack.start_worker(kind)
    for kind in kinds:
        stack.worker(kind, 2).stop(timeout=15)
        stack.metrics_ports.pop((kind, 2), None)
    for n in list(stack.gateway_ports):
        stack.gateway(n).stop(timeout=15)
        del stack.gateway_ports[n]


def api_key(stack: ProcessStack, tenant: str) -> str:
    sessions = make_sessionmaker(stack.settings.postgres.sqlalchemy_url)
    try:
        return keys.create_key(sessions, tenant, "scale-out load")[1]
    finally:
        sessions.kw["bind"].dispose()
