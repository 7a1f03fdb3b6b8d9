"""The burst's client (bench/burst.py): one asyncio protocol per request over a fresh connection,
responses parsed by httptools (uvicorn's own parser, in C), on uvloop.

Why not aiohttp, which it replaced: on 2 CPUs the client shares the machine with the gateway, and
its own cost is in every time it measures. Under `perf sched`, a burst of 300 against a bare ASGI
app that answers 429 (the `floor` side) kept the client busy 67 ms of 69 while the server's CPU
was idle 43 ms of them: aiohttp's ~0.2 ms a request was the floor itself. This client writes one
prepared request and reads the status line, the headers and, for an answer, the body's SSE
lines; nothing else.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httptools


@dataclass
class Sent:
    """One request as the client saw it (monotonic seconds from its send)."""

    streamed: bool
    gateway: int
    status: int | str = 0
    headers: float = math.nan  # the response began
    first_token: float = math.nan
    total: float = math.nan
    retry_after: str = ""
    error_event: int = 0  # the status an error chunk carried, after a 200
    timing: dict[str, float] = field(default_factory=dict)  # Server-Timing, ms
    prompt_tokens: int = 0
    began: float = 0.0  # monotonic, for the overlap of admitted requests
    ended: float = 0.0
    # When its request was written: the time before is the client's own (connecting), not the
    # server's.
    sent: float = math.nan


def parse_timing(header: str) -> dict[str, float]:
    return {
        m.group(1): float(m.group(2)) for m in re.finditer(r"(\w+);dur=([0-9.]+)", header or "")
    }


def request_bytes(url: str, path: str, body: dict[str, Any], headers: dict[str, str]) -> bytes:
    """One HTTP/1.1 POST of `body` as JSON, headers and body in one write."""
    host = urlsplit(url).netloc
    payload = json.dumps(body).encode()
    lines = [
        f"POST {path} HTTP/1.1",
        f"Host: {host}",
        "Content-Type: application/json",
        f"Content-Length: {len(payload)}",
        "Connection: close",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + payload


class _Exchange(asyncio.Protocol):
    """One request and its response; `done` resolves at the response's end."""

    def __init__(self, request: bytes, out: Sent, done: asyncio.Future[None]) -> None:
        self.request, self.out, self.done = request, out, done
        self.parser = httptools.HttpResponseParser(self)
        self.header_values: dict[bytes, bytes] = {}
        self.pending = b""  # an SSE line not yet whole
        self.body: list[bytes] = []
        self.transport: Any = None  # uvloop's transports are not asyncio.Transport's

    # asyncio.Protocol
    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        transport.write(self.request)
        self.out.sent = time.monotonic() - self.out.began

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(exc or ConnectionError("closed before the response ended"))

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self.header_values[name.lower()] = value

    def on_headers_complete(self) -> None:
        out = self.out
        out.headers = time.monotonic() - out.began
        out.status = self.parser.get_status_code()
        out.retry_after = self.header_values.get(b"retry-after", b"").decode()
        out.timing = parse_timing(self.header_values.get(b"server-timing", b"").decode())

    def on_body(self, body: bytes) -> None:
        if self.out.status != 200:
            return
        if not self.out.streamed:
            self.body.append(body)
            return
        *lines, self.pending = (self.pending + body).split(b"\n")
        for raw in lines:
            self._sse_line(raw.rstrip(b"\r"))

    def on_message_complete(self) -> None:
        if self.out.status == 200 and not self.out.streamed:
            reply = json.loads(b"".join(self.body))
            self.out.prompt_tokens = reply.get("usage", {}).get("prompt_tokens", 0)
        if not self.done.done():
            self.done.set_result(None)
        if self.transport is not None:
            self.transport.close()

    def _sse_line(self, line: bytes) -> None:
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            return
        chunk = json.loads(line[6:])
        out = self.out
        if "error" in chunk:
            out.error_event = int(chunk["error"].get("code") or 500)
        elif chunk.get("usage"):
            out.prompt_tokens = chunk["usage"]["prompt_tokens"]
        elif math.isnan(out.first_token) and any(
            c.get("delta", {}).get("content") for c in chunk.get("choices", [])
        ):
            out.first_token = time.monotonic() - out.began

    def _fail(self, exc: BaseException) -> None:
        if not self.done.done():
            self.done.set_exception(exc)


async def ask(url: str, key: str, q: str, tokens: int, streamed: bool, gateway: int,
              total: float) -> Sent:  # fmt: skip
    """One chat completion through the OpenAI endpoint, as the burst sends it."""
    # A unique start: the engine's prefix cache serves the retrieved passages that repeat (they
    # come first in the prompt), never the question itself, as with users' own questions.
    body: dict[str, Any] = {
        "model": "durable-rag",
        "messages": [{"role": "user", "content": f"({uuid.uuid4().hex[:6]}) {q}"}],
        "max_tokens": tokens,
        "stream": streamed,
    }
    if streamed:
        body["stream_options"] = {"include_usage": True}
    headers = {"Authorization": f"Bearer {key}", "X-Request-ID": f"burst-{uuid.uuid4().hex[:12]}"}
    request = request_bytes(url, "/v1/chat/completions", body, headers)
    out = Sent(streamed, gateway, began=time.monotonic())
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    transport = None
    try:
        async with asyncio.timeout(total):
            transport, _ = await loop.create_connection(
                lambda: _Exchange(request, out, done), host, port
            )
            await done
    except (OSError, TimeoutError, httptools.HttpParserError) as exc:
        out.status = f"error: {type(exc).__name__}"
    finally:
        if transport is not None:
            transport.close()
    out.ended = time.monotonic()
    out.total = out.ended - out.began
    return out
