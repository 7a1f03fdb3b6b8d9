"""The HTTP gateway against the real stack: auth, tenants, limits, answers and conversations."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client, WorkflowQueryFailedError, WorkflowUpdateFailedError
from temporalio.service import RPCError

from durable_rag.client import RagClient
from gateway.app import create_app
from ragkit.embedding import Embedder
from ragkit.ids import conversation_workflow_id
from ragkit.llm.engine import LLMEngine
from ragkit.store import keys, model_alias
from schemas.conversation import ConversationKey, TurnToCancel
from tests.conftest import Database, answer_of
from tests.workflows.test_answer import EXPECTED, QUESTION, answering, ingest_sample
from workflows.conversation import ConversationWorkflow

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
async def gateway_data(
    client: Client,
    module_database: Database,
    embedder: Embedder,
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    return await ingest_sample(client, module_database, embedder, tmp_path_factory)


@asynccontextmanager
async def gateway(
    client: Client,
    database: Database,
    embedder: Embedder,
    llm_engine: LLMEngine,
    data_dir: Path,
    **overrides: object,
) -> AsyncIterator[tuple[httpx.AsyncClient, RagClient]]:
    async with answering(client, database, embedder, llm_engine, data_dir, **overrides) as (
        _,
        rag,
        _model,
    ):
        app = create_app(rag.settings, rag)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://gateway", timeout=120
        ) as http:
            yield http, rag


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def never_started(client: Client, workflow_id: str) -> bool:
    try:
        await client.get_workflow_handle(workflow_id).describe()
    except RPCError:
        return True
    return False


async def test_health_needs_no_key_and_everything_else_does(
    client: Client,
    module_database: Database,
    embedder: Embedder,
    llm_engine: LLMEngine,
    gateway_data: Path,
) -> None:
    _, key = keys.create_key(module_database.sessions, "t", "test")
    info, revoked = keys.create_key(module_database.sessions, "t", "old")
    assert keys.revoke_key(module_database.sessions, info.prefix) is not None
    async with gateway(client, module_database, embedder, llm_engine, gateway_data) as (http, _):
        assert (await http.get("/healthz")).status_code == 200
        ready = await until_ready(http)
        assert ready.json()["ready"] is True
        for headers in ({}, bearer("drk_not-a-key"), bearer(revoked), {"X-API-Key": "nope"}):
            response = await http.post("/v1/ask", json={"question": QUESTION}, headers=headers)
            assert response.status_code == 401, (headers, response.text)
            assert (await http.get("/v1/conversations/x", headers=headers)).status_code == 401
        assert (await http.get("/v1/conversations/x", headers=bearer(key))).status_code == 404
        openapi = (await http.get("/openapi.json")).json()
        assert "/v1/ask" in openapi["paths"]


async def until_ready(http: httpx.AsyncClient) -> httpx.Response:
    """A worker shows as a poller once its first poll reaches the server: ready soon after."""
    deadline = time.monotonic() + 30
    while (ready := await http.get("/readyz")).status_code != 200:
        assert time.monotonic() < deadline, ready.text
        await asyncio.sleep(0.5)
    return ready


async def test_readyz_is_false_until_every_worker_polls(
    client: Client,
    module_database: Database,
    embedder: Embedder,
    llm_engine: LLMEngine,
    gateway_data: Path,
) -> None:
    async with gateway(client, module_database, embedder, llm_engine, gateway_data) as (_, rag):
        settings = rag.settings.model_copy(update={"llm_served_name": "not-loaded-yet"})
        app = create_app(settings, RagClient(rag.client, settings))
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://gateway"
        ) as http:
            response = await http.get("/readyz")
    assert response.status_code == 503
    checks, builds = response.json()["checks"], response.json()["builds"]
    assert checks["llm worker"] != "ok" and checks["postgres"] == "ok", checks
    # Each worker check says which builds poll its queue: this test's workers are unversioned.
    assert builds["llm worker"] == [] and builds["orchestrator worker"] == ["unversioned"]


async def test_readyz_follows_the_active_model_after_a_swap(
    client: Client,
    module_database: Database,
    embedder: Embedder,
    llm_engine: LLMEngine,
    gateway_data: Path,
) -> None:
    """A swap points the `default` alias elsewhere: readiness asks for that model's worker."""
    async with gateway(client, module_database, embedder, llm_engine, gateway_data) as (http, rag):
        served = rag.settings.llm.name
        await until_ready(http)
        model_alias.activate(module_database.sessions, "swapped-in", served)
        try:
            response = await http.get("/readyz")
            assert response.status_code == 503
            assert response.json()["checks"]["llm worker"] == "nobody polls llm-swapped-in"
        finally:
            model_alias.activate(module_database.sessions, served, served)
        await until_ready(http)


