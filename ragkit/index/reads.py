"""The live read path: searching the active index generation from the orchestrator.

Live retrieval runs as local activities in the orchestrator, which embeds the query itself. Where
the index is a server (Qdrant, production), the orchestrator searches it directly. Where the index
is held in process by another process (Qdrant Edge allows one opener: the index worker), that
process serves searches on a Unix socket, and the orchestrator asks it there:

    orchestrator  --(one JSON line: vector, limit, filter)-->  index worker's ReadServer
                  <--(one JSON line: hits, or an error)------  Generations.active().search

One request per line on a kept-open connection per thread: ~0.1 ms of framing, no HTTP stack. The
server answers from a thread of its own, so a search never waits behind a bulk embedding batch
(those hold the embedder, not the index).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import socketserver
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from ragkit import failpoints, tracing
from ragkit.index.base import (
    Fusion,
    IndexConfigError,
    IndexFilter,
    IndexHit,
    IndexUnavailableError,
    NoKeywordVectorsError,
)
from ragkit.index.bm25 import SparseVector
from ragkit.metrics import STEP_SECONDS

log = logging.getLogger(__name__)


class IndexReader(Protocol):
    """What live retrieval needs of the index: search the generation that serves queries."""

    def search(self, vector: Sequence[float], limit: int, where: IndexFilter) -> list[IndexHit]:
        """The `limit` nearest points within the filter, best first."""

    def search_keyword(self, query: SparseVector, limit: int, where: IndexFilter) -> list[IndexHit]:
        """BM25 in the index (VectorIndex.search_keyword)."""

    def search_fused(
        self,
        vector: Sequence[float],
        query: SparseVector,
        limit: int,
        candidates: int,
        where: IndexFilter,
        fusion: Fusion,
    ) -> list[IndexHit]:
        """Dense and BM25, fused in the index (VectorIndex.search_fused)."""

    def close(self) -> None:
        """Release connections."""


class ActiveReader:
    """Reads the active generation of an index this process can open itself: a Qdrant server
    (production), or the Edge index of the index worker when the orchestrator runs in the same
    process (tests, benchmarks). `generations` is a `ragkit.index.generations.Generations`."""

    def __init__(self, generations: Any) -> None:
        self.generations = generations

    def search(self, vector: Sequence[float], limit: int, where: IndexFilter) -> list[IndexHit]:
        index = self.generations.serving()
        return list(index.search(list(vector), limit, where))

    def search_keyword(self, query: SparseVector, limit: int, where: IndexFilter) -> list[IndexHit]:
        return list(self.generations.serving().search_keyword(query, limit, where))

    def search_fused(
        self,
        vector: Sequence[float],
        query: SparseVector,
        limit: int,
        candidates: int,
        where: IndexFilter,
        fusion: Fusion,
    ) -> list[IndexHit]:
        index = self.generations.serving()
        return list(index.search_fused(list(vector), query, limit, candidates, where, fusion))

    def close(self) -> None:
        pass  # the generations belong to whoever opened them


def search_query(
    embedder: Any, reader: IndexReader, query: str, limit: int, where: IndexFilter
) -> tuple[list[IndexHit], float]:
    """Embed `query` with `embedder` (a `ragkit.embedding.Embedder`) and search: the hits and
    the seconds the encoding took. The one vector search both retrieval paths run."""
    began = time.perf_counter()
    vector = embedder.embed_query(query)
    embed_seconds = time.perf_counter() - began
    STEP_SECONDS.labels("embed_query").observe(embed_seconds)
    failpoints.hit("index")
    return reader.search(vector, limit, where), embed_seconds


class _Handler(socketserver.StreamRequestHandler):
    server: ReadServer

    def handle(self) -> None:
        self.server.connections.add(self.connection)
        try:
            for line in self.rfile:
                self.wfile.write(self.server.answer(line) + b"\n")
                self.wfile.flush()
        except OSError:
            pass  # the orchestrator went away, or the server is closing
        finally:
            self.server.connections.discard(self.connection)


class ReadServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """Serves `reader.search` on a Unix socket; one thread per connection."""

    daemon_threads = True

    def __init__(self, path: Path, reader: IndexReader, embedding_model: str) -> None:
        self.path = path
        self.reader = reader
        self.embedding_model = embedding_model
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)  # a socket a killed worker left behind
        super().__init__(str(path), _Handler)
        os.chmod(path, 0o600)  # only this user's processes may read the index
        self._thread: threading.Thread | None = None
        self.connections: set[socket.socket] = set()

    def answer(self, line: bytes) -> bytes:
        try:
            request = json.loads(line)
            if not isinstance(request, dict):
                raise ValueError(f"a JSON object was expected, not {type(request).__name__}")
        except ValueError as exc:
            return json.dumps({"error": f"not a request: {exc}", "kind": "other"}).encode()
        # The asker's trace context, when it traces: this search is a span of its request.
        with tracing.remote_span("index search", request.pop("trace", None)) as span:
            answered = self._search(request)
            if span is not None:
                span.set_attribute("durable_rag.index.op", request.get("op", "dense"))
                span.set_attribute("durable_rag.index.answer_bytes", len(answered))
            return answered

    def _search(self, request: dict[str, Any]) -> bytes:
        try:
            if request.get("model") != self.embedding_model:
                raise IndexConfigError(
                    f"the query was embedded with {request.get('model')!r}, the index worker "
                    f"embeds with {self.embedding_model!r}: both must use the same model"
                )
            where = IndexFilter.from_json(request)
            limit = int(request["limit"])
            op = request.get("op", "dense")
            if op == "keyword":
                hits = self.reader.search_keyword(_sparse_of(request["sparse"]), limit, where)
            elif op == "fused":
                hits = self.reader.search_fused(
                    request["vector"],
                    _sparse_of(request["sparse"]),
                    limit,
                    int(request["candidates"]),
                    where,
                    _fusion_of(request["fusion"]),
                )
            else:
                hits = self.reader.search(request["vector"], limit, where)
            return json.dumps({"hits": [[str(h.id), h.score] for h in hits]}).encode()
        except NoKeywordVectorsError as exc:
            return json.dumps({"error": str(exc), "kind": "no_keyword"}).encode()
        except IndexConfigError as exc:
            return json.dumps({"error": str(exc), "kind": "config"}).encode()
        except Exception as exc:
            return json.dumps({"error": f"{type(exc).__name__}: {exc}", "kind": "other"}).encode()

    def start(self) -> ReadServer:
        self._thread = threading.Thread(
            target=self.serve_forever, name="index-read-server", daemon=True
        )
        self._thread.start()
        log.info("serving live index reads on %s", self.path)
        return self

    def close(self) -> None:
        """Stop serving and drop open connections, as a stopped worker would."""
        self.shutdown()
        self.server_close()
        for connection in list(self.connections):
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        self.path.unlink(missing_ok=True)


class ReadClient:
    """The orchestrator's side of `ReadServer`. Thread-safe: one connection per thread."""

    def __init__(self, path: Path, embedding_model: str, timeout: float = 5.0) -> None:
        self.path = path
        self.embedding_model = embedding_model
        self.timeout = timeout
        self._local = threading.local()

    def _connection(self) -> Any:
        stream = getattr(self._local, "stream", None)
        if stream is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.timeout)
            try:
                sock.connect(str(self.path))
            except OSError as exc:
                sock.close()
                raise IndexUnavailableError(
                    f"the index worker's read socket {self.path} does not answer ({exc}); "
                    "is the index worker running?"
                ) from exc
            stream = sock.makefile("rwb")
            self._local.sock, self._local.stream = sock, stream
        return stream

    def _drop(self) -> None:
        for name in ("stream", "sock"):
            part = getattr(self._local, name, None)
            if part is not None:
                with contextlib.suppress(OSError):  # a broken pipe's unsent bytes
                    part.close()
                setattr(self._local, name, None)

    def search(self, vector: Sequence[float], limit: int, where: IndexFilter) -> list[IndexHit]:
        return self._ask({"op": "dense", "vector": list(vector), "limit": limit}, where)

    def search_keyword(self, query: SparseVector, limit: int, where: IndexFilter) -> list[IndexHit]:
        return self._ask({"op": "keyword", "sparse": _sparse_json(query), "limit": limit}, where)

    def search_fused(
        self,
        vector: Sequence[float],
        query: SparseVector,
        limit: int,
        candidates: int,
        where: IndexFilter,
        fusion: Fusion,
    ) -> list[IndexHit]:
        return self._ask(
            {
                "op": "fused",
                "vector": list(vector),
                "sparse": _sparse_json(query),
                "limit": limit,
                "candidates": candidates,
                "fusion": {"method": fusion.method, "k": fusion.k, "weights": fusion.weights},
            },
            where,
        )

    def _ask(self, search: dict[str, Any], where: IndexFilter) -> list[IndexHit]:
        asked = {"model": self.embedding_model, **search, **where.to_json()}
        trace = tracing.inject()
        if trace:
            asked["trace"] = trace
        request = json.dumps(asked).encode()
        # A kept connection may have been closed by a restarted index worker: one fresh try.
        for attempt in (1, 2):
            stream = self._connection()
            try:
                stream.write(request + b"\n")
                stream.flush()
                line = stream.readline()
                if not line:
                    raise ConnectionError("the index worker closed the connection")
                break
            except OSError as exc:
                self._drop()
                if attempt == 2:
                    raise IndexUnavailableError(f"index read failed: {exc}") from exc
        answer = json.loads(line)
        if "error" in answer:
            if answer.get("kind") == "no_keyword":
                raise NoKeywordVectorsError(answer["error"])
            if answer.get("kind") == "config":
                raise IndexConfigError(answer["error"])
            raise IndexUnavailableError(answer["error"])
        return [IndexHit(id=uuid.UUID(i), score=float(s), payload={}) for i, s in answer["hits"]]

    def close(self) -> None:
        self._drop()


def _sparse_json(vector: SparseVector) -> list[list[Any]]:
    return [list(vector.indices), list(vector.values)]


def _sparse_of(data: list[list[Any]]) -> SparseVector:
    indices, values = data
    return SparseVector(tuple(int(i) for i in indices), tuple(float(v) for v in values))


def _fusion_of(data: dict[str, Any]) -> Fusion:
    weights = data.get("weights")
    return Fusion(
        method=data["method"], k=int(data["k"]), weights=tuple(weights) if weights else None
    )
