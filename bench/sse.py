"""The gateway on uvicorn in this process, and an SSE client of it: how bench/serving.py's rows
2 and 4 (and bench/tracing_cost.py) stream answers and time their first token."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import httpx

from durable_rag.client import RagClient
from durable_rag.stack.process import free_port
from gateway.app import create_app
from gateway.server import serving_here


@asynccontextmanager
async def gateway(rag: RagClient, connections: int) -> AsyncIterator[httpx.AsyncClient]:
    port = free_port()
    async with (
        serving_here(create_app(rag.settings, rag), port),
        httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}",
            timeout=600,
            limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
        ) as http,
    ):
        yield http


async def sse(response: httpx.Response) -> AsyncIterator[tuple[str, str]]:
    """(event, data) pairs of a Server-Sent Events response."""
    event, data = "message", list[str]()
    async for line in response.aiter_lines():
        if not line:
            if data:
                yield event, "\n".join(data)
            event, data = "message", list[str]()
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))


@dataclass
class Streamed:
    """One streamed answer as the HTTP client saw it."""

    request_id: str
    called_at: float  # wall clock, at the POST
    status: int = 0
    ttft_ms: float = float("nan")
    first_token_at: float = float("nan")  # wall clock
    token_events: int = 0
    last_event: str = ""
    completion_tokens: int = 0
    route: str = ""
    timings_ms: dict[str, float] = field(default_factory=dict)
    degradations: list[str] = field(default_factory=list)
    done_at: float = float("nan")  # wall clock, at the `answer` event
    total_ms: float = float("nan")
    detail: str = ""

    @property
    def ok(self) -> bool:
        """Completed with tokens: 200, at least one token event, the answer last, generated."""
        return (
            self.status == 200
            and self.token_events > 0
            and self.last_event == "answer"
            and self.route == "primary"
        )


async def stream_answer(
    http: httpx.AsyncClient, key: str, question: str, max_tokens: int, request_id: str
) -> Streamed:
    got = Streamed(request_id=request_id, called_at=time.time())
    started = time.perf_counter()
    body = {"question": question, "max_answer_tokens": max_tokens}
    headers = {"Authorization": f"Bearer {key}", "X-Request-ID": request_id}
    async with http.stream("POST", "/v1/ask/stream", json=body, headers=headers) as response:
        got.status = response.status_code
        if response.status_code != 200:
            got.detail = (await response.aread()).decode(errors="replace")[:300]
            return got
        async for event, data in sse(response):
            got.last_event = event
            if event == "token":
                if not got.token_events:
                    got.ttft_ms = (time.perf_counter() - started) * 1000
                    got.first_token_at = time.time()
                got.token_events += 1
            elif event == "answer":
                answer = json.loads(data)
                got.completion_tokens = answer["tokens"]["completion"]
                got.route = answer["route"]
                got.timings_ms = answer["timings_ms"]
                got.done_at = time.time()
                got.degradations = answer["degradations"]
                if answer["degradations"]:
                    got.detail = "; ".join(answer["degradations"])[:300]
            elif event == "error":
                got.detail = data[:300]
    got.total_ms = (time.perf_counter() - started) * 1000
    return got
