"""The door: a live request is admitted (ragkit/admission.py) before anything else of it runs.

A plain ASGI middleware between the body limit and FastAPI. For a live route (each router lists
its own in `LIVE`) it reads the body, reads the request's cost from it with the route's own
function, and admits it, or answers 429 with Retry-After at once: no key lookup, no routing, no
validation, no workflow. Through FastAPI a refusal came ~0.8 s after its arrival on a gateway
saturated by a burst of 600 (bench/burst.py), as every request's dependencies ran first; at the
door it is the time to parse one body and compare two numbers.

So a refusal says nothing about the key: past capacity, a request gets 429 whether its key is
good or not, as rate limits commonly answer before authentication. An admitted request is
authenticated as before, and its ticket released if it is not.

A body the route's cost function cannot read goes on without a ticket: the endpoint says what is
wrong (422, 400, 404), and admits the request itself if it gets that far
(`gateway.answering.admitted`). The ticket rides in the request's state; the door releases it
when the request ends, however it ends (a release is idempotent: an endpoint that released it
first, as a stream does at its end, loses nothing).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from pydantic import BaseModel

from gateway import openai_compat
from gateway.middleware import Message, Receive, Scope, Send
from gateway.streams import Deadline
from ragkit.admission import Admission, Overloaded, Ticket
from ragkit.metrics import GATEWAY_BACKLOG, GATEWAY_REJECTED, child
from ragkit.settings import Settings

log = logging.getLogger("durable_rag.gateway")


@dataclass(frozen=True)
class Cost:
    """What admission counts of one live request (ragkit/admission.py)."""

    model: str | None  # as the request names it; None: the default model
    answer_tokens: int | None  # None: the longest answer
    prompt_tokens: int  # of its own: question, history


@dataclass(frozen=True)
class LiveRoute:
    """A route whose requests are admitted at the door."""

    template: str  # as FastAPI names the route: the metrics' label
    body: type[BaseModel]
    # The request's cost from its parsed body; ValueError or LookupError when it cannot say
    # (the endpoint then answers the error).
    cost: Callable[[Any, Settings], Cost]
    pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # "/v1/conversations/{conversation_id}/messages" -> one path segment per parameter.
        pattern = re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(self.template))
        object.__setattr__(self, "pattern", re.compile(pattern))


def model_label(chosen: str, requested: str | None, settings: Settings) -> str:
    """A bounded metric label: a model the request names is kept only if it is configured."""
    if requested is None:
        return chosen  # the settings' or the default alias: the operator's names
    known = {settings.llm.name, settings.llm.fallback_model}
    known |= {settings.router.small_model, settings.router.large_model}
    return chosen if chosen in known else "other"


class RefusalLog:
    """One warning line a second at most for a route's refusals, with how many it stands for:
    a burst refused at the door is hundreds of 429s in a second, and a line each (~40 µs on
    a busy event loop) would be a good part of each refusal's cost. It is the refusals' log:
    their access lines are at DEBUG (`gateway.middleware.RequestId`), and each is counted in
    `durable_rag_gateway_rejected_total`."""

    def __init__(self, every: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.every, self._clock = every, clock
        self._last: dict[str, float] = {}  # route -> when its last line was written
        self._unsaid: dict[str, int] = {}  # route -> refusals since then, not yet in a line

    def refused(self, route: str, reason: str) -> None:
        now = self._clock()
        if now - self._last.get(route, -math.inf) < self.every:
            self._unsaid[route] = self._unsaid.get(route, 0) + 1
            return
        self._last[route] = now
        more = self._unsaid.pop(route, 0)
        since = f" ({more} more refused since the last line)" if more else ""
        log.warning("refused %s: %s%s", route, reason, since)


REFUSALS = RefusalLog()

_watched: weakref.WeakKeyDictionary[Admission, set[str]] = weakref.WeakKeyDictionary()


def _watch_backlog(admission: Admission, model: str, label: str) -> None:
    """The backlog gauge of `model`, read at each scrape (so it falls as tickets are released);
    bound once per admission and model."""
    models = _watched.setdefault(admission, set())
    if model not in models:
        models.add(model)
        GATEWAY_BACKLOG.labels(label).set_function(lambda: admission.backlog(model))


async def admit(app_state: Any, route: str, cost: Cost) -> Ticket:
    """A ticket for a live request of `route` that costs `cost`; Overloaded (counted and
    logged) when it would finish after the latency target. `app_state`: the FastAPI app's."""
    settings: Settings = app_state.settings
    admission: Admission = app_state.admission
    chosen = cost.model or await app_state.rag.admission_model()
    label = model_label(chosen, cost.model, settings)
    try:
        ticket = admission.admit(chosen, cost.answer_tokens, cost.prompt_tokens)
    except Overloaded as exc:
        child(GATEWAY_REJECTED, route, label).inc()
        REFUSALS.refused(route, str(exc))
        raise
    _watch_backlog(admission, chosen, label)
    return ticket


