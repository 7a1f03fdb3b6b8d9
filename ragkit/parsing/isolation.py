"""Parsing in a child process with CPU-time and memory limits.

The parsers wrap native code (libxml2, PDFium) and libraries that read hostile input. A
document that crashes one, loops in one, or makes one allocate without end must cost one
`parse_error` for that document: never the worker, its batch, or the other documents.

`IsolatedParser` keeps a few child processes (`python -m ragkit.parsing.isolation`), one per
caller at a time. Each child:
- imports the parsers once, then parses one document per request;
- runs under RLIMIT_AS (`ingest_parse_memory_mb`), RLIMIT_FSIZE 0 (a parser writes no file)
  and no core dumps;
- before each document, sets its CPU-time soft limit to what it used so far plus
  `ingest_parse_cpu_seconds`, so past it the kernel ends it with SIGXCPU.

The parent waits `ingest_parse_timeout_seconds` of wall time for an answer (a parser blocked
without using CPU), then kills the child. A child that died or was killed is replaced by a fresh
one on the next request. Its answer is JSON, checked before use: a compromised child can make a
document fail, not the parent run its code (no pickle crosses back).

Messages: a request is a 4-byte length and a JSON header, then an 8-byte length and the
document's bytes; an answer is an 8-byte length and a JSON object, `{"document": ...}` or
`{"error": {"kind": ..., "message": ...}}`.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ragkit.parsing.model import (
    KINDS,
    PARSE_ERROR,
    Block,
    DocumentError,
    ParsedDocument,
)

_ROOT = Path(__file__).resolve().parents[2]  # the folder that holds `ragkit`
_HEADER = struct.Struct(">I")
_LENGTH = struct.Struct(">Q")
MAX_IDLE_CHILDREN = 4
# What parses a document: `ragkit.parsing.parse` itself, or an `IsolatedParser`.
Parser = Callable[[bytes, str, str], ParsedDocument]


@dataclass(frozen=True)
class ParseLimits:
    cpu_seconds: int = 60
    memory_mb: int = 2_048
    timeout_seconds: float = 180.0


class _ChildGone(Exception):
    """The child died, was killed, or broke the protocol: the message says which."""


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class _Child:
    def __init__(self, limits: ParseLimits, failpoints_file: Path | None) -> None:
        self.limits = limits
        config = {
            "memory_mb": limits.memory_mb,
            "failpoints": str(failpoints_file) if failpoints_file else "",
        }
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_ROOT), env.get("PYTHONPATH")) if p)
        # One thread for whatever numeric library a parser imports: each reserves address space.
        env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "ragkit.parsing.isolation", json.dumps(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            close_fds=True,
        )

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        for stream in (self.process.stdin, self.process.stdout):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()

    def parse(self, data: bytes, content_type: str, fallback_title: str) -> dict[str, Any]:
        deadline = time.monotonic() + self.limits.timeout_seconds
        header = json.dumps(
            {
                "content_type": content_type,
                "fallback_title": fallback_title,
                "cpu_seconds": self.limits.cpu_seconds,
            }
        ).encode()
        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            self.process.stdin.write(_HEADER.pack(len(header)) + header)
            self.process.stdin.write(_LENGTH.pack(len(data)))
            self.process.stdin.write(data)
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            raise _ChildGone(self._died()) from None
        size = _LENGTH.unpack(self._read(_LENGTH.size, deadline))[0]
        if size > 64 * 1024 * 1024 * 1024:
            raise _ChildGone("the parser sent an answer that breaks the protocol")
        try:
            answer = json.loads(self._read(size, deadline))
        except ValueError:
            raise _ChildGone("the parser sent an answer that is not JSON") from None
        if not isinstance(answer, dict):
            raise _ChildGone("the parser sent an answer that breaks the protocol")
        return answer

    def _read(self, size: int, deadline: float) -> bytes:
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        parts: list[bytes] = []
        left = size
        while left:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                self.kill()
                raise _ChildGone(
                    f"parsing took longer than {self.limits.timeout_seconds:g} s "
                    "(DURABLE_RAG_INGEST_PARSE_TIMEOUT_SECONDS)"
                )
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                raise _ChildGone(self._died())
            parts.append(chunk)
            left -= len(chunk)
        return b"".join(parts)

    def _died(self) -> str:
        try:
            code = self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
            return "the parser process stopped answering"
        if code == -signal.SIGXCPU:
            return (
                f"parsing took more than {self.limits.cpu_seconds} s of CPU time "
                "(DURABLE_RAG_INGEST_PARSE_CPU_SECONDS)"
            )
        if code < 0:
            return (
                f"the parser crashed on this document ({_signal_name(-code)}): it is damaged "
                "or hostile"
            )
        return f"the parser process exited with status {code}"


def _document(found: Any) -> ParsedDocument:
    """The child's document, checked: every block a slice of the text, in order."""
    try:
        text = found["text"]
        blocks = [
            Block(tuple(str(h) for h in path), int(start), int(end), int(page), int(row))
            for path, start, end, page, row in found["blocks"]
        ]
        doc = ParsedDocument(
            str(found["title"]),
            str(found["content_type"]),
            text,
            blocks,
            found["page_kind"] if found["page_kind"] in ("", "page", "slide") else "",
            [(str(kind), str(message)) for kind, message in found["notes"]],
            [str(h) for h in found["headings"]],
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise _ChildGone(f"the parser sent a malformed document ({exc})") from None
    if not isinstance(text, str) or any(not 0 <= b.start <= b.end <= len(text) for b in doc.blocks):
        raise _ChildGone("the parser sent blocks outside its text")
    return doc


class IsolatedParser:
    """`parse` with the same contract, run in child processes under `limits`."""

    def __init__(self, limits: ParseLimits | None = None, failpoints_file: Path | None = None):
        self.limits = limits or ParseLimits()
        self.failpoints_file = failpoints_file
        self._idle: list[_Child] = []
        self._lock = threading.Lock()

    def __call__(self, data: bytes, content_type: str, fallback_title: str) -> ParsedDocument:
        child = self._take()
        answer: dict[str, Any] = {}
        try:
            answer = child.parse(data, content_type, fallback_title)
            if "error" in answer:
                error = answer["error"]
                kind = error.get("kind") if isinstance(error, dict) else None
                raise DocumentError(
                    kind if kind in KINDS else PARSE_ERROR,
                    str(error.get("message") if isinstance(error, dict) else error),
                )
            doc = _document(answer.get("document"))
        except _ChildGone as gone:
            child.kill()
            raise DocumentError(PARSE_ERROR, str(gone)) from None
        except DocumentError:
            if answer.get("retire"):
                child.kill()
            else:
                self._give_back(child)
            raise
        except BaseException:
            child.kill()  # interrupted mid-message: the child's state is unknown
            raise
        self._give_back(child)
        return doc

    def _take(self) -> _Child:
        with self._lock:
            while self._idle:
                child = self._idle.pop()
                if child.alive():
                    return child
                child.kill()
        return _Child(self.limits, self.failpoints_file)

    def _give_back(self, child: _Child) -> None:
        if not child.alive():
            child.kill()
            return
        with self._lock:
            if len(self._idle) < MAX_IDLE_CHILDREN:
                self._idle.append(child)
                return
        child.kill()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for child in idle:
            child.kill()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


# --- the child ---------------------------------------------------------------------------------


def _read_exactly(stream: IO[bytes], size: int) -> bytes | None:
    parts: list[bytes] = []
    left = size
    while left:
        chunk = stream.read(left)
        if not chunk:
            return None
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def _failpoint(title: str) -> None:
    """The fault a test set for this document (ragkit/failpoints.py, point `parser`)."""
    from ragkit import failpoints

    spec = failpoints.spec("parser")
    if not spec or spec.get("title") not in (None, title):
        return
    if spec.get("crash"):
        os.kill(os.getpid(), getattr(signal, str(spec["crash"]), signal.SIGSEGV))
    if spec.get("allocate_mb"):
        hog = bytearray(int(spec["allocate_mb"]) * 1024 * 1024)
        hog[::4096] = b"x" * len(hog[::4096])
    if spec.get("sleep_seconds"):
        time.sleep(float(spec["sleep_seconds"]))
    if spec.get("spin_seconds"):
        end = time.process_time() + float(spec["spin_seconds"])
        while time.process_time() < end:
            pass


def _serve(config: dict[str, Any]) -> None:
    import resource

    # The answer channel is a private copy of stdout; fd 1 itself goes to stderr, so what a
    # library prints can never corrupt an answer.
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    requests = sys.stdin.buffer

    # Imported once, before the limits: every document then pays only for its own parse.
    import ragkit.parsing.html
    import ragkit.parsing.markdown
    import ragkit.parsing.office
    import ragkit.parsing.pdf
    import ragkit.parsing.sheets  # noqa: F401
    from ragkit import failpoints, parsing

    if config.get("failpoints"):
        failpoints.configure(Path(config["failpoints"]))
    memory = int(config["memory_mb"]) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))

    def answer(payload: dict[str, Any]) -> None:
        body = json.dumps(payload).encode()
        answers.write(_LENGTH.pack(len(body)) + body)
        answers.flush()

    while True:
        head = _read_exactly(requests, _HEADER.size)
        if head is None:
            return  # the parent closed the pipe (or died): nothing more to do
        header = json.loads(_read_exactly(requests, _HEADER.unpack(head)[0]) or b"{}")
        size_bytes = _read_exactly(requests, _LENGTH.size)
        data = _read_exactly(requests, _LENGTH.unpack(size_bytes)[0]) if size_bytes else None
        if data is None:
            return
        used = resource.getrusage(resource.RUSAGE_SELF)
        spent = math.ceil(used.ru_utime + used.ru_stime)
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        soft = spent + int(header["cpu_seconds"])
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
        title = str(header["fallback_title"])
        try:
            _failpoint(title)
            doc = parsing.parse(data, str(header["content_type"]), title)
        except DocumentError as exc:
            answer({"error": {"kind": exc.kind, "message": exc.message}})
            continue
        except MemoryError:
            del data
            answer(
                {
                    "error": {
                        "kind": PARSE_ERROR,
                        "message": f"parsing needed more than {config['memory_mb']} MB of memory "
                        "(DURABLE_RAG_INGEST_PARSE_MEMORY_MB)",
                    },
                    "retire": True,  # the heap may be fragmented or half-built: start afresh
                }
            )
            return
        except Exception as exc:  # any library's own error on a damaged file
            answer(
                {
                    "error": {
                        "kind": PARSE_ERROR,
                        "message": f"cannot parse this {header['content_type']} file: "
                        f"{type(exc).__name__}: {exc}"[:2_000],
                    }
                }
            )
            continue
        answer(
            {
                "document": {
                    "title": doc.title,
                    "content_type": doc.content_type,
                    "text": doc.text,
                    "blocks": [[b.heading_path, b.start, b.end, b.page, b.row] for b in doc.blocks],
                    "page_kind": doc.page_kind,
                    "notes": doc.notes,
                    "headings": doc.headings,
                }
            }
        )


if __name__ == "__main__":
    _serve(json.loads(sys.argv[1]))
