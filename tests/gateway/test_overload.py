"""Overload and timeouts on a real uvicorn server over the real stack: a client that leaves a
plain answer or a conversation turn stops generation, a model at its bound answers 429 with
Retry-After and starts nothing, and a request past the access timeout is cancelled, its
generation too."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from gateway.app import create_app
from ragkit import policies
from ragkit.embedding import Embedder
from ragkit.ids import conversation_workflow_id
from ragkit.llm.engine import VllmEngine
from ragkit.store import keys, model_alias
from tests.conftest import Database, answer_of
from tests.gateway.test_streaming import ESSAY, bearer, closed_status, on_uvicorn, served, sse
from tests.workflows.test_answer import QUESTION, answering, ingest_sample
from tests.workflows.test_ingest import save_history
from workers import llm as llm_worker

pytestmark = [pytest.mark.integration, pytest.mark.slow]

T = TypeVar("T")
LONG = 256  # tokens: an answer that runs for seconds, so leaving or timing out cuts it short


@pytest.fixture(scope="module")
async def overload_data(
    client: Client,
    module_database: Database,
    embedder: Embedder,
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    return await ingest_sample(client, module_database, embedder, tmp_path_factory)


async def generating(engine: VllmEngine, within: float = 60) -> None:
    """Until the engine has a request running."""
    deadline = time.monotonic() + within
    while engine.running_requests() == 0:
        assert time.monotonic() < deadline, "generation never started"
        await asyncio.sleep(0.01)


async def stopped_after(engine: VllmEngine, since: float, within: float = 5) -> float:
    """Seconds from `since` until the engine has nothing running."""
    while engine.running_requests() > 0:
        assert time.monotonic() - since < within, "the engine kept generating"
        await asyncio.sleep(0.01)
    return time.monotonic() - since


async def leave(posting: asyncio.Task[Any], engine: VllmEngine) -> float:
    """Cancel a plain request in flight (its connection closes); seconds until the engine
    stopped."""
    await generating(engine)
    posting.cancel()
    left_at = time.monotonic()
    with contextlib.suppress(asyncio.CancelledError):
        await posting
    return await stopped_after(engine, left_at)


async def never_started(client: Client, workflow_id: str) -> bool:
    try:
        await client.get_workflow_handle(workflow_id).describe()
    except RPCError as exc:
        assert exc.status == RPCStatusCode.NOT_FOUND, exc
        return True
    return False


async def test_a_client_leaving_a_plain_answer_stops_generation_within_a_second(
    client: Client,
    module_database: Database,
    embedder: Embedder,
    engine: VllmEngine,
    overload_data: Path,
) -> None:
    _, key = keys.create_key(module_database.sessions, "t")
    bodies = {
        "/v1/ask": {"question": ESSAY, "max_answer_tokens": LONG},
        "/v1/chat/completions": {
            "model": "durable-rag",
            "messages": [{"role": "user", "content": ESSAY}],
            "max_tokens": LONG,
        },
    }
    stopped: dict[str, float] = {}
    async with served(client, module_database, embedder, engine, overload_data) as (http, _):
        for path, body in bodies.items():
            request_id = f"leave-plain-{uuid.uuid4().hex[:10]}"
            headers = bearer(key) | {"X-Request-ID": request_id}
            stopped[path] = await leave(
                asyncio.create_task(http.post(path, json=body, headers=headers)), engine
            )
            assert await closed_status(client, answer_of("t", request_id)) == "CANCELED", path
    print({path: f"engine stopped {s:.3f} s after the client left" for path, s in stopped.items()})
    assert all(s < 1.0 for s in stopped.values()), stopped


async def test_a_client_leaving_a_conversation_turn_stops_it_and_the_record_stays_consistent(
    client: Client,
    module_database: Database,
    embedder: Embedder,
    engine: VllmEngine,
    overload_data: Path,
) -> None:
    _, key = keys.create_key(module_database.sessions, "t")
    conversation = f"c-{uuid.uuid4().hex[:8]}"
    messages = f"/v1/conversations/{conversation}/messages"
    turn = f"answer-{conversation_workflow_id('t', conversation)}"
    async with served(client, module_database, embedder, engine, overload_data) as (http, _):
        # Streamed: leave at the first token.
        streamed = {"message": ESSAY, "message_id": "m-0", "max_answer_tokens": LONG}
        async with http.stream(
            "POST", f"{messages}/stream", json=streamed, headers=bearer(key)
        ) as response:
            async for event, _ in sse(response):
                if event == "token":
                    break
            assert engine.running_requests() > 0, "the first token came, generation is on"
        stream_stopped = await stopped_after(engine, time.monotonic())
        assert await closed_status(client, f"{turn}-0") == "CANCELED"

        # Plain: leave while it generates.
        plain = {"message": ESSAY, "message_id": "m-1", "max_answer_tokens": LONG}
        plain_stopped = await leave(
            asyncio.create_task(http.post(messages, json=plain, headers=bearer(key))), engine
        )
        assert await closed_status(client, f"{turn}-1") == "CANCELED"

        # The same message again is refused (it stays cancelled); the conversation goes on.
        again = await http.post(messages, json=plain, headers=bearer(key))
        assert again.status_code == 409 and "cancelled" in again.text, again.text
        reply = await http.post(
            messages, json={"message": QUESTION, "max_answer_tokens": 8}, headers=bearer(key)
        )
        assert reply.status_code == 200, reply.text
        stored = (await http.get(f"/v1/conversations/{conversation}", headers=bearer(key))).json()
        await save_history(
            client, conversation_workflow_id("t", conversation), "conversation-cancelled-turns"
        )
    # Each user turn is stored; the cancelled ones have no assistant turn.
    assert [(t["role"], t["text"]) for t in stored["turns"]] == [
        ("user", ESSAY),
        ("user", ESSAY),
        ("user", QUESTION),
        ("assistant", reply.json()["answer"]["answer"]),
    ]
    print(
        f"engine stopped {stream_stopped:.3f} s after a conversation stream's client left, "
        f"{plain_stopped:.3f} s after a plain message's"
    )
    assert stream_stopped < 1.0 and plain_stopped < 1.0, (stream_stopped, plain_stopped)


async def test_a_model_at_its_bound_answers_429_with_retry_after_and_starts_no_workflow(
    client: Client,
    module_database: Database,
    embedder: Embedder,
    engine: VllmEngine,
    overload_data: Path,
) -> None:
    """A batch of 1, a 20 s target and 1 s of fixed work a request: a long streamed answer
    holds 26.6 s of work (1 s + 256 steps of 0.1 s), so every live endpoint is refused at once,
    with the seconds until enough of it has drained, and starts nothing; once the holder
    leaves, answers go in."""
    _, key = keys.create_key(module_database.sessions, "t")
    batch = uuid.uuid4().hex[:8]
    conversation = f"c-{batch}"
    ask = {"question": QUESTION, "max_answer_tokens": 8}
    chat = {"model": "durable-rag", "messages": [{"role": "user", "content": QUESTION}]}
    message = {"message": QUESTION, "max_answer_tokens": 8}
    # 26.6 s ahead + its own 1.8 s (8 tokens) is 28.4 s: 8.4 s past the target, so 9 s; an
    # OpenAI request that names no max_tokens may answer in 256 (26.6 s of work). Each refusal
    # after the first also waits for the work of those refused before it, told to come back
    # sooner: 1.8, 3.6, 30.2, 56.8 and 58.6 s.
    refused: list[tuple[str, dict[str, Any], str]] = [
        ("/v1/ask", ask, "9"),
        ("/v1/ask/stream", ask, "11"),
        ("/v1/chat/completions", chat, "37"),
        ("/v1/chat/completions", chat | {"stream": True}, "64"),
        (f"/v1/conversations/{conversation}/messages", message, "66"),
        (f"/v1/conversations/{conversation}/messages/stream", message, "67"),
    ]
    async with served(
        client,
        module_database,
        embedder,
        engine,
        overload_data,
        llm_max_num_seqs=1,
        llm_p99_target_seconds=20,
        llm_request_seconds=1,
        llm_prefill_seconds_per_token=0,
        llm_per_token_seconds=0.1,
    ) as (http, rag):
        holding = f"hold-{batch}"
        async with http.stream(
            "POST",
            "/v1/ask/stream",
            json={"question": ESSAY, "max_answer_tokens": LONG},
            headers=bearer(key) | {"X-Request-ID": holding},
        ) as holder:
            assert holder.status_code == 200, await holder.aread()
            # Referenced until the block ends: an abandoned event iterator is finalized, and
            # that closes the connection (the holder would have left).
            held = sse(holder)
            async for event, _ in held:
                if event == "token":
                    break
            started = time.monotonic()
            for n, (path, body, retry) in enumerate(refused):
                request_id = f"over-{batch}-{n}"
                headers = bearer(key) | {"X-Request-ID": request_id}
                response = await http.post(path, json=body, headers=headers)
                assert response.status_code == 429, (path, response.text)
                assert response.headers["Retry-After"] == retry, path
                timing = response.headers["Server-Timing"]
                assert re.fullmatch(r"body;dur=[0-9.]+, admit;dur=[0-9.]+", timing), path
                detail = response.json()
                message_text = (
                    detail["error"]["message"] if "chat/completions" in path else detail["detail"]
                )
                assert "1 live request(s)" in message_text and "26.6 s of work" in message_text
                assert f"past the 20 s latency target; retry after {retry} s" in message_text
                assert await never_started(client, answer_of("t", request_id)), path
            refusing = time.monotonic() - started
            exposition = (await http.get("/metrics")).text
            assert engine.running_requests() > 0, "the holder's answer is still generating"
            await held.aclose()
        assert await never_started(client, conversation_workflow_id("t", conversation))
        # The holder left (its run is cancelled once its slot is released): room again.
        assert await closed_status(client, answer_of("t", holding)) == "CANCELED"
        answered = await http.post("/v1/ask", json=ask, headers=bearer(key))
        assert answered.status_code == 200, answered.text
    model = rag.settings.llm.name
    for route, count in (
        ("/v1/ask", 1),
        ("/v1/ask/stream", 1),
        ("/v1/chat/completions", 2),
        ("/v1/conversations/{conversation_id}/messages", 1),
        ("/v1/conversations/{conversation_id}/messages/stream", 1),
    ):
        line = f'durable_rag_gateway_rejected_total{{model="{model}",route="{route}"}} {count}.0'
        assert line in exposition, line
    print(f"6 refusals in {refusing * 1000:.0f} ms")


async def timed_out(engine: VllmEngine, request: Awaitable[T]) -> tuple[T, float, float]:
    """The outcome of a request that must time out, the seconds it took, and the seconds from
    then until the engine stopped; the engine must have been generating for it meanwhile."""
    started = time.monotonic()
    posting = asyncio.ensure_future(request)
    while engine.running_requests() == 0:
        assert not posting.done(), "the request ended before its generation started"
        await asyncio.sleep(0.01)
    outcome = await posting
    ended = time.monotonic()
    return outcome, ended - started, await stopped_after(engine, ended)


async def stream_errors(http: httpx.AsyncClient, route: str, status: str) -> float:
    """durable_rag_http_stream_errors_total for `route` and `status`, as /metrics serves it."""
    text = (await http.get("/metrics")).text
    found = re.search(
        rf'^durable_rag_http_stream_errors_total\{{route="{re.escape(route)}",status="{status}"\}} '
        r"([0-9.e+-]+)$",
        text,
        re.M,
    )
    return float(found.group(1)) if found else 0.0


async def test_a_timed_out_request_cancels_its_workflow_and_the_engine_stops(
    client: Client,
    module_database: Database,
    embedder: Embedder,
    engine: VllmEngine,
    overload_data: Path,
) -> None:
    """The access timeout is 1.5x the measured inference P99 (2 s here): 3 s."""
    _, key = keys.create_key(module_database.sessions, "t")
    conversation = f"c-{uuid.uuid4().hex[:8]}"
    request_id = f"slow-{uuid.uuid4().hex[:10]}"
    stream_id = f"slow-stream-{uuid.uuid4().hex[:10]}"
    async with served(
        client, module_database, embedder, engine, overload_data, llm_inference_p99_seconds=2
    ) as (http, rag):
        assert rag.settings.access_timeout_seconds == 3
        response, waited, ask_stopped = await timed_out(
            engine,
            http.post(
                "/v1/ask",
                json={"question": ESSAY, "max_answer_tokens": LONG},
                headers=bearer(key) | {"X-Request-ID": request_id},
            ),
        )
        assert response.status_code == 504, response.text
        assert "no answer within 3 s" in response.json()["detail"]
        assert await closed_status(client, answer_of("t", request_id)) == "CANCELED"

        async def streamed() -> list[tuple[str, str]]:
            async with http.stream(
                "POST",
                "/v1/ask/stream",
                json={"question": ESSAY, "max_answer_tokens": LONG},
                headers=bearer(key) | {"X-Request-ID": stream_id},
            ) as events:
                return [pair async for pair in sse(events)]

        failed_streams = await stream_errors(http, "/v1/ask/stream", "504")
        events, _, stream_stopped = await timed_out(engine, streamed())
        assert events[-1][0] == "error" and json.loads(events[-1][1])["status"] == 504, events
        # Its response was a 200: the error SLI sees the failure through this counter alone.
        assert await stream_errors(http, "/v1/ask/stream", "504") == failed_streams + 1
        assert await closed_status(client, answer_of("t", stream_id)) == "CANCELED"

        turn, _, turn_stopped = await timed_out(
            engine,
            http.post(
                f"/v1/conversations/{conversation}/messages",
                json={"message": ESSAY, "max_answer_tokens": LONG},
                headers=bearer(key),
            ),
        )
        assert turn.status_code == 504 and "the turn was cancelled" in turn.text, turn.text
        assert (
            await closed_status(client, f"answer-{conversation_workflow_id('t', conversation)}-0")
            == "CANCELED"
        )
        exposition = (await http.get("/metrics")).text
    for route in ("answer", "answer_stream", "turn"):
        assert f'durable_rag_http_timeouts_total{{route="{route}"}}' in exposition, route
    print(
        f"504 after {waited:.2f} s; engine stopped {ask_stopped:.3f} s after the 504 (ask), "
        f"{stream_stopped:.3f} s after the stream's error event, {turn_stopped:.3f} s (turn)"
    )
    assert 3 <= waited < 5, waited
    assert max(ask_stopped, stream_stopped, turn_stopped) < 1.0


async def test_a_request_past_the_start_window_waits_its_turn_or_gets_429_and_starts_nothing(
    client: Client,
    module_database: Database,
    embedder: Embedder,
    engine: VllmEngine,
    overload_data: Path,
) -> None:
    """A start window of one (ragkit/admission.py): while another request holds the place
    (admitted, no token yet), a streamed answer waits in line. Past the access timeout it is
    refused with 429 and Retry-After, and nothing is started; once the place is given up, the
    one waiting streams. A plain answer waits the same way, and gives up its place at its
    first token; one that named no model starts on the default model of its start."""
    _, key = keys.create_key(module_database.sessions, "t")
    batch = uuid.uuid4().hex[:8]
    ask = {"question": QUESTION, "max_answer_tokens": 8}
    async with answering(
        client,
        module_database,
        embedder,
        engine,
        overload_data,
        llm_start_window=1,
        gateway_request_timeout_seconds=8,
    ) as (_, rag, _served):
        model = await rag.default_model()  # what an answer that names no model is admitted for
        app = create_app(rag.settings, rag)
        async with on_uvicorn(app) as http:
            admission = app.state.admission
            holder = admission.admit(model, 8)
            await holder.take_turn()

            refused_id = f"turnless-{batch}"
            headers = bearer(key) | {"X-Request-ID": refused_id}
            began = time.monotonic()
            refused = await http.post("/v1/ask/stream", json=ask, headers=headers)
            assert refused.status_code == 429, refused.text
            assert time.monotonic() - began >= 8
            # What the work ahead (the holder's, under a second) takes to drain, at least 1 s.
            assert refused.headers["Retry-After"] == "1"
            assert "no turn to start a generation" in refused.json()["detail"]
            assert await never_started(client, answer_of("t", refused_id))
            assert admission.in_flight(model) == 1 and admission.waiting(model) == 0

            async def stream() -> list[str]:
                headers = bearer(key) | {"X-Request-ID": f"waited-{batch}"}
                async with http.stream("POST", "/v1/ask/stream", json=ask, headers=headers) as r:
                    assert r.status_code == 200, await r.aread()
                    return [event async for event, _ in sse(r)]

            waiting = asyncio.create_task(stream())
            await until(lambda: admission.waiting(model) == 1)
            holder.release()  # its first token, or its end: the place goes to the next
            events = await waiting
            assert events[0] == "start" and "token" in events and events[-1] == "answer", events
            assert admission.in_window(model) == 0 and admission.in_flight(model) == 0

            # A plain answer waits in line too, and gives its place up at its first token, as a
            # stream does: a burst's plain requests start a batch at a time.
            await holder.take_turn()
            headers = bearer(key) | {"X-Request-ID": f"plain-{batch}"}
            long = {"question": QUESTION, "max_answer_tokens": 96}
            plain = asyncio.create_task(http.post("/v1/ask", json=long, headers=headers))
            await until(lambda: admission.waiting(model) == 1)
            holder.release()
            await until(lambda: admission.in_window(model) == 1)  # its turn: it starts
            # Its first token: the place is free while it still generates.
            await until(lambda: admission.in_window(model) == 0)
            assert admission.in_flight(model) == 1 and not plain.done()
            answered = await plain
            assert answered.status_code == 200, answered.text
            assert "turn;dur=" in answered.headers["server-timing"]
            assert admission.in_window(model) == 0 and admission.in_flight(model) == 0
            assert app.state.token_listener.subscribers == 0  # its first-token watch is gone

            # A request that names no model and waits in line through a model swap goes to the
            # model new answers go to when it starts, not to the one it was admitted for: the
            # swap drains the old model's worker only of the answers started before it.
            new = f"new-{batch}"
            worker = llm_worker.build_worker(
                client, rag.settings, engine, task_queue=policies.llm_queue(new)
            )
            async with worker:
                await holder.take_turn()
                headers = bearer(key) | {"X-Request-ID": f"swapped-{batch}"}
                swapped = asyncio.create_task(http.post("/v1/ask", json=ask, headers=headers))
                await until(lambda: admission.waiting(model) == 1)
                model_alias.activate(module_database.sessions, new, model)
                assert await rag.default_model(fresh=True) == new
                holder.release()
                answered = await swapped
            assert answered.status_code == 200, answered.text
            assert answered.json()["model"] == new and answered.json()["route"] == "primary"
            model_alias.activate(module_database.sessions, model, model)


async def until(condition: Callable[[], bool], within: float = 30) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "never came true"
        await asyncio.sleep(0.01)
