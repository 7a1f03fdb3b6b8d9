"""A mixed load on a running stack (answers, ingests, conversation turns) and the checks that
nothing was lost or duplicated by it.

The load behaves like a careful backend service: every request has a stable id (the answer's trace
id, the ingest's workflow id, the turn's message id), and a call that fails on the way (the
Temporal server restarting, a dropped connection) is retried with that same id until the request's
deadline. A request counts as failed only if it did not complete by then, or completed with an
error. Afterwards `verify` reads Postgres and the vector index and counts what is missing or there
twice.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import re
import shutil
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from temporalio.client import Client, WorkflowUpdateRPCTimeoutOrCancelledError
from temporalio.service import RPCError

from durable_rag.client import RagClient
from ragkit import ids
from ragkit.index import open_index
from ragkit.settings import Settings
from schemas.answer import Answer, AskRequest

ROOT = Path(__file__).resolve().parent.parent
SEED_DOCUMENTS = [
    "technology/unicode-and-utf-8.md",
    "history/great-fire-of-london.md",
    "science/photosynthesis.md",
    "technology/vector-search-and-hnsw.md",
    "science/tides.txt",
]
QUESTIONS = [
    "Who designed the UTF-8 encoding?",
    "Where did the Great Fire of London begin?",
    "What does RuBisCO do in photosynthesis?",
    "Who introduced the HNSW algorithm?",
    "What causes spring tides?",
]
CONVERSATION = "load"  # the id of the one conversation the load holds per tenant
# Requests per side a benchmark does not count: the first ones warm caches and the engine.
WARMUP = 2
REQUEST_DEADLINE = 300.0  # seconds a request may take, retries included, before it counts failed

T = TypeVar("T")
# What a request came to: status, detail, its degradations (kind -> message).
Answered = tuple[str, str, dict[str, str]]


@dataclass
class Outcome:
    kind: str  # answer | ingest | turn
    started: float  # monotonic
    seconds: float
    status: str  # ok | degraded | failed
    detail: str = ""
    # Each kind of degradation (`degradation_kinds`) with its first message: why it fell back.
    degradations: dict[str, str] = field(default_factory=dict)
    workflow_id: str = ""  # the workflow that served it (the conversation's, for a turn)


@dataclass
class Ledger:
    """What the load sent and what it was told, to compare with what is stored."""

    outcomes: list[Outcome] = field(default_factory=list)
    ingested: set[str] = field(default_factory=set)  # sources whose ingest reported success
    turns: set[str] = field(default_factory=set)  # message ids whose turn was answered

    def count(self, status: str | None = None) -> int:
        return sum(1 for o in self.outcomes if status is None or o.status == status)

    def degradations(self) -> dict[str, int]:
        return degradations_by_kind(self.outcomes)


async def persistently(call: Callable[[], Awaitable[T]], deadline: float) -> T:
    """`call` again while the service is unreachable, until `deadline` (monotonic). Safe: every
    request carries its own id, so a call that did reach the server is not applied twice."""
    while True:
        try:
            return await call()
        except (RPCError, WorkflowUpdateRPCTimeoutOrCancelledError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(1.0)


def degraded(answer: Answer) -> bool:
    return answer.route != "primary" or bool(answer.degradations)


# The kind each fallback records (the bounded name workflows pass to `degrade`: workflows/
# retrieve.py, workflows/answer.py, workflows/calls.best_effort), recognised from the message it
# puts in `Answer.degradations`, which carries the message only. Anything else is "other".
DEGRADATION_KINDS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), kind)
    for pattern, kind in (
        (r"^vector search failed", "keyword_only"),
        (r"^keyword search failed", "vector_only"),
        (r"^LLM query rewrite failed", "rules_rewrite"),
        (r"^rerank failed", "rerank_skipped"),
        (r"^\d+ passage\(s\) dropped to fit", "passages_dropped"),
        (r"^generation on .* failed", "generation_failed"),  # fallback_model or no_model below
        (r"^served the cached answer", "cached_answer"),
        (r"^no model answered", "default_reply"),
        (r"^answer cache unavailable", "cache_unavailable"),
        (r"^answer not cached", "answer_not_cached"),
        (r"^cost not recorded", "cost_not_recorded"),
        (r"^shadow answer not recorded", "shadow_not_recorded"),
        # The conversation's own (workflows/conversation.py), not passed to `degrade`.
        (r"^\d+ earlier turn\(s\) left out of the prompt", "turns_dropped"),
    )
)


def degradation_kinds(answer: Answer) -> list[str]:
    """The kind of each of the answer's degradations, in order. A failed generation is
    `fallback_model` when another model was asked after it (the answer's route says so, or a
    second generation failed too), else `no_model`, as in AnswerWorkflow._generate."""
    kinds = [
        next((kind for pattern, kind in DEGRADATION_KINDS if pattern.search(d)), "other")
        for d in answer.degradations
    ]
    failed = [i for i, kind in enumerate(kinds) if kind == "generation_failed"]
    for n, i in enumerate(failed):
        asked_another = n + 1 < len(failed) or answer.route == "fallback_model"
        kinds[i] = "fallback_model" if n == 0 and asked_another else "no_model"
    if answer.route != "primary" and not kinds:
        kinds.append(answer.route)  # a fallback route that reported nothing: say which
    return kinds


def answered(answer: Answer) -> Answered:
    if not degraded(answer):
        return "ok", "", {}
    messages = answer.degradations or [f"answered by route {answer.route}"]
    kinds: dict[str, str] = {}
    for kind, message in zip(degradation_kinds(answer), messages, strict=False):
        kinds.setdefault(kind, message[:300])
    return "degraded", "; ".join(answer.degradations)[:300], kinds


def degradations_by_kind(outcomes: list[Outcome]) -> dict[str, int]:
    """Requests per degradation kind (a request with two kinds counts under both), most first."""
    counts: dict[str, int] = {}
    for o in outcomes:
        for kind in o.degradations:
            counts[kind] = counts.get(kind, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def format_kinds(counts: dict[str, int]) -> str:
    return ", ".join(f"{kind} {n}" for kind, n in counts.items()) or "-"


class MixedLoad:
    """`answer_loops` clients asking questions, one client ingesting a new document at a time
    and one holding a conversation, all for one tenant, until `stop` is set.

    `documents`: 0, every ingest is a new document and the index grows with the load; N, the
    ingest client cycles through N documents, each ingest a new version of one (it replaces the
    old version's chunks), so the index holds a steady amount and a growing process is a leak,
    not data."""

    def __init__(
        self,
        client: Client,
        settings: Settings,
        tenant: str,
        corpus: Path,
        answer_loops: int = 2,
        max_tokens: int = 8,
        pause: float = 0.0,
        documents: int = 0,
    ) -> None:
        self.rag = RagClient(client, settings)
        self.client = client
        self.tenant = tenant
        self.corpus = corpus
        self.answer_loops = answer_loops
        self.max_tokens = max_tokens
        self.pause = pause
        self.documents = documents
        self.ledger = Ledger()
        # Answers asked and not yet answered: trace id -> when (monotonic), for a fault that
        # must strike while one is in a given step (bench/faults.py).
        self.in_flight: dict[str, float] = {}
        self._documents = itertools.count()
        # Cleared: each client finishes the request it is in and sends no next one until set.
        self.flowing = asyncio.Event()
        self.flowing.set()

    async def seed(self) -> None:
        """Ingest the seed corpus the questions are about (not counted as load)."""
        folder = self.corpus / "seed"
        folder.mkdir(parents=True, exist_ok=True)
        for name in SEED_DOCUMENTS:
            shutil.copy(ROOT / "corpus" / name, folder)
        result = await self.rag.ingest([str(folder)], self.tenant)
        if result.failures:
            raise RuntimeError(f"seeding {self.tenant} failed: {result.failures}")
        self.ledger.ingested |= {str(folder / Path(n).name) for n in SEED_DOCUMENTS}

    async def run(self, stop: asyncio.Event) -> None:
        loops = [self._loop(self.answer, stop, i) for i in range(self.answer_loops)]
        loops += [self._loop(self.ingest, stop, 0), self._loop(self.turn, stop, 0)]
        await asyncio.gather(*loops)

    async def _loop(
        self, request: Callable[[int], Awaitable[Outcome]], stop: asyncio.Event, worker: int
    ) -> None:
        for n in itertools.count():
            await self.flowing.wait()
            if stop.is_set():
                return
            self.ledger.outcomes.append(await request(worker * 1000 + n))
            if self.pause:
                await asyncio.sleep(self.pause)

    async def _timed(
        self, kind: str, call: Callable[[], Awaitable[Answered]], workflow_id: str = ""
    ) -> Outcome:
        started = time.monotonic()
        kinds: dict[str, str] = {}
        try:
            status, detail, kinds = await asyncio.wait_for(call(), REQUEST_DEADLINE)
        except TimeoutError:
            status, detail = "failed", f"not done in {REQUEST_DEADLINE:.0f} s"
        except Exception as exc:  # any error is a failed request, with the reason
            cause = exc
            while getattr(cause, "cause", None) is not None or cause.__cause__ is not None:
                cause = getattr(cause, "cause", None) or cause.__cause__  # type: ignore[assignment]
            status, detail = "failed", f"{type(exc).__name__}: {type(cause).__name__}: {cause}"
        seconds = time.monotonic() - started
        return Outcome(kind, started, seconds, status, detail, kinds, workflow_id)

    async def answer(self, n: int) -> Outcome:
        question = QUESTIONS[n % len(QUESTIONS)]
        trace_id = f"load-{uuid.uuid4().hex}"
        deadline = time.monotonic() + REQUEST_DEADLINE
        request = AskRequest(
            tenant=self.tenant, question=question, max_answer_tokens=self.max_tokens, top_k=3
        )

        async def call() -> Answered:
            async def start() -> Any:
                # The key makes a retried start attach to the run the first one started.
                return await self.rag.start_ask(request, trace_id)

            self.in_flight[trace_id] = time.monotonic()
            try:
                handle = await persistently(start, deadline)
                answer: Answer = await persistently(handle.result, deadline)
            finally:
                self.in_flight.pop(trace_id, None)
            return answered(answer)

        return await self._timed("answer", call, answer_workflow_for(self.tenant, trace_id))

    async def ingest(self, n: int) -> Outcome:
        number = next(self._documents)
        slot = number % self.documents if self.documents else number
        path = self.corpus / "load" / f"note-{slot:05d}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            f"# Field note {number}\n\n"
            + "\n\n".join(
                f"Observation {number}-{j}: the survey team zq{number}x{j} recorded "
                f"{(number * 7 + j) % 97} birds near marker {j} at dawn."
                for j in range(4)
            )
            + "\n"
        )
        deadline = time.monotonic() + REQUEST_DEADLINE
        started: list[str] = []

        async def call() -> Answered:
            request = self.rag.ingest_request([str(path)], self.tenant)
            handle = await persistently(lambda: self.rag.start_ingest(request), deadline)
            started.append(handle.id)
            result = await persistently(handle.result, deadline)
            if result.failures:
                return "failed", "; ".join(f.message for f in result.failures)[:200], {}
            self.ledger.ingested.add(str(path))
            return "ok", "", {}

        outcome = await self._timed("ingest", call)
        outcome.workflow_id = started[0] if started else ""
        return outcome

    async def turn(self, n: int) -> Outcome:
        message_id = f"m-{uuid.uuid4().hex}"
        deadline = time.monotonic() + REQUEST_DEADLINE

        async def call() -> Answered:
            reply = await persistently(
                lambda: self.rag.chat(
                    CONVERSATION,
                    QUESTIONS[n % len(QUESTIONS)],
                    tenant=self.tenant,
                    message_id=message_id,
                    max_answer_tokens=self.max_tokens,
                    top_k=3,
                ),
                deadline,
            )
            self.ledger.turns.add(message_id)
            return answered(reply.answer)

        conversation = ids.conversation_workflow_id(self.tenant, CONVERSATION)
        return await self._timed("turn", call, conversation)


def answer_workflow_for(tenant: str, request_key: str) -> str:
    """The workflow id of the answer a request with this idempotency key started."""
    return ids.answer_workflow_id(ids.trace_id(tenant, request_key, ""))


# --- what is stored afterwards ------------------------------------------------------------------


@dataclass
class Stored:
    lost: int = 0
    duplicated: int = 0
    details: list[str] = field(default_factory=list)


def postgres_url(settings: Settings) -> str:
    return settings.postgres.sqlalchemy_url.replace("postgresql+psycopg://", "postgresql://", 1)


def verify_postgres(settings: Settings, tenant: str, ledger: Ledger) -> tuple[Stored, set[str]]:
    """Documents and turns the load was told are stored, once each; returns the active chunk
    ids too, for `verify_index`."""
    found = Stored()
    with psycopg.connect(postgres_url(settings)) as conn:
        documents = conn.execute(
            "SELECT source, count(*) FROM documents WHERE tenant = %s AND status = 'active' "
            "GROUP BY source",
            (tenant,),
        ).fetchall()
        active = {source: count for source, count in documents}
        missing = ledger.ingested - set(active)
        twice = [s for s, c in active.items() if c > 1]
        chunks = {
            row[0]
            for row in conn.execute(
                "SELECT c.id::text FROM chunks c JOIN documents d ON d.id = c.document_id "
                "WHERE c.tenant = %s AND c.version = d.version AND d.status = 'active'",
                (tenant,),
            )
        }
        documents_without_chunks = conn.execute(
            "SELECT count(*) FROM documents d WHERE d.tenant = %s AND d.status = 'active' AND "
            "NOT EXISTS (SELECT 1 FROM chunks c WHERE c.document_id = d.id "
            "AND c.version = d.version)",
            (tenant,),
        ).fetchone()
        turns = conn.execute(
            "SELECT t.message_id, count(*) FROM turns t "
            "JOIN conversations c ON c.id = t.conversation_id "
            "WHERE c.tenant = %s AND t.role = 'user' GROUP BY t.message_id",
            (tenant,),
        ).fetchall()
    stored_turns = {message_id: count for message_id, count in turns}
    missing_turns = ledger.turns - set(stored_turns)
    twice_turns = [m for m, c in stored_turns.items() if c > 1]
    empty = int(documents_without_chunks[0]) if documents_without_chunks else 0
    found.lost = len(missing) + len(missing_turns) + empty
    found.duplicated = len(twice) + len(twice_turns)
    if missing:
        found.details.append(f"documents lost: {sorted(missing)[:3]}")
    if empty:
        found.details.append(f"{empty} active documents without chunks")
    if missing_turns:
        found.details.append(f"{len(missing_turns)} answered turns not stored")
    if twice or twice_turns:
        found.details.append(f"stored twice: {twice[:3]} {twice_turns[:3]}")
    return found, chunks


def verify_index(
    settings: Settings, dimension: int, chunks: dict[str, set[str]]
) -> dict[str, Stored]:
    """Points in the vector index against the active chunks in Postgres, per tenant. Opens the
    embedded index: only while no index worker has it open."""
    found: dict[str, Stored] = {}
    index = open_index(settings, dimension)
    try:
        for tenant, expected in chunks.items():
            points = [str(p) for p in index.point_ids(tenant)]
            extra = set(points) - expected
            missing = expected - set(points)
            twice = len(points) - len(set(points))
            stored = found[tenant] = Stored(lost=len(missing), duplicated=twice + len(extra))
            if missing or extra or twice:
                stored.details.append(
                    f"index: {len(missing)} chunks missing, {len(extra)} points without an "
                    f"active chunk, {twice} points twice"
                )
    finally:
        index.close()
    return found


async def running_workflows(client: Client, wait: float = 30.0) -> list[str]:
    """Workflows still open, after waiting up to `wait` s for them to close (conversations close
    after their idle time)."""
    deadline = time.monotonic() + wait
    while True:
        open_ids = [
            w.id
            async for w in client.list_workflows('ExecutionStatus="Running"')
            if not w.id.startswith("temporal-sys-")
        ]
        if not open_ids or time.monotonic() > deadline:
            return open_ids
        await asyncio.sleep(1.0)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def pct(values: list[float], q: float) -> float:
    """The percentile of the values that exist (a stream without tokens has no TTFT: NaN)."""
    return percentile([v for v in values if not math.isnan(v)], q)


def latency_summary(outcomes: list[Outcome]) -> tuple[float, float]:
    """P50 and P99 in ms of the requests that completed."""
    done = [o.seconds * 1000 for o in outcomes if o.status != "failed"]
    return percentile(done, 0.5), percentile(done, 0.99)


def mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")
