"""Serving: what a live question pays on its way through durable-rag, four figures from one run.

    .venv/bin/python bench/serving.py [--requests N] [--max-tokens T] [--concurrency C]
                                      [--rounds R] [--documents D] [--rows 1,2,3,4]
                                      [--generation-slots S] [--loop-debug MS] [--json PATH]

About 10-12 minutes on 2 CPUs with the defaults; `--requests 30` for a quicker, noisier run.

1. Answer overhead: `RagClient.ask` (AnswerWorkflow) against the same calls in a plain async
   function (rules rewrite, vector search || keyword search, fuse, hydrate, assemble, generate,
   citations, store_answer, record_cost) on the same engine and database; P50 and P99 of the
   paired differences. Target: P50 <= 15 ms, P99 (the floor) <= 40 ms. Beside it, the shape's
   floor: FloorWorkflow (bench/floor.py), the answer's Temporal commands with no-op steps; and
   MinimalWorkflow, the fewest commands any answer can issue (one local activity, generate).
2. Time to first token through the gateway's SSE (`POST /v1/ask/stream`, uvicorn on a free port)
   against a plain pipeline that retrieves and streams from the same engine. Target: overhead
   <= 40 ms at P50.
3. Search P50 during an ingest of D (1,500) generated small documents, over idle. Target: <= 2.0.
4. C (50) concurrent streamed answers through the gateway against C concurrent streams of the
   same prompts on the engine alone: every one completes with tokens, aggregate tokens/s >= 0.9x
   the engine's, TTFT P50/P99 of both.
5. (`--rows 5`, not by default: ~10 minutes) A burst past capacity: `--burst` (300) streamed,
   then as many plain asks at once through the OpenAI endpoint of the embedded stack as
   processes, with the latency bound lifted, at the defaults, and over two gateways
   (bench/burst.py, which runs it alone too). Targets: every admitted request done within the
   access timeout and its first token within the latency target, every 429 within 100 ms, no
   5xx, at least a batch admitted.

Rows 1, 2 and 4 run in this process over real services (bench/services.py: Temporal dev server,
Postgres) with the orchestrator's bulk and live workers, the index worker and an LLM worker in
process, and the gateway on uvicorn sharing their RagClient: the starter hosts the live worker, so
live workflows start eagerly, as they do wherever a live worker and its starter share a client.
(The embedded stack's gateway is a process of its own, so its starts are not eager: rows 1 and 2
are the floor of what it pays.) Row 3 runs on the embedded stack as real processes (bench/stack.py), as a user runs it, so bulk
ingest and live search contend as they would; its LLM worker is not started, since search never
reaches it and loading vLLM would only take a minute and a GiB from the figure.

Sides alternate request by request (rows 1 and 2), rounds go engine, gateway, gateway, engine
(row 4), and the idle searches are split before and after the ingest (row 3), so drift on a noisy
machine hits both sides. A breakdown per hop, from the workflows' histories
(`fetch_history` event times) and their own `timings_ms`, says where the time goes: the start
(client call until the first workflow task starts), the local steps, the workflow tasks, the
dispatch of `generate` to the LLM worker, and from the engine's first token to the SSE frame. It
also counts the remote activity dispatches before `generate` per answer (the goal is 0: one hop
to the engine); local activities are MarkerRecorded events. A workflow task that timed out is
counted by which task it was and how (never picked up from the sticky or normal queue, or held
past the task timeout): each one costs its answer the live task timeout. Two probes in this
process add detail without changing what runs: the token publisher is wrapped to time each
stream's first NOTIFY, and the recorded answer histories are replayed with and without the SDK's
sandbox (the workflow code's own CPU per answer).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shutil
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import httpx  # noqa: E402
from temporalio.client import WorkflowHistory  # noqa: E402

from activities.answer_cache import AnswerCacheActivities  # noqa: E402
from activities.costs import CostActivities  # noqa: E402
from activities.documents import DocumentActivities  # noqa: E402
from activities.retrieval import RetrievalActivities  # noqa: E402
from bench import burst  # noqa: E402
from bench.floor import EmptyWorkflow, FloorWorkflow, MinimalWorkflow, floor_workers  # noqa: E402
from bench.hops import dispatch_counts, histories, hop_rows, kinds_note, replay_cost  # noqa: E402
from bench.load import QUESTIONS, SEED_DOCUMENTS, WARMUP, answer_workflow_for, pct  # noqa: E402  # noqa: E402
from bench.plain import Plain  # noqa: E402
from bench.probes import ActivationClock, LoopLag, PublishClock, TimedEngine  # noqa: E402
from bench.search_ingest import search_during_ingest  # noqa: E402
from bench.services import bench_services, local_workers, running  # noqa: E402
from bench.sse import Streamed, gateway, stream_answer  # noqa: E402
from durable_rag.client import RagClient  # noqa: E402
from ragkit.cpus import bind_engine, isolate_engine  # noqa: E402
from ragkit.db import make_sessionmaker  # noqa: E402
from ragkit.embedding import load_embedder  # noqa: E402
from ragkit.index import open_index  # noqa: E402
from ragkit.index.factory import bm25_encoder  # noqa: E402
from ragkit.index.generations import Generations  # noqa: E402
from ragkit.index.reads import ActiveReader  # noqa: E402
from ragkit.llm.engine import EngineConfig, Messages, VllmEngine  # noqa: E402
from ragkit.llm.models import resolve_generator  # noqa: E402
from ragkit.settings import PACKAGED_MINILM, Settings  # noqa: E402
from ragkit.store import keys  # noqa: E402
from ragkit.temporal import connect  # noqa: E402
from schemas.answer import (  # noqa: E402
    AskRequest,
)
from workers import llm as llm_worker  # noqa: E402
from workers.common import worker_interceptors  # noqa: E402

T = TypeVar("T")


def admission_settings(concurrency: int) -> dict[str, Any]:
    """Row 4 measures throughput, not refusals: the gateway's latency bound
    (ragkit/admission.py) is lifted, so none of its `concurrency` streams gets a 429."""
    return {"llm_p99_target_seconds": 3_600}


# How to read the figures: in BENCHMARKS.md under the table, and in the JSON.
NOTE = (
    "How to read: each row compares two sides measured in the same run, alternated request by "
    "request (row 4: rounds engine, gateway, gateway, engine). Row 1 is what orchestration costs "
    "per answer (RagClient.ask -> AnswerWorkflow -> result) beside the same calls made directly; "
    "its P99 pairs two noisy latencies, so read it with the per-hop P99s. Its `shape floor` "
    "(bench/floor.py) is FloorWorkflow, timed after each pair: the same Temporal commands (a "
    "local activity, another, a remote activity on another queue, two local ones at once) with "
    "steps that do nothing, on workers built as the live ones are. No change to our own steps "
    "can take an answer below it; the overhead above it is ours. Beside it, the fewest commands "
    "any answer can issue (MinimalWorkflow: retrieval in one local activity, then generate on "
    "another queue: what merging or dropping our steps could reach at best), an empty workflow "
    "(one workflow task, then its result: the floor of any workflow) and, in the summary line, "
    "the Temporal server's own CPU per call (`*_server_cpu_ms`, means over the calls, from "
    "/proc, less the background it burns while the plain calls run, `background_per_s`, times "
    "each call's duration; `*_raw` without that): on a 2-CPU machine the dev server's CPU is most "
    "of a workflow's cost. Row 2 is what the "
    "gateway, the workflow and the token stream add before a client sees the first token. Row 3 "
    "is search on the stack as processes while an ingest runs: the contention bulk work causes. "
    "Row 4 is 50 streamed answers at once against the engine alone on the same prompts; the gap "
    "is what comes before generation (50 retrievals on the same CPUs) and generate's dispatch, "
    "which the gateway's start window (llm_start_window, the batch) orders a batch at a time. "
    "Rows 1, 2 and 4 run as `durable-rag up` runs beside vllm-cpu: the engine's threads on CPUs "
    "of their own, everything else on the rest (ragkit/cpus.py; `cpus` in the JSON). "
    "In the hop table, `start` and `workflow task N dispatch` are Temporal round trips, "
    "`workflow task N run` includes that task's local activities (the `step` rows; `plain "
    "function:` rows are the same calls made directly), the `worker:` rows split workflow task "
    "1's time around its steps by when the SDK's core handed this process each activation and "
    "took back each completion (ActivationClock), `generate dispatch` is the one hop to the "
    "LLM worker, the `of which` rows split the first token's way from the engine to the client, "
    "and `replayed sandboxed/unsandboxed` is the workflow code's own CPU per answer with and "
    "without the sandbox the workers run."
)


# --- rows 1, 2, 4: in process ---------------------------------------------------------------------


@dataclass
class Setup:
    rag: RagClient
    plain: Plain
    engine: TimedEngine
    http: httpx.AsyncClient
    key: str
    max_tokens: int
    published: PublishClock
    activations: ActivationClock
    floor_queues: tuple[str, str]  # FloorWorkflow's queue, its 'LLM' queue
    server_cpu: ServerCpu


def request_for(n: int, max_tokens: int) -> AskRequest:
    return AskRequest(question=QUESTIONS[n % len(QUESTIONS)], max_answer_tokens=max_tokens)


async def timed_plain(s: Setup, request: AskRequest) -> float:
    began = time.perf_counter()
    await s.plain.answer(request)
    return (time.perf_counter() - began) * 1000


@dataclass
class Asked:
    ms: float
    workflow_id: str
    called_at: float  # wall clock
    returned_at: float
    eager: bool
    timings_ms: dict[str, float]


async def timed_flow(s: Setup, request: AskRequest) -> Asked:
    called_at, began = time.time(), time.perf_counter()
    handle = await s.rag.start_ask(request)
    answer = await handle.result()
    took = (time.perf_counter() - began) * 1000
    eager = bool(getattr(handle, "__temporal_eagerly_started", False))
    return Asked(took, handle.id, called_at, time.time(), eager, answer.timings_ms)


async def timed_floor(s: Setup, shape: str = "floor") -> float:
    """One FloorWorkflow (bench/floor.py), MinimalWorkflow (`minimal`) or EmptyWorkflow
    (`empty`), started as an answer is: eagerly, with the live task timeout."""
    began = time.perf_counter()
    options: dict[str, Any] = {
        "id": f"floor-{uuid.uuid4().hex}",
        "task_queue": s.floor_queues[0],
        "request_eager_start": True,
        "task_timeout": timedelta(seconds=s.rag.settings.temporal.live_task_timeout_seconds),
    }
    if shape == "empty":
        await s.rag.client.execute_workflow(EmptyWorkflow.run, **options)
    elif shape == "minimal":
        await s.rag.client.execute_workflow(MinimalWorkflow.run, s.floor_queues[1], **options)
    else:
        await s.rag.client.execute_workflow(FloorWorkflow.run, s.floor_queues[1], **options)
    return (time.perf_counter() - began) * 1000


class ServerCpu:
    """CPU seconds the Temporal dev server process has used (user + system), from /proc: what
    one call costs the server, summed over calls and divided (ticks are 10 ms, so one call's
    reading means nothing; a hundred's mean does)."""

    def __init__(self, pid_file: Path) -> None:
        self.stat = Path("/proc") / pid_file.read_text().strip() / "stat"
        self.tick = os.sysconf("SC_CLK_TCK")

    def seconds(self) -> float:
        fields = self.stat.read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / self.tick


async def server_cpu_ms(s: Setup, call: Awaitable[T]) -> tuple[T, tuple[float, float]]:
    """(result, (the server's CPU ms during the call, the call's wall ms))."""
    before, began = s.server_cpu.seconds(), time.perf_counter()
    result = await call
    return result, ((s.server_cpu.seconds() - before) * 1000, (time.perf_counter() - began) * 1000)


def net_server_cpu(cpu: dict[str, list[tuple[float, float]]]) -> dict[str, float]:
    """Mean server CPU ms per call, less the server's background: the rate it burns while the
    plain calls run (they never reach it: idle workers' polls, timers) times each call's wall
    time. Without this, a long call (an answer, ~900 ms) is charged ~15x the background of a
    short one (the floor, ~60 ms)."""
    plain = cpu.get("plain", [])
    rate = sum(c for c, _ in plain) / max(sum(w for _, w in plain), 1e-9) if plain else 0.0
    found = {"background_per_s": rate * 1000}
    for kind, calls in cpu.items():
        if kind != "plain" and calls:
            found[kind] = statistics.fmean(c - rate * w for c, w in calls)
            found[f"{kind}_raw"] = statistics.fmean(c for c, _ in calls)
    return found


async def _answer_pairs(
    s: Setup,
    requests: int,
    plain_ms: list[float],
    shapes: dict[str, list[float]],
    cpu: dict[str, list[tuple[float, float]]],
    asked: list[Asked],
) -> None:
    """Row 1's calls: each pair (plain, workflow; the order alternates), then each floor shape,
    with the server's CPU for each; the first WARMUP rounds are not kept."""
    for i in range(requests + WARMUP):
        request = request_for(i, s.max_tokens)
        s.plain.recording = i >= WARMUP
        if i % 2 == 0:
            p, p_cpu = await server_cpu_ms(s, timed_plain(s, request))
            f, f_cpu = await server_cpu_ms(s, timed_flow(s, request))
        else:
            f, f_cpu = await server_cpu_ms(s, timed_flow(s, request))
            p, p_cpu = await server_cpu_ms(s, timed_plain(s, request))
        measured = {"plain": p_cpu, "answer": f_cpu}
        for shape, times in shapes.items():
            ms, measured[shape] = await server_cpu_ms(s, timed_floor(s, shape))
            if i >= WARMUP:
                times.append(ms)
        if i >= WARMUP:
            plain_ms.append(p)
            asked.append(f)
            for kind, cpu_and_wall in measured.items():
                cpu[kind].append(cpu_and_wall)


async def answer_overhead(s: Setup, requests: int) -> dict[str, Any]:
    """Row 1: RagClient.ask against Plain.answer, alternating which goes first; and after each
    pair, the floor of the answer's shape (the same commands with steps that do nothing), the
    fewest commands an answer can issue, and an empty workflow."""
    plain_ms: list[float] = []
    shapes: dict[str, list[float]] = {"floor": [], "minimal": [], "empty": []}
    cpu: dict[str, list[tuple[float, float]]] = {k: [] for k in ("plain", "answer", *shapes)}
    asked: list[Asked] = []
    s.plain.steps = {}
    with s.activations.installed():
        await _answer_pairs(s, requests, plain_ms, shapes, cpu, asked)
    flow_ms = [a.ms for a in asked]
    steps: dict[str, list[float]] = {}
    for a in asked:
        for step, ms in a.timings_ms.items():
            steps.setdefault(step, []).append(ms)
    calls = [(a.workflow_id, a.called_at, a.returned_at) for a in asked]
    eager = sum(a.eager for a in asked)
    s.plain.recording = False
    plain_steps = {f"plain function: {k}": v for k, v in s.plain.steps.items()}
    recorded: list[WorkflowHistory] = []
    hops = await histories(s.rag.client, calls, recorded)
    replayed = await replay_cost(s.rag.settings, recorded)
    replay = {f"workflow code per answer, replayed {k} (per round)": v for k, v in replayed.items()}
    worker: dict[str, list[float]] = {}
    for history in recorded:
        for name, ms in s.activations.hops(list(history.events)).items():
            worker.setdefault(name, []).append(ms)
    overhead = [f - p for f, p in zip(flow_ms, plain_ms, strict=True)]
    floors = {
        "floor: the same commands with no-op steps (whole call)": shapes["floor"],
        "floor: the fewest commands an answer can issue, no-op (whole call)": shapes["minimal"],
        "floor: a workflow that does nothing (whole call)": shapes["empty"],
    }
    return {
        "plain_ms": plain_ms, "flow_ms": flow_ms, "overhead": overhead, "eager": eager,
        "floor_ms": shapes["floor"], "minimal_ms": shapes["minimal"], "empty_ms": shapes["empty"],
        "server_cpu_ms": net_server_cpu(cpu),
        "hops": hop_rows("answer (client)", hops, steps, plain_steps | worker | replay | floors),
        "counts": dispatch_counts(hops),
    }  # fmt: skip


async def first_token(s: Setup, requests: int) -> dict[str, Any]:
    """Row 2: TTFT over the gateway's SSE against the plain pipeline's, alternating."""
    plain_ms: list[float] = []
    gate_ms: list[float] = []
    streams: list[Streamed] = []
    plain_ids: list[str] = []
    batch = uuid.uuid4().hex[:8]
    lag = LoopLag()
    lag.start()
    for i in range(requests + WARMUP):
        request = request_for(i, s.max_tokens)
        rid = f"serve-ttft-{batch}-{i}"
        if i % 2 == 0:
            (p, plain_id) = await s.plain.first_token(request)
            g = await stream_answer(s.http, s.key, request.question, s.max_tokens, rid)
        else:
            g = await stream_answer(s.http, s.key, request.question, s.max_tokens, rid)
            (p, plain_id) = await s.plain.first_token(request)
        if i >= WARMUP:
            plain_ids.append(plain_id)
            plain_ms.append(p)
            gate_ms.append(g.ttft_ms)
            streams.append(g)
    lagged = lag.stop()
    done = [g for g in streams if g.ok]
    tenant = s.rag.settings.default_tenant
    calls = [(answer_workflow_for(tenant, g.request_id), g.called_at, g.done_at) for g in done]
    hops = await histories(s.rag.client, calls)
    engine = s.engine
    split: dict[str, list[float]] = {}
    for g, h in zip(done, hops, strict=True):
        rid = f"{answer_workflow_for(tenant, g.request_id)}-1"  # the engine request of attempt 1
        if rid not in engine.first_text:
            continue
        for name, ms in (
            ("generate started -> engine call", engine.called[rid] - h.generate_started),
            ("engine call -> first token (prefill)", engine.first_text[rid] - engine.called[rid]),
            ("engine first token -> SSE frame at the client", g.first_token_at - engine.first_text[rid]),
        ):  # fmt: skip
            split.setdefault(name, []).append(ms * 1000)
        published = s.published.between(engine.first_text[rid], g.first_token_at)
        if published is None:
            continue
        for name, ms in (
            ("  of which first token -> publish called (activity loop)", published[0] - engine.first_text[rid]),
            ("  of which publish called -> NOTIFY done", published[1] - published[0]),
            ("  of which NOTIFY done -> SSE frame (LISTEN, relay, HTTP)", g.first_token_at - published[1]),
        ):  # fmt: skip
            split.setdefault(name, []).append(ms * 1000)
    prefill = [
        (engine.first_text[r] - engine.called[r]) * 1000
        for r in plain_ids
        if r in engine.first_text
    ]
    split["plain pipeline: engine call -> first token (prefill)"] = prefill
    split["event loop lag of this process during row 2 (5 ms probe)"] = lagged
    return {
        "plain_ms": plain_ms, "gateway_ms": gate_ms,
        "overhead": [g - p for g, p in zip(gate_ms, plain_ms, strict=True)],
        "failed": [_why(g) for g in streams if not g.ok],
        "hops": hop_rows("answer (gateway SSE)", hops, _steps(done), split),
        "counts": dispatch_counts(hops),
    }  # fmt: skip


def _steps(streams: list[Streamed]) -> dict[str, list[float]]:
    steps: dict[str, list[float]] = {}
    for g in streams:
        for step, ms in g.timings_ms.items():
            steps.setdefault(step, []).append(ms)
    return steps


def _why(g: Streamed) -> str:
    return (
        f"{g.request_id}: HTTP {g.status}, {g.token_events} token event(s), last "
        f"{g.last_event or '-'}, route {g.route or '-'}: {g.detail}"
    )


async def concurrent(s: Setup, concurrency: int, rounds: int) -> dict[str, Any]:
    """Row 4: `concurrency` streams at once on the engine alone, then through the gateway, in
    rounds engine, gateway, gateway, engine (ABBA), so drift hits both, after one untimed round
    on the engine."""
    prompts = {}
    for q in QUESTIONS:  # the prompts the workflow builds: the same retrieval, the same question
        prompts[q], _, _ = await s.plain.messages(
            AskRequest(question=q, max_answer_tokens=s.max_tokens)
        )
    sides: dict[str, dict[str, Any]] = {
        "engine": {"tokens": 0, "seconds": 0.0, "ttft": [], "ok": 0, "n": 0, "failed": []},
        "gateway": {"tokens": 0, "seconds": 0.0, "ttft": [], "ok": 0, "n": 0, "failed": []},
    }
    answered: list[Streamed] = []

    async def engine_round() -> list[tuple[float, int]]:
        return await asyncio.gather(*(
            _engine_stream(s, prompts[QUESTIONS[n % len(QUESTIONS)]]) for n in range(concurrency)
        ))  # fmt: skip

    # Untimed: a fresh engine's first batch this wide takes about twice as long as the next (its
    # KV blocks and buffers are allocated on first use), which would count against whichever
    # side ran first when this row runs alone.
    await engine_round()
    order = ["engine", "gateway", "gateway", "engine"] * ((rounds + 1) // 2)
    for r, side in enumerate(order[: 2 * rounds]):
        began = time.perf_counter()
        if side == "engine":
            results = await engine_round()
            seconds = time.perf_counter() - began
            for ttft, tokens in results:
                sides[side]["ttft"].append(ttft)
                sides[side]["tokens"] += tokens
                sides[side]["ok"] += tokens > 0 and not math.isnan(ttft)
        else:
            batch = uuid.uuid4().hex[:6]
            streams = await asyncio.gather(*(
                stream_answer(s.http, s.key, QUESTIONS[n % len(QUESTIONS)], s.max_tokens,
                              f"serve-c{r}-{batch}-{n}")
                for n in range(concurrency)
            ))  # fmt: skip
            seconds = time.perf_counter() - began
            answered += streams
            for g in streams:
                sides[side]["ttft"].append(g.ttft_ms)
                sides[side]["tokens"] += g.completion_tokens if g.ok else 0
                sides[side]["ok"] += g.ok
                if not g.ok:
                    sides[side]["failed"].append(_why(g))
        sides[side]["seconds"] += seconds
        sides[side]["n"] += concurrency
        print(f"  row 4 round {r + 1} ({side}): {seconds:.1f} s", flush=True)
    for figures_ in sides.values():
        seconds = figures_["seconds"]
        figures_["tokens_per_s"] = figures_["tokens"] / seconds if seconds else float("nan")
    calls = [
        (answer_workflow_for(s.rag.settings.default_tenant, g.request_id), g.called_at, g.done_at)
        for g in answered
        if not math.isnan(g.done_at)
    ]
    hops = await histories(s.rag.client, calls)
    label = f"{concurrency} concurrent (gateway SSE)"
    at_client = {"TTFT at the client": [g.ttft_ms for g in answered if g.token_events]}
    steps = _steps([g for g in answered if g.ok])
    return {
        **sides,
        "hops": hop_rows(label, hops, steps, at_client),
        "counts": dispatch_counts(hops),
    }


async def _engine_stream(s: Setup, messages: Messages) -> tuple[float, int]:
    started = time.perf_counter()
    first: list[float] = []

    def seen(_: int, text: str) -> None:
        if text and not first:
            first.append(time.perf_counter())

    out = await s.engine.generate(messages, s.max_tokens, f"alone-{uuid.uuid4().hex}", seen)
    return ((first[0] - started) * 1000 if first else float("nan")), out.completion_tokens


async def in_process(
    rows: set[int],
    requests: int,
    max_tokens: int,
    concurrency: int,
    rounds: int,
    generation_slots: int | None,
) -> dict[str, Any]:
    admission = admission_settings(concurrency)
    if generation_slots:
        admission["llm_max_concurrent_generations"] = generation_slots
    # As `durable-rag up` runs beside a CPU engine (ragkit/cpus.py): Temporal and Postgres start
    # on the serving CPUs, and this process (the workers, the gateway, the engine's scheduler)
    # moves there once the engine's threads are bound. DURABLE_RAG_LLM_CPU_ENGINE_CPUS=off
    # compares without.
    split = bind_engine(Settings())
    sides = None
    if 6 in rows:  # before the engine and the clients: see bench/tracing_cost.py
        from bench.tracing_cost import TracingSides

        sides = TracingSides()
    async with bench_services(
        "serving",
        cpus=split.serving if split else None,
        llm_served_name=f"bench-{uuid.uuid4().hex[:6]}",
        gateway_request_timeout_seconds=900,
        **admission,
    ) as (work, settings):
        embedder = load_embedder(PACKAGED_MINILM, "cpu", 512, settings.embedding.batch_size)
        index = open_index(settings, embedder.dimension)
        sessions = make_sessionmaker(settings.postgres.sqlalchemy_url)
        engine = TimedEngine(
            VllmEngine(
                EngineConfig(
                    model=resolve_generator(settings.llm.model, ROOT / ".data"),
                    served_name=settings.llm.name,
                    max_model_len=settings.llm.max_model_len,
                    max_num_seqs=settings.llm.max_num_seqs,
                    gpu_memory_utilization=settings.llm.gpu_memory_utilization,
                    tensor_parallel_size=1,
                    dtype=settings.llm.dtype,
                    enforce_eager=True,
                    traces_endpoint=sides.url if sides is not None else None,
                )
            )
        )
        if sides is not None:
            sides.engine = engine.engine
        if split:
            isolate_engine(split)
        client = await connect(settings)
        rag = RagClient(client, settings, sessions)
        generations = Generations(
            settings, sessions, embedder.name, embedder.dimension, opened=index
        )
        plain = Plain(
            rag=rag,
            retrieval=RetrievalActivities(
                embedder, ActiveReader(generations), bm25_encoder(settings)
            ),
            documents=DocumentActivities(
                sessions, embedder.tokenizer, settings.ingest.chunk_tokens,
                settings.ingest.chunk_overlap, settings.ingest.max_document_bytes,
            ),
            cache=AnswerCacheActivities(sessions),
            costs=CostActivities(sessions),
            engine=engine,
        )  # fmt: skip
        corpus = work / "corpus"
        corpus.mkdir()
        for name in SEED_DOCUMENTS:
            shutil.copy(ROOT / "corpus" / name, corpus)
        _, key = keys.create_key(sessions, settings.default_tenant, "bench")
        out: dict[str, Any] = {
            "admission": admission,
            "cpus": split.describe() if split else "unpinned",
        }
        with ThreadPoolExecutor(8) as executor:
            floor_queues = (
                f"bench-floor-{uuid.uuid4().hex[:6]}",
                f"llm-floor-{uuid.uuid4().hex[:6]}",
            )
            workers = [
                *local_workers(client, settings, sessions, index, embedder, executor),
                llm_worker.build_worker(client, settings, engine),
                *floor_workers(client, *floor_queues, worker_interceptors(settings), executor),
            ]
            async with running(workers), gateway(rag, concurrency + 10) as http:
                result = await rag.ingest([str(corpus)])
                assert not result.failures, result.failures
                published = PublishClock()
                published.install()
                activations = ActivationClock()
                server_cpu = ServerCpu(work / "temporal" / "run" / "temporal.pid")
                s = Setup(
                    rag, plain, engine, http, key, max_tokens, published, activations,
                    floor_queues, server_cpu,
                )  # fmt: skip
                if 1 in rows:
                    print("row 1: answer overhead ...", flush=True)
                    out["answer"] = await answer_overhead(s, requests)
                if 2 in rows:
                    print("row 2: time to first token ...", flush=True)
                    out["ttft"] = await first_token(s, requests)
                if 4 in rows:
                    print(f"row 4: {concurrency} concurrent streams ...", flush=True)
                    out["concurrent"] = await concurrent(s, concurrency, rounds)
                if sides is not None:
                    # The client and its workers were made with tracing on: they carry
                    # Temporal's interceptor, which each side then switches.
                    from bench.tracing_cost import tracing_cost

                    print("row 6: rows 1 and 2 with tracing off and on ...", flush=True)
                    out["tracing"] = await tracing_cost(s, sides, requests)
        engine.close()
        index.close()
    if sides is not None:
        sides.close()
    return out


# --- the table --------------------------------------------------------------------------------------


def figures(out: dict[str, Any], concurrency: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    if "answer" in out:
        a = out["answer"]
        p50, p99 = pct(a["overhead"], 0.5), pct(a["overhead"], 0.99)
        rows.append({
            "figure": "answer overhead P50 / P99 (ms), against the same calls in a plain function",
            "baseline": f"plain P50 {pct(a['plain_ms'], 0.5):.0f}, "
                        f"P99 {pct(a['plain_ms'], 0.99):.0f} ms",
            "durable-rag": f"workflow P50 {pct(a['flow_ms'], 0.5):.0f}, "
                           f"P99 {pct(a['flow_ms'], 0.99):.0f} ms",
            "result": f"+{p50:.1f} / +{p99:.1f} ms (shape floor P50 "
                      f"{pct(a['floor_ms'], 0.5):.1f}; the fewest commands an answer can "
                      f"issue {pct(a['minimal_ms'], 0.5):.1f}; an empty workflow "
                      f"{pct(a['empty_ms'], 0.5):.1f})",
            "target": "P50 <= 15 ms; P99 <= 40 ms",
            "met": p50 <= 15 and p99 <= 40,
        })  # fmt: skip
    if "ttft" in out:
        t = out["ttft"]
        p50 = pct(t["overhead"], 0.5)
        rows.append({
            "figure": "time to first token through the gateway's SSE (ms), against a plain "
                      "pipeline on the same engine",
            "baseline": f"plain P50 {pct(t['plain_ms'], 0.5):.0f} ms",
            "durable-rag": f"gateway P50 {pct(t['gateway_ms'], 0.5):.0f} ms",
            "result": f"+{p50:.1f} ms at P50 (P99 +{pct(t['overhead'], 0.99):.0f})",
            "target": "overhead <= 40 ms at P50",
            "met": p50 <= 40 and not t["failed"],
        })  # fmt: skip
    if "search" in out:
        s = out["search"]
        idle, busy = pct(s["idle_ms"], 0.5), pct(s["ingest_ms"], 0.5)
        rows.append({
            "figure": f"search P50 during a {s['documents']:,}-document ingest, over idle",
            "baseline": f"idle P50 {idle:.0f} ms ({len(s['idle_ms'])})",
            "durable-rag": f"during ingest P50 {busy:.0f} ms ({len(s['ingest_ms'])})",
            "result": f"x{busy / idle:.2f}",
            "target": "<= 2.0",
            "met": busy / idle <= 2.0,
        })  # fmt: skip
    if "concurrent" in out:
        e, g = out["concurrent"]["engine"], out["concurrent"]["gateway"]
        ratio = g["tokens_per_s"] / e["tokens_per_s"]
        rows.append({
            "figure": f"{concurrency} concurrent streamed answers through the gateway",
            "baseline": f"engine alone {e['tokens_per_s']:.1f} tok/s, TTFT P50 "
                        f"{pct(e['ttft'], 0.5):.0f} / P99 {pct(e['ttft'], 0.99):.0f} ms",
            "durable-rag": f"{g['ok']}/{g['n']} with tokens, {g['tokens_per_s']:.1f} tok/s, TTFT "
                           f"P50 {pct(g['ttft'], 0.5):.0f} / P99 "
                           f"{pct(g['ttft'], 0.99):.0f} ms",
            "result": f"x{ratio:.2f} tokens/s",
            "target": "all complete with tokens; tokens/s >= 0.9x",
            "met": g["ok"] == g["n"] and ratio >= 0.9,
        })  # fmt: skip
    if "tracing" in out:
        from bench.tracing_cost import figure_rows

        rows += figure_rows(out["tracing"], pct)
    return rows


def print_table(rows: list[dict[str, Any]], keys_: list[str]) -> None:
    widths = {k: max(len(k), *(len(_text(r.get(k, ""))) for r in rows)) for k in keys_}
    print("  ".join(k.ljust(widths[k]) for k in keys_))
    for r in rows:
        print("  ".join(_text(r.get(k, "")).ljust(widths[k]) for k in keys_))


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return "-" if math.isnan(value) else f"{value:.1f}"
    return str(value)


def report(out: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    if "burst" in out:
        print("\nRow 5: a burst past capacity (bench/burst.py)")
        burst.print_rows(out["burst"])
        if set(out) == {"burst"}:
            return {"name": "serving", "burst": out["burst"],
                    "met": all(r.get("met", True) for r in out["burst"] if r["side"] != "lifted")}  # fmt: skip
    rows = figures(out, args.concurrency)
    parts = [p for p in ("answer", "ttft", "concurrent", "search") if p in out]
    hops = [h for part in parts for h in out[part]["hops"]]
    counts = {part: out[part]["counts"] for part in parts}
    print(f"\nServing benchmark: {args.requests} requests per latency figure, answers of at most "
          f"{args.max_tokens} tokens, {args.concurrency} concurrent, {os.cpu_count()} CPUs\n")  # fmt: skip
    print_table(rows, ["figure", "baseline", "durable-rag", "result", "target", "met"])
    if out.get("admission"):
        print(f"\nsettings set for rows 1, 2 and 4: {out['admission']}; {out['cpus']}")
    if hops:
        print("\nPer hop (history event times; steps are the workflow's own timings_ms):")
        print_table(hops, ["flow", "hop", "n", "p50_ms", "p99_ms"])
    print("\nDispatches per workflow:")
    for part, c in counts.items():
        what = "per search" if part == "search" else "before generate (count: answers)"
        print(f"  {part}: remote activity dispatches {what} "
              f"{c['remote_before_generate']}; remote activities {c['remote_kinds']}; local "
              f"activities (markers) per workflow P50 {c['local_per_answer_p50']:.0f} "
              f"{c['local_kinds']}; workflow tasks P50 {c['workflow_tasks_p50']:.0f}, "
              f"timed out {c['workflow_task_timeouts']}{kinds_note(c['workflow_task_timeout_kinds'])}, "
              f"failed {c['workflow_task_failures']}")  # fmt: skip
    if "answer" in out:
        print(f"  eager starts: {out['answer']['eager']}/{len(out['answer']['flow_ms'])}")
    problems = [*out.get("ttft", {}).get("failed", [])]
    problems += out.get("tracing", {}).get("failed", [])
    problems += out.get("concurrent", {}).get("gateway", {}).get("failed", [])
    if out.get("concurrent", {}).get("degraded"):
        problems.insert(0, f"row 4 degradations (kind: count): {out['concurrent']['degraded']}")
    if "search" in out and len(out["search"]["ingest_ms"]) < args.requests:
        problems.append(f"only {len(out['search']['ingest_ms'])} searches ran during the ingest")
    if problems:
        print("\nProblems seen:")
        for p in problems[:20]:
            print(f"  - {p}")
        if len(problems) > 20:
            print(f"  ... and {len(problems) - 20} more")
    return {
        "name": "serving", "requests": args.requests, "max_tokens": args.max_tokens,
        "concurrency": args.concurrency, "rows": rows, "hops": hops, "dispatches": counts,
        "problems": problems, "settings": out.get("admission", {}), "cpus": out.get("cpus"),
        "note": NOTE,
        **({"title": f"tracing cost: rows 1 and 2 with tracing off and on (`bench/serving.py "
                     f"--rows 6`, {time.strftime('%Y-%m-%d')})",
            "spans_received": out["tracing"]["spans"]} if "tracing" in out else {}),
        **numbers(out),
        "met": all(r["met"] for r in rows),
    }  # fmt: skip


def numbers(out: dict[str, Any]) -> dict[str, Any]:
    """The headline figures as numbers, for bench/report.py's summary."""
    found: dict[str, Any] = {}
    if "answer" in out:
        a = out["answer"]
        found |= {"answer_overhead_p50_ms": pct(a["overhead"], 0.5),
                  "answer_overhead_p99_ms": pct(a["overhead"], 0.99),
                  "answer_plain_p50_ms": pct(a["plain_ms"], 0.5),
                  "answer_flow_p50_ms": pct(a["flow_ms"], 0.5),
                  "answer_floor_p50_ms": pct(a["floor_ms"], 0.5),
                  "answer_floor_p99_ms": pct(a["floor_ms"], 0.99),
                  "answer_minimal_p50_ms": pct(a["minimal_ms"], 0.5),
                  "empty_workflow_p50_ms": pct(a["empty_ms"], 0.5)}  # fmt: skip
        found |= {f"{k}_server_cpu_ms": v for k, v in a["server_cpu_ms"].items()}
    if "ttft" in out:
        t = out["ttft"]
        found |= {"ttft_overhead_p50_ms": pct(t["overhead"], 0.5),
                  "ttft_plain_p50_ms": pct(t["plain_ms"], 0.5),
                  "ttft_gateway_p50_ms": pct(t["gateway_ms"], 0.5)}  # fmt: skip
    if "search" in out:
        s = out["search"]
        idle, busy = pct(s["idle_ms"], 0.5), pct(s["ingest_ms"], 0.5)
        found |= {"search_idle_p50_ms": idle, "search_ingest_p50_ms": busy,
                  "search_ratio_p50": busy / idle, "ingest_seconds": s["ingest_seconds"]}  # fmt: skip
    if "concurrent" in out:
        e, g = out["concurrent"]["engine"], out["concurrent"]["gateway"]
        found |= {"concurrent_completed": g["ok"], "concurrent_streams": g["n"],
                  "concurrent_tokens_per_s": g["tokens_per_s"],
                  "engine_tokens_per_s": e["tokens_per_s"],
                  "concurrent_ratio": g["tokens_per_s"] / e["tokens_per_s"],
                  "concurrent_ttft_p50_ms": pct(g["ttft"], 0.5),
                  "concurrent_ttft_p99_ms": pct(g["ttft"], 0.99),
                  "engine_ttft_p50_ms": pct(e["ttft"], 0.5),
                  "engine_ttft_p99_ms": pct(e["ttft"], 0.99)}  # fmt: skip
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in found.items()}


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    if args.loop_debug:  # asyncio names every callback that holds the loop longer than this
        loop = asyncio.get_running_loop()
        loop.set_debug(True)
        loop.slow_callback_duration = args.loop_debug / 1000
    rows = {int(r) for r in args.rows.split(",") if r.strip()}
    out: dict[str, Any] = {}
    if 5 in rows:
        print(f"row 5: a burst of {args.burst} streamed, then {args.burst} plain asks ...",
              flush=True)  # fmt: skip
        out["burst"] = await burst.run_sides(["lifted", "bounded", "two"], args.burst,
                                             args.max_tokens)  # fmt: skip
    if 3 in rows:
        print(f"row 3: search during a {args.documents}-document ingest (stack as processes) ...",
              flush=True)  # fmt: skip
        out["search"] = await search_during_ingest(args.requests, args.documents)
    if rows & {1, 2, 4, 6}:
        out |= await in_process(
            rows, args.requests, args.max_tokens, args.concurrency, args.rounds,
            args.generation_slots,
        )  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100, help="per latency figure and side")
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=2, help="row 4: rounds per side")
    parser.add_argument(
        "--generation-slots",
        type=int,
        default=None,
        help="the LLM worker's activity slots (llm_max_concurrent_generations); default: the "
        "settings' (8)",
    )
    parser.add_argument("--documents", type=int, default=1500, help="row 3: documents ingested")
    parser.add_argument("--burst", type=int, default=300, help="row 5: requests per burst")
    parser.add_argument("--rows", default="1,2,3,4", help="which figures, e.g. 1,2")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument(
        "--loop-debug",
        type=float,
        default=0,
        metavar="MS",
        help="diagnosis: asyncio debug mode, logging callbacks that hold the loop over MS",
    )
    args = parser.parse_args()
    began = time.monotonic()
    out = asyncio.run(main_async(args))
    figures_ = report(out, args)
    print(f"\n({time.monotonic() - began:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps(figures_, default=_plain))


def _plain(value: Any) -> Any:
    return None if isinstance(value, float) and math.isnan(value) else str(value)


if __name__ == "__main__":
    main()