async def test_bad_input_gets_a_precise_4xx_and_starts_nothing(
    client: Client,
    module_database: Database,
    embedder: Embedder,
    llm_engine: LLMEngine,
    gateway_data: Path,
) -> None:
    _, key = keys.create_key(module_database.sessions, "t")
    async with gateway(client, module_database, embedder, llm_engine, gateway_data) as (http, _):
        bodies: list[tuple[object, int, str]] = [
            ({}, 422, "question"),
            ({"question": ""}, 422, "question"),
            ({"question": "x", "tenant": "u"}, 422, "tenant"),  # the key decides the tenant
            ({"question": "x", "top_k": 0}, 422, "top_k"),
            ({"question": "x", "max_answer_tokens": 100_000}, 422, "max_answer_tokens"),
            ({"question": "x", "document_ids": ["not-a-uuid"]}, 422, "document_ids"),
            ({"question": "x" * 9_000}, 422, "question"),
            ({"question": "x" * 2_000_000}, 413, "limit"),
        ]
        for body, status, word in bodies:
            request_id = f"bad-{uuid.uuid4().hex[:8]}"
            response = await http.post(
                "/v1/ask", json=body, headers=bearer(key) | {"X-Request-ID": request_id}
            )
            assert response.status_code == status, (body, response.text[:300])
            assert word in response.text
            assert await never_started(client, answer_of("t", request_id))
        response = await http.post(
            "/v1/ask",
            content=b"{not json",
            headers=bearer(key) | {"content-type": "application/json"},
        )
        assert response.status_code == 422
        response = await http.post(
            "/v1/conversations/bad id!/messages", json={"message": "hi"}, headers=bearer(key)
        )
        assert response.status_code == 422
        response = await http.post(
            "/v1/conversations/ok/messages", json={"message": ""}, headers=bearer(key)
        )
        assert response.status_code == 422
        assert await never_started(client, conversation_workflow_id("t", "ok"))


async def test_answers_and_conversations_stay_within_the_callers_tenant(
    client: Client,
    module_database: Database,
    embedder: Embedder,
    llm_engine: LLMEngine,
    gateway_data: Path,
) -> None:
    _, key_t = keys.create_key(module_database.sessions, "t")
    _, key_u = keys.create_key(module_database.sessions, "u")
    request_id = f"req-{uuid.uuid4().hex[:12]}"
    conversation = f"c-{uuid.uuid4().hex[:8]}"
    async with gateway(client, module_database, embedder, llm_engine, gateway_data) as (http, _):
        response = await http.post(
            "/v1/ask",
            json={"question": QUESTION, "max_answer_tokens": 32, "top_k": 2},
            headers=bearer(key_t) | {"X-Request-ID": request_id},
        )
        assert response.status_code == 200, response.text
        assert response.headers["X-Request-ID"] == request_id
        answer = response.json()
        assert answer["trace_id"] == answer_of("t", request_id)
        assert any(Path(c["source"]).name == EXPECTED for c in answer["citations"])

        run = await http.get(f"/v1/runs/{answer_of('t', request_id)}", headers=bearer(key_t))
        assert run.status_code == 200 and run.json()["status"] == "completed", run.text
        assert (
            await http.get(f"/v1/runs/{answer_of('t', request_id)}", headers=bearer(key_u))
        ).status_code == 404

        # A question the model's context cannot hold fails in the workflow: still the caller's
        # fault, so 422 with the cause, not 5xx.
        too_long = await http.post(
            "/v1/ask", json={"question": "word " * 1_500}, headers=bearer(key_t)
        )
        assert too_long.status_code == 422 and "PromptTooLong" in too_long.text, too_long.text

        # Tenant u has no documents: nothing of tenant t is retrieved or cited.
        other = await http.post(
            "/v1/ask", json={"question": QUESTION, "max_answer_tokens": 16}, headers=bearer(key_u)
        )
        assert other.status_code == 200, other.text
        assert other.json()["citations"] == [] and other.json()["context"] == []

        sent = await http.post(
            f"/v1/conversations/{conversation}/messages",
            json={"message": QUESTION, "max_answer_tokens": 16, "top_k": 2},
            headers=bearer(key_t),
        )
        assert sent.status_code == 200, sent.text
        assert sent.json()["turn"] == 1
        mine = await http.get(f"/v1/conversations/{conversation}", headers=bearer(key_t))
        assert mine.status_code == 200 and len(mine.json()["turns"]) == 2
        theirs = await http.get(f"/v1/conversations/{conversation}", headers=bearer(key_u))
        assert theirs.status_code == 404
        deleted = await http.delete(f"/v1/conversations/{conversation}", headers=bearer(key_u))
        assert deleted.status_code == 200 and deleted.json() == {"deleted_turns": 0}
        still = await http.get(f"/v1/conversations/{conversation}", headers=bearer(key_t))
        assert still.status_code == 200 and len(still.json()["turns"]) == 2


