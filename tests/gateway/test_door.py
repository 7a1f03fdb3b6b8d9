"""The door (gateway/door.py) in front of a small Starlette app: a live request past capacity is
refused before the app runs, an admitted one reaches it with its body and ticket, and its ticket
is released however it ends. The real gateway's refusals, on the real stack, are
tests/gateway/test_overload.py's."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from prometheus_client import REGISTRY
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gateway import door
from gateway.door import Cost, Door, LiveRoute
from gateway.middleware import RequestId
from gateway.routers import answers, conversations, openai
from ragkit.admission import Admission, Costs, Limits, Overloaded
from ragkit.retrieval import estimate_tokens
from ragkit.settings import Settings
from schemas.gateway import AskBody, ChatCompletionBody, MessageBody

MODEL = Settings().llm.name  # a configured model: the metrics label it by name


def admission(target: float = 10, window: int = 0) -> Admission:
    """A request of 8 answer tokens costs 1 s of work and 1.8 s of latency."""
    costs = Costs(
        request_seconds=1, prefill_seconds_per_token=0, per_token_seconds=0.1, max_num_seqs=8
    )
    limits = Limits(costs=costs, target_seconds=target, max_answer_tokens=256, start_window=window)
    return Admission(limits)


class Inner:
    """The app behind the door: records what reached it."""

    def __init__(self, gate: Admission, fail: bool = False) -> None:
        self.calls: list[dict[str, Any]] = []
        self.fail = fail
        self.app = Starlette(routes=[Route("/v1/ask", self.ask, methods=["POST"])])
        self.app.state.settings = Settings()
        self.app.state.admission = gate
        self.app.state.rag = None  # every request here names its model

    async def ask(self, request: Request) -> JSONResponse:
        ticket = getattr(request.state, "ticket", None)
        self.calls.append(
            {
                "body": await request.json(),
                "in_flight": request.app.state.admission.in_flight(MODEL),
                "ticket": ticket,
                "gauge": backlog_gauge(),
            }
        )
        if self.fail:
            raise RuntimeError("the endpoint failed")
        return JSONResponse({"ok": True})


def backlog_gauge() -> float | None:
    return REGISTRY.get_sample_value("durable_rag_gateway_backlog_seconds", {"model": MODEL})


def client(inner: Inner) -> httpx.AsyncClient:
    route = LiveRoute("/v1/ask", AskBody, answers.cost)
    transport = httpx.ASGITransport(app=Door(inner.app, [route]), raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://door")


ASK = {"question": "What is X?", "max_answer_tokens": 8, "model": MODEL}


async def test_an_admitted_request_reaches_the_app_with_its_body_and_ticket_released_after() -> (
    None
):
    gate = admission()
    inner = Inner(gate)
    async with client(inner) as http:
        response = await http.post("/v1/ask", json=ASK)
    assert response.status_code == 200, response.text
    [call] = inner.calls
    assert call["body"] == ASK  # replayed whole
    assert call["in_flight"] == 1 and call["ticket"] is not None
    assert call["gauge"] == pytest.approx(1.1)  # 1 s + 8 x 0.1 / 8, read at the scrape
    assert gate.in_flight(MODEL) == 0 and gate.backlog(MODEL) == 0
    assert backlog_gauge() == 0


async def test_past_capacity_the_request_is_refused_at_the_door_and_the_app_never_runs() -> None:
    gate = admission(target=10)
    held = [gate.admit(MODEL, 8) for _ in range(8)]  # 1 s + 8 x 0.1 / 8: 1.1 s each
    inner = Inner(gate)
    async with client(inner) as http:
        # No key at all: a refusal comes before the key is looked at.
        response = await http.post("/v1/ask", json=ASK)
    assert response.status_code == 429, response.text
    # 8 x 1.1 s ahead + 1.8 s of its own: 10.6 s, 0.6 s past the target.
    assert response.headers["Retry-After"] == "1"
    assert "past the 10 s latency target" in response.json()["detail"]
    assert inner.calls == []
    assert gate.in_flight(MODEL) == 8 and gate.refused == 1
    for ticket in held:
        ticket.release()


async def test_an_admitted_request_waits_its_turn_at_the_door_before_the_app_runs() -> None:
    """A start window of one, held: the next admitted request waits in line at the door (its
    dependencies, key lookup and workflow start have not run), reaches the app once the place
    is given up, and past the access timeout gets 429 there instead, its ticket released."""
    gate = admission(window=1)
    holder = gate.admit(MODEL, 8)
    await holder.take_turn()
    inner = Inner(gate)
    async with client(inner) as http:
        waiting = asyncio.create_task(http.post("/v1/ask", json=ASK))
        while gate.waiting(MODEL) == 0:
            await asyncio.sleep(0.01)
        assert inner.calls == [] and gate.in_flight(MODEL) == 2
        holder.release()
        response = await waiting
        assert response.status_code == 200, response.text
        assert len(inner.calls) == 1 and gate.in_window(MODEL) == 0

        holder = gate.admit(MODEL, 8)
        await holder.take_turn()
        inner.app.state.settings = Settings(gateway_request_timeout_seconds=0.3)
        response = await http.post("/v1/ask", json=ASK)
    assert response.status_code == 429, response.text
    assert "no turn to start a generation" in response.json()["detail"]
    assert response.headers["Retry-After"] == "2"  # the holder's 1.1 s of work, whole seconds
    assert len(inner.calls) == 1  # the app never ran for it
    assert gate.in_flight(MODEL) == 1 and gate.waiting(MODEL) == 0
    holder.release()


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_a_request_alone_settles_at_once_and_one_of_a_burst_after_its_arrivals() -> None:
    clock = Clock()
    arrivals = door.Arrivals(quiet=0.002, most=0.1, clock=clock)
    alone = arrivals.arrived()
    clock.now += 0.5
    await asyncio.wait_for(arrivals.settled(*alone), 0.001)  # never sleeps: no clock moves it

    # Arrivals 5 ms apart: the first of them waits until `quiet` after the last, however long
    # the burst, up to `most` (times a busy CI machine keeps: its gaps stay under `quiet`).
    loop = asyncio.get_running_loop()
    real = door.Arrivals(quiet=0.05, most=1.0)
    first = real.arrived()
    real.arrived()  # the next one of its burst, at once
    settled = asyncio.create_task(real.settled(*first))
    began = loop.time()
    for _ in range(20):
        await asyncio.sleep(0.005)
        real.arrived()
        assert not settled.done()
    last = loop.time()
    await settled
    assert loop.time() >= last + 0.05 - 1e-3 and loop.time() - began < 1.0
    flood = door.Arrivals(quiet=0.05, most=0.2)
    mine = flood.arrived()
    flood.arrived()
    keep = asyncio.create_task(_arrive_until(flood, 1.0))
    began = loop.time()
    await flood.settled(*mine)
    assert 0.2 - 1e-3 <= loop.time() - began < 0.6  # `most`, not the flood's end
    keep.cancel()


async def _arrive_until(arrivals: door.Arrivals, seconds: float) -> None:
    until = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < until:
        arrivals.arrived()
        await asyncio.sleep(0.005)


async def test_a_bursts_refusals_go_out_before_its_admitted_work_starts() -> None:
    """A burst through the door: the app runs for the admitted requests only after the last
    refusal was sent."""
    gate = admission(target=10)  # room for 8: 8 x 1.1 s ahead + 1.8 s of its own
    inner = Inner(gate)
    sent: list[tuple[str, float]] = []

    async def recorded(scope: Any, receive: Any, send: Any) -> None:
        async def send_noted(message: Any) -> None:
            if message["type"] == "http.response.start":
                sent.append((str(message["status"]), asyncio.get_running_loop().time()))
            await send(message)

        await gated(scope, receive, send_noted)

    gated = Door(inner.app, [LiveRoute("/v1/ask", AskBody, answers.cost)])
    gated.arrivals = door.Arrivals(quiet=0.05)  # a busy CI machine's gaps stay under it
    reached: list[float] = []
    inner.calls = _Noted(reached)
    transport = httpx.ASGITransport(app=recorded, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://door") as http:
        replies = await asyncio.gather(*(http.post("/v1/ask", json=ASK) for _ in range(40)))
    statuses = sorted(r.status_code for r in replies)
    assert statuses.count(200) == 8 and statuses.count(429) == 32
    last_refusal = max(at for status, at in sent if status == "429")
    assert len(reached) == 8 and min(reached) > last_refusal


class _Noted(list):  # type: ignore[type-arg]
    """Inner.calls that also notes when each call reached the app."""

    def __init__(self, reached: list[float]) -> None:
        super().__init__()
        self.reached = reached

    def append(self, item: Any) -> None:
        self.reached.append(asyncio.get_running_loop().time())
        super().append(item)


async def test_a_failing_endpoint_still_gives_its_ticket_back() -> None:
    gate = admission()
    inner = Inner(gate, fail=True)
    async with client(inner) as http:
        response = await http.post("/v1/ask", json=ASK)
    assert response.status_code == 500
    assert len(inner.calls) == 1 and gate.in_flight(MODEL) == 0


@pytest.mark.parametrize(
    "body",
    [b"{not json", json.dumps({"question": ""}).encode(), json.dumps({"model": "M!"}).encode()],
    ids=["not-json", "empty-question", "bad-model"],
)
async def test_a_body_the_door_cannot_read_goes_on_without_a_ticket(body: bytes) -> None:
    gate = admission()
    gate.admit(MODEL, 4096)  # full: a readable body would be refused
    inner = Inner(gate)
    route = LiveRoute("/v1/ask", AskBody, answers.cost)
    # A plain ASGI call: the app reads the body it was replayed, whatever it is.
    seen: list[bytes] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append((await receive())["body"])
        await JSONResponse({"endpoint": True}, 422)(scope, receive, send)

    app.state = inner.app.state  # type: ignore[attr-defined]
    transport = httpx.ASGITransport(app=Door(app, [route]))
    async with httpx.AsyncClient(transport=transport, base_url="http://door") as http:
        response = await http.post("/v1/ask", content=body)
    assert response.status_code == 422 and seen == [body]
    assert gate.refused == 0 and gate.in_flight(MODEL) == 1


def test_the_gateways_live_routes_are_its_answering_endpoints_and_only_those() -> None:
    routes = [*answers.LIVE, *openai.LIVE, *conversations.LIVE]
    guard = Door(None, routes)

    def matched(method: str, path: str) -> str | None:
        found = guard.live({"type": "http", "method": method, "path": path})
        return found.template if found else None

    assert matched("POST", "/v1/ask") == "/v1/ask"
    assert matched("POST", "/v1/ask/stream") == "/v1/ask/stream"
    assert matched("POST", "/v1/chat/completions") == "/v1/chat/completions"
    assert matched("POST", "/v1/conversations/c-1/messages") == conversations.TURN
    assert matched("POST", "/v1/conversations/c-1/messages/stream") == conversations.TURN_STREAM
    assert matched("GET", "/v1/conversations/c-1") is None
    assert matched("POST", "/v1/conversations/a/b/messages") is None
    assert matched("POST", "/v1/documents") is None
    assert matched("GET", "/v1/ask") is None
    # Each is a POST route of its router, under the same template (the metrics' label).
    posts = {
        getattr(r, "path", "")
        for area in (answers, openai, conversations)
        for r in area.router.routes
        if "POST" in getattr(r, "methods", ())
    }
    assert {r.template for r in routes} == posts


def test_costs_are_what_each_endpoint_brings() -> None:
    settings = Settings()
    ask = AskBody(question="one two three four", max_answer_tokens=8)
    assert answers.cost(ask, settings) == Cost(None, 8, estimate_tokens("one two three four"))
    chat = ChatCompletionBody.model_validate(
        {
            "model": "durable-rag",
            "messages": [
                {"role": "user", "content": "earlier question"},
                {"role": "assistant", "content": "earlier answer"},
                {"role": "user", "content": "the question"},
            ],
            "max_tokens": 16,
        }
    )
    brought = sum(
        estimate_tokens(t) for t in ("the question", "earlier question", "earlier answer")
    )
    assert openai.cost(chat, settings) == Cost(None, 16, brought)
    message = MessageBody(message="hello there", max_answer_tokens=32)
    budget = settings.conversation.history_tokens
    assert conversations.cost(message, settings) == Cost(
        None, 32, estimate_tokens("hello there") + budget
    )


def test_the_refusal_speaks_openais_shape_on_its_paths() -> None:
    gate = admission(target=1)
    gate.admit(MODEL, 8)
    with pytest.raises(Overloaded) as refused:
        gate.admit(MODEL, 8)
    exc = refused.value
    plain, chat = door.refusal("/v1/ask", exc), door.refusal("/v1/chat/completions", exc)
    assert json.loads(plain.body)["detail"].startswith("overloaded:")
    assert json.loads(chat.body)["error"]["code"] == 429
    assert plain.headers["retry-after"] == chat.headers["retry-after"] == str(exc.retry_after)


def test_a_burst_of_refusals_is_logged_once_a_second_with_how_many_it_stands_for(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [100.0]
    log = door.RefusalLog(every=1.0, clock=lambda: now[0])
    gate = admission(target=1)
    gate.admit(MODEL, 8)
    with pytest.raises(Overloaded) as refused:
        gate.admit(MODEL, 8)
    with caplog.at_level("WARNING", logger="durable_rag.gateway"):
        for _ in range(300):
            log.refused("/v1/ask", str(refused.value))
            now[0] += 0.001
        log.refused("/v1/chat/completions", str(refused.value))  # another route: its own line
        now[0] += 1.0
        log.refused("/v1/ask", str(refused.value))
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 3
    assert lines[0].startswith("refused /v1/ask: overloaded:") and "more refused" not in lines[0]
    assert lines[1].startswith("refused /v1/chat/completions: overloaded:")
    assert lines[2].endswith("(299 more refused since the last line)")


async def test_a_refusals_access_line_is_at_debug_and_an_admitted_requests_at_info(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A burst's 429s are said by RefusalLog once a second; their own access lines would cost
    the loop that answers the rest (gateway/middleware.py)."""
    gate = admission(target=10)
    inner = Inner(gate)
    route = LiveRoute("/v1/ask", AskBody, answers.cost)
    app = RequestId(Door(inner.app, [route]))
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    with caplog.at_level("DEBUG", logger="durable_rag.gateway"):
        async with httpx.AsyncClient(transport=transport, base_url="http://door") as http:
            admitted = await http.post("/v1/ask", json=ASK)
            held = [gate.admit(MODEL, 8) for _ in range(8)]
            refused = await http.post("/v1/ask", json=ASK)
    assert (admitted.status_code, refused.status_code) == (200, 429)
    access = [r for r in caplog.records if r.getMessage().startswith("POST /v1/ask")]
    assert [(r.levelname, r.getMessage().split()[2]) for r in access] == [
        ("INFO", "200"),
        ("DEBUG", "429"),
    ]
    for ticket in held:
        ticket.release()
