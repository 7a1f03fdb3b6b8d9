"""Tenant isolation, as a property: two tenants with adversarial names and ids run the operations
of the API, interleaved in an order Hypothesis draws, on the real stack, and nothing of one is
read, changed or deleted by the other.

The names are drawn to collide where ids once did: tenant `p` and tenant `p-s` (or `p.s`, `p_s`),
with conversations `s-x` and `x` (`conversation-p-s-x` was one workflow for both), or both the same
conversation id; both send the same X-Request-ID and Idempotency-Key values, and upload a document
under the same name. A model of what each tenant did says what each must see afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from durable_rag.client import RagClient
from ragkit import ids
from ragkit.embedding import Embedder
from ragkit.llm.engine import LLMEngine
from ragkit.sources import Source
from ragkit.store import costs as cost_reports
from ragkit.store import keys
from schemas.evaluation import EvalCase
from tests.conftest import Database
from tests.gateway.test_app import bearer, gateway
from tests.workflows.test_answer import ingest_sample

pytestmark = [pytest.mark.integration, pytest.mark.slow]

OPERATIONS = [
    "upload",
    "search",
    "ask",
    "chat",
    "history",
    "feedback",
    "runs",
    "costs",
    "shadow_report",
    "evaluate",
    "delete_conversation",
    "delete_document",
]
DOCUMENT = "shared-name.md"


@dataclass
class Tenant:
    name: str
    conversation: str
    token: str  # a word only this tenant's document holds
    key: str = ""
    document_alive: bool = False
    uploaded: bool = False
    done: dict[str, int] = field(default_factory=dict)  # operations so far, by kind
    turns: int = 0
    traces: list[str] = field(default_factory=list)
    # What deleting the document forgets (answer_costs.read_documents): the asks that read it
    # (their cost rows stay, so every later delete finds them again), the current conversation's
    # replies that read it, and of those the ones not redacted yet.
    ask_reads: list[str] = field(default_factory=list)
    chat_reads: int = 0
    unredacted: int = 0
    forgotten: set[str] = field(default_factory=set)  # their runs are being deleted
    evaluations: int = 0

    @property
    def document_id(self) -> uuid.UUID:
        return ids.document_id(self.name, str(Source.upload(DOCUMENT)))


@st.composite
def tenant_pairs(draw: st.DrawFn, kind: str) -> tuple[str, str, str, str]:
    """(tenant a, tenant b, a's conversation, b's conversation), built to collide: `collide`,
    the pair that shared `conversation-<tenant>-<id>`; `same`, one conversation id for both."""
    word = st.text(alphabet="ab", min_size=1, max_size=3)
    prefix, suffix, tail = draw(word), draw(word), draw(word)
    salt = uuid.uuid4().hex[:6]  # examples never share data
    if kind == "collide":
        return f"{prefix}{salt}", f"{prefix}{salt}-{suffix}", f"{suffix}-{tail}", tail
    sep = draw(st.sampled_from(["-", ".", "_"]))
    return f"{prefix}{salt}", f"{prefix}{salt}{sep}{suffix}", f"c{tail}", f"c{tail}"


# Every operation of both tenants, in a drawn order, then a few more drawn ones.
plans = st.tuples(
    st.permutations([(who, operation) for who in (0, 1) for operation in OPERATIONS]),
    st.lists(st.tuples(st.sampled_from([0, 1]), st.sampled_from(OPERATIONS)), max_size=4),
).map(lambda parts: [*parts[0], *parts[1]])


@pytest.fixture(scope="module")
async def tenancy_data(
    client: Any, module_database: Database, embedder: Embedder, tmp_path_factory: Any
) -> Path:
    return await ingest_sample(client, module_database, embedder, tmp_path_factory)


@pytest.fixture(scope="module")
async def served(
    client: Any,
    module_database: Database,
    embedder: Embedder,
    llm_engine: LLMEngine,
    tenancy_data: Path,
) -> AsyncIterator[tuple[httpx.AsyncClient, RagClient]]:
    # Every answer is shadowed (the candidate: keyword retrieval), so shadow rows exist to leak.
    async with gateway(
        client,
        module_database,
        embedder,
        llm_engine,
        tenancy_data,
        shadow_sample_rate=1.0,
        shadow_retrieval_mode="keyword",
    ) as pair:
        yield pair


class Run:
    """One drawn example: the two tenants, what each did, and the checks after each step."""

    def __init__(self, http: httpx.AsyncClient, rag: RagClient, database: Database) -> None:
        self.http, self.rag, self.database = http, rag, database

    async def do(self, me: Tenant, other: Tenant, operation: str) -> None:
        await getattr(self, operation)(me, other)
        me.done[operation] = me.done.get(operation, 0) + 1

    @staticmethod
    def nth(me: Tenant, operation: str) -> int:
        """Counted per tenant, so both tenants send the same keys and request ids."""
        return me.done.get(operation, 0)

    async def upload(self, me: Tenant, other: Tenant) -> None:
        response = await self.http.post(
            "/v1/documents",
            json={"name": DOCUMENT, "text": f"# {me.token}\n\nThe {me.token} is kept here.\n"},
            headers=bearer(me.key) | {"Idempotency-Key": f"key-{self.nth(me, 'upload')}"},
        )
        assert response.status_code == 202, response.text
        accepted = response.json()
        assert accepted["document_id"] == str(me.document_id)
        await self.rag.client.get_workflow_handle(accepted["workflow_id"]).result()
        me.document_alive = me.uploaded = True

    async def search(self, me: Tenant, other: Tenant) -> None:
        mine = await self.rag.search(me.token, tenant=me.name, top_k=5)
        theirs = await self.rag.search(other.token, tenant=me.name, top_k=5)
        found = {p.document_id for p in mine.passages + theirs.passages}
        assert other.document_id not in found, "another tenant's passage was retrieved"
        if me.document_alive:
            assert mine.passages and mine.passages[0].document_id == me.document_id

    async def ask(self, me: Tenant, other: Tenant) -> None:
        response = await self.http.post(
            "/v1/ask",
            json={"question": f"What is the {me.token}?", "max_answer_tokens": 8, "top_k": 3},
            headers=bearer(me.key) | {"X-Request-ID": f"ask-{self.nth(me, 'ask')}"},
        )
        assert response.status_code == 200, response.text
        answer = response.json()
        assert answer["trace_id"] not in other.traces
        cited = {uuid.UUID(c["document_id"]) for c in answer["citations"]}
        assert other.document_id not in cited
        me.traces.append(answer["trace_id"])
        if me.document_alive:  # the tenant's index holds only its own document
            me.ask_reads.append(answer["trace_id"])

    async def chat(self, me: Tenant, other: Tenant) -> None:
        response = await self.http.post(
            f"/v1/conversations/{me.conversation}/messages",
            json={"message": f"Tell me about the {me.token}.", "max_answer_tokens": 8, "top_k": 2},
            headers=bearer(me.key) | {"X-Request-ID": f"chat-{self.nth(me, 'chat')}"},
        )
        assert response.status_code == 200, response.text
        me.turns += 2
        if me.document_alive:
            me.chat_reads += 1
            me.unredacted += 1

    async def history(self, me: Tenant, other: Tenant) -> None:
        response = await self.http.get(
            f"/v1/conversations/{me.conversation}", headers=bearer(me.key)
        )
        if not me.turns:
            assert response.status_code == 404, response.text
            return
        turns = response.json()["turns"]
        assert len(turns) == me.turns
        assert all(other.token not in t["text"] for t in turns)

    async def feedback(self, me: Tenant, other: Tenant) -> None:
        for trace, status in [(t, 404) for t in other.traces[-1:]] + [
            (t, 200) for t in me.traces[-1:]
        ]:
            vote = await self.http.post(
                "/v1/feedback", json={"trace_id": trace, "rating": "up"}, headers=bearer(me.key)
            )
            assert vote.status_code == status, (trace, vote.text)

    async def runs(self, me: Tenant, other: Tenant) -> None:
        for trace, status in [(t, 404) for t in other.traces[-1:]] + [
            (t, 200) for t in me.traces[-1:]
        ]:
            run = await self.http.get(f"/v1/runs/{trace}", headers=bearer(me.key))
            if trace in me.forgotten:  # its run is deleted in the background, soon or already
                assert run.status_code in (200, 404), (trace, run.text)
            else:
                assert run.status_code == status, (trace, run.text)

    async def costs(self, me: Tenant, other: Tenant) -> None:
        """The cost report counts every answer of this tenant under its name, and nothing
        else: its asks, and its current conversation's turns (a deleted one takes its rows)."""
        with self.database.sessions() as session:
            totals = cost_reports.totals(session, "tenant", cost_reports.since_days(1))
        answers = {total.key: total.answers for total in totals}
        expected = len(me.traces) + me.turns // 2 + me.evaluations  # a case is an answer
        assert answers.get(me.name, 0) == expected, (me.name, answers)

    async def shadow_report(self, me: Tenant, other: Tenant) -> None:
        """A tenant's shadow runs are of its own requests, and its shadow report pairs them with
        its own live answers only. Shadow children finish in the background: count what is in."""
        rows = self.database.rows(
            "SELECT s.live_trace_id, c.tenant FROM shadow_runs s "
            "LEFT JOIN answer_costs c ON c.trace_id = s.live_trace_id WHERE s.tenant = %s",
            me.name,
        )
        assert all(trace not in other.traces for trace, _ in rows), rows
        assert all(owner in (me.name, None) for _, owner in rows), rows
        with self.database.sessions() as session:
            report = cost_reports.shadow_report(session, cost_reports.since_days(1), me.name)
        paired = sum(row.pairs for row in report)
        assert paired == sum(owner == me.name for _, owner in rows), (report, rows)

    async def evaluate(self, me: Tenant, other: Tenant) -> None:
        """An evaluation run for a tenant asks over its documents only, and its report is kept
        under its name."""
        case = EvalCase(
            id=f"case-{self.nth(me, 'evaluate')}",
            kind="functional",
            question=f"What is the {me.token}?",
            relevant=[DOCUMENT],  # both tenants' documents have this name: only one may show
        )
        report = await self.rag.evaluate(
            f"tenancy-{me.name}", [case], me.name, concurrency=1, max_answer_tokens=8
        )
        outcome = report.outcomes[0]
        assert (DOCUMENT in outcome.retrieved) == me.document_alive, outcome
        owner = self.database.scalar(
            "SELECT tenant FROM eval_reports WHERE workflow_id = %s", report.workflow_id
        )
        assert owner == me.name, (report.workflow_id, owner)
        me.evaluations += 1
        if me.document_alive:
            me.ask_reads.append(outcome.trace_id)

    async def delete_conversation(self, me: Tenant, other: Tenant) -> None:
        response = await self.http.delete(
            f"/v1/conversations/{me.conversation}", headers=bearer(me.key)
        )
        assert response.status_code == 200 and response.json() == {"deleted_turns": me.turns}
        me.turns = me.chat_reads = me.unredacted = 0

    async def delete_document(self, me: Tenant, other: Tenant) -> None:
        theirs = await self.http.delete(
            f"/v1/documents/{other.document_id}", headers=bearer(me.key)
        )
        assert theirs.status_code == 404, theirs.text
        mine = await self.http.delete(f"/v1/documents/{me.document_id}", headers=bearer(me.key))
        if not me.uploaded:
            assert mine.status_code == 404, mine.text
        else:
            assert mine.status_code == 200, mine.text
            deleted = mine.json()
            assert deleted["already_deleted"] is not me.document_alive
            # Exactly this tenant's answers that read it: never the other tenant's.
            assert deleted["answers_forgotten"] == len(me.ask_reads) + me.chat_reads, deleted
            assert deleted["turns_redacted"] == me.unredacted, deleted
            me.forgotten |= set(me.ask_reads)
            me.unredacted = 0
        me.document_alive = False

    def check_the_record(self, tenant: Tenant) -> None:
        """Postgres holds exactly what this tenant left, whatever the other did."""
        status = self.database.scalar(
            "SELECT status FROM documents WHERE tenant = %s AND id = %s",
            tenant.name,
            tenant.document_id,
        )
        assert (status == "active") == tenant.document_alive, (tenant.name, status)
        turns = self.database.scalar(
            "SELECT count(*) FROM turns WHERE conversation_id = %s",
            ids.conversation_id(tenant.name, tenant.conversation),
        )
        assert turns == tenant.turns, (tenant.name, turns)
        for trace in tenant.traces:
            owner = self.database.scalar(
                "SELECT tenant FROM answer_costs WHERE trace_id = %s", trace
            )
            assert owner == tenant.name, (trace, owner)


@pytest.mark.parametrize("kind", ["collide", "same"])
@settings(
    max_examples=2,  # each example is over twenty real requests; a failure still shrinks
    deadline=timedelta(minutes=5),
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data(), plan=plans)
async def test_two_tenants_never_read_change_or_delete_each_others_data(
    served: tuple[httpx.AsyncClient, RagClient],
    module_database: Database,
    kind: str,
    data: st.DataObject,
    plan: list[tuple[int, str]],
) -> None:
    http, rag = served
    a, b, conversation_a, conversation_b = data.draw(tenant_pairs(kind), label="names")
    tenants = [
        Tenant(a, conversation_a, f"zyx{uuid.uuid4().hex[:8]}"),
        Tenant(b, conversation_b, f"wvu{uuid.uuid4().hex[:8]}"),
    ]
    for tenant in tenants:
        tenant.key = keys.create_key(module_database.sessions, tenant.name)[1]
    run = Run(http, rag, module_database)
    # Both start with a document: searches and answers then have something to leak.
    steps = [(0, "upload"), (1, "upload"), *plan, (0, "ask"), (1, "chat")]
    for who, operation in steps:
        await run.do(tenants[who], tenants[1 - who], operation)
    for tenant in tenants:
        run.check_the_record(tenant)