async def test_tenants_whose_ids_once_collided_stay_apart_and_a_request_id_is_only_a_key(
    client: Client,
    module_database: Database,
    embedder: Embedder,
    llm_engine: LLMEngine,
    gateway_data: Path,
) -> None:
    """The holes ids left between tenants, one regression each: `acme` + `corp-x` and
    `acme-corp` + `x` were one conversation workflow (the second tenant's messages refused, and
    its delete took the first's conversation); a caller's X-Request-ID was the trace id, so
    another tenant could reuse it and take over the run's cost row, transcript, run status and
    feedback; and a duplicate id while the first run was open was a 500."""
    _, key_a = keys.create_key(module_database.sessions, "acme")
    _, key_b = keys.create_key(module_database.sessions, "acme-corp")
    suffix = uuid.uuid4().hex[:8]
    message = {"message": QUESTION, "max_answer_tokens": 8, "top_k": 1}
    a_conversation, b_conversation = f"corp-{suffix}", suffix
    async with gateway(client, module_database, embedder, llm_engine, gateway_data) as (http, _):
        # 1. Two conversations, two workflows: both tenants are served.
        for conversation, key in ((a_conversation, key_a), (b_conversation, key_b)):
            sent = await http.post(
                f"/v1/conversations/{conversation}/messages", json=message, headers=bearer(key)
            )
            assert sent.status_code == 200, sent.text
        a_workflow = conversation_workflow_id("acme", a_conversation)
        assert a_workflow != conversation_workflow_id("acme-corp", b_conversation)
        deleted = await http.delete(f"/v1/conversations/{b_conversation}", headers=bearer(key_b))
        assert deleted.status_code == 200 and deleted.json() == {"deleted_turns": 2}
        mine = await http.get(f"/v1/conversations/{a_conversation}", headers=bearer(key_a))
        assert mine.status_code == 200 and len(mine.json()["turns"]) == 2, mine.text

        # Straight through Temporal, the handlers check the tenant too.
        handle = client.get_workflow_handle(a_workflow)
        theirs = ConversationKey(tenant="acme-corp", conversation_id=b_conversation)
        with pytest.raises(WorkflowUpdateFailedError):
            await handle.execute_update(ConversationWorkflow.delete, theirs)
        with pytest.raises(WorkflowUpdateFailedError):
            await handle.execute_update("delete")  # naming no conversation
        with pytest.raises(WorkflowQueryFailedError):
            await handle.query(ConversationWorkflow.state, theirs)
        own = ConversationKey(tenant="acme", conversation_id=a_conversation)
        assert (await handle.query(ConversationWorkflow.state, own)).next_ordinal == 2
        await handle.signal(  # names another conversation: ignored
            ConversationWorkflow.cancel_turn,
            TurnToCancel(tenant="acme-corp", conversation_id=b_conversation, message_id="m"),
        )
        mine = await http.get(f"/v1/conversations/{a_conversation}", headers=bearer(key_a))
        assert len(mine.json()["turns"]) == 2

        # 2. A request id is the caller's key within its tenant; the trace id is the server's.
        request_id = f"same-{suffix}"
        body = {"question": QUESTION, "max_answer_tokens": 8, "top_k": 1}

        async def ask(key: str, rid: str, json: dict[str, object] = body) -> httpx.Response:
            return await http.post(
                "/v1/ask", json=json, headers=bearer(key) | {"X-Request-ID": rid}
            )

        first = await ask(key_a, request_id)
        assert first.status_code == 200, first.text
        trace = first.json()["trace_id"]
        assert request_id not in trace and trace == answer_of("acme", request_id)
        retried = await ask(key_a, request_id)  # a client's retry: the same run's answer
        assert retried.status_code == 200 and retried.json()["trace_id"] == trace
        assert retried.json()["answer"] == first.json()["answer"]
        changed = await ask(key_a, request_id, {**body, "question": "Something else?"})
        assert changed.status_code == 409 and "X-Request-ID" in changed.text, changed.text
        other = await ask(key_b, request_id)  # the same id from another tenant: its own run
        assert other.status_code == 200 and other.json()["trace_id"] != trace
        row = "SELECT tenant FROM answer_costs WHERE trace_id = %s"
        assert module_database.scalar(row, trace) == "acme"
        assert (await http.get(f"/v1/runs/{trace}", headers=bearer(key_b))).status_code == 404
        vote = await http.post(
            "/v1/feedback", json={"trace_id": trace, "rating": "down"}, headers=bearer(key_b)
        )
        assert vote.status_code == 404

        # 3. The same id twice at once: one run, both answered (never a 500).
        twice = await asyncio.gather(*(ask(key_a, f"twice-{suffix}") for _ in range(2)))
        assert [r.status_code for r in twice] == [200, 200], [r.text for r in twice]
        assert twice[0].json()["trace_id"] == twice[1].json()["trace_id"]