# An admitted request of a burst starts its work once no live request has reached the door for
# QUIET_SECONDS, at most MOST_DEFERRED_SECONDS after its turn: the burst's refusals go out first.
# Its work on the event loop (routing, the key lookup, the workflow's start: ~2-5 ms each for the
# start window's 8) came among them before, and the slowest 429 of a fresh gateway's first burst
# of 300 at 95-155 ms. 2 ms is many times a refusal's cost (~0.1 ms), so a burst's arrivals
# reach the door closer together than that; a request alone waits nothing.
QUIET_SECONDS = 0.002
MOST_DEFERRED_SECONDS = 0.1


class Arrivals:
    """When live requests reached the door, for `settled`."""

    def __init__(
        self,
        quiet: float = QUIET_SECONDS,
        most: float = MOST_DEFERRED_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.quiet, self.most, self._clock = quiet, most, clock
        self.count = 0
        self.last = -math.inf

    def arrived(self) -> tuple[int, float]:
        """One more; its number and how long after the one before it came (seconds)."""
        now = self._clock()
        gap, self.last = now - self.last, now
        self.count += 1
        return self.count, gap

    async def settled(self, mine: int, gap: float) -> None:
        """Returns once no live request has arrived for `quiet` seconds (at most `most` from
        now), and at once for a request that came alone: none within `quiet` before it, none
        since."""
        if self.count == mine and gap >= self.quiet:
            return
        until = self._clock() + self.most
        while (now := self._clock()) < until and (quiet := self.last + self.quiet - now) > 0:
            await asyncio.sleep(min(quiet, until - now))


class NoTurn(Exception):
    """No place in the start window came within the access timeout: the ticket was released
    and the refusal counted; nothing was started. `str()` is the 429's message."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


async def wait_turn(ticket: Ticket, deadline: Deadline, route: str, settings: Settings) -> None:
    """The ticket's place in its model's start window, by the deadline; else NoTurn."""
    try:
        await asyncio.wait_for(ticket.take_turn(), deadline.left())
    except TimeoutError as exc:
        ticket.release()
        child(GATEWAY_REJECTED, route, model_label(ticket.model, None, settings)).inc()
        retry = ticket.retry_after
        message = (
            f"overloaded: no turn to start a generation of model {ticket.model!r} within "
            f"{deadline.said}; retry after {retry} s"
        )
        REFUSALS.refused(route, message)
        raise NoTurn(message, retry) from exc


def refusal(path: str, exc: Overloaded) -> Refused:
    """The 429 of a refused request, in its endpoint's error shape (OpenAI's for its paths)."""
    return refused(path, str(exc), exc.retry_after)


def refused(path: str, message: str, retry_after: int) -> Refused:
    if path in openai_compat.PATHS:
        return Refused(openai_compat.error(429, message).encode(), retry_after)
    return Refused(json.dumps({"detail": message}).encode(), retry_after)


class Refused:
    """A 429 with Retry-After as the two ASGI messages it is. Starlette's Response builds its
    headers through a mapping and back (~8 µs), paid by each of a burst's refusals on the loop
    that answers the rest."""

    __slots__ = ("_headers", "body")

    def __init__(self, body: bytes, retry_after: int) -> None:
        self.body = body
        self._headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"retry-after", str(retry_after).encode()),
        ]

    @property
    def headers(self) -> dict[str, str]:
        return {name.decode(): value.decode() for name, value in self._headers}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 429, "headers": self._headers})
        await send({"type": "http.response.body", "body": self.body})


class Door:
    """Admits the requests of `routes` before the app runs; see the module's docstring."""

    def __init__(self, app: Any, routes: list[LiveRoute]) -> None:
        self.app, self.routes = app, routes
        self.arrivals = Arrivals()

    @property
    def state(self) -> Any:
        return self.app.state

    def live(self, scope: Scope) -> LiveRoute | None:
        if scope["type"] != "http" or scope["method"] != "POST":
            return None
        return next((r for r in self.routes if r.pattern.fullmatch(scope["path"])), None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = self.live(scope)
        if route is None:
            await self.app(scope, receive, send)
            return
        first = await whole_body(receive)
        state = scope.setdefault("state", {})
        # Server-Timing `body`: a client may send its body after its headers (the request's
        # arrival); a refusal can only come after both.
        state.setdefault("timing", []).append(("body", time.monotonic()))
        arrival = self.arrivals.arrived()
        cost = None
        if first["type"] == "http.request":
            try:
                cost = route.cost(
                    route.body.model_validate_json(first["body"]), self.state.settings
                )
            except (ValueError, LookupError):
                cost = None  # the endpoint answers what is wrong with it
        ticket = None
        if cost is not None:
            try:
                ticket = await admit(self.state, route.template, cost)
            except Overloaded as exc:
                # The route FastAPI would have matched: the HTTP metrics' label (RequestId).
                scope["route"] = SimpleNamespace(path=route.template)
                state["timing"].append(("admit", time.monotonic()))
                await refusal(scope["path"], exc)(scope, receive, send)
                return
            state["timing"].append(("admit", time.monotonic()))
            state["ticket"] = ticket
            if not await self.turn(scope, route, ticket, receive, send):
                return
            await self.arrivals.settled(*arrival)
            state["timing"].append(("settle", time.monotonic()))
        try:
            await self.app(scope, replay(first, receive), send)
        finally:
            if ticket is not None:
                ticket.release()

    async def turn(
        self, scope: Scope, route: LiveRoute, ticket: Ticket, receive: Receive, send: Send
    ) -> bool:
        """The admitted request's turn in its model's start window, waited for here, before
        routing, validation and the key lookup: a burst's admitted requests wait at no cost to
        the event loop that answers its refusals (through FastAPI, each ran its dependencies
        first, ~0.5 ms apiece among the burst's 429s). No turn within the access timeout: 429
        with Retry-After, the ticket released, nothing started."""
        state, settings = scope["state"], self.state.settings
        deadline = Deadline.after(settings.access_timeout_seconds, state.get("arrived"))
        try:
            await wait_turn(ticket, deadline, route.template, settings)
        except NoTurn as exc:
            scope["route"] = SimpleNamespace(path=route.template)
            await refused(scope["path"], str(exc), exc.retry_after)(scope, receive, send)
            return False
        finally:
            state["timing"].append(("turn", time.monotonic()))
            state["turned"] = True
        return True


async def whole_body(receive: Receive) -> Message:
    """The request's body as one message (or the disconnect that came instead)."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return message
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return {"type": "http.request", "body": b"".join(chunks), "more_body": False}


def replay(first: Message, receive: Receive) -> Receive:
    """`receive` that gives `first` once, then whatever comes next (a disconnect)."""
    pending = [first]

    async def replayed() -> Message:
        return pending.pop() if pending else await receive()

    return replayed
