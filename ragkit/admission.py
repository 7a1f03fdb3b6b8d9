"""Admission of live generations: how many may be in flight per model, and what a refusal says.

R11's batching window, from a latency target down to two numbers:

- `max_num_seqs` is the batch: the generations the engine decodes at once. One batch of answers
  of up to `max_answer_tokens` tokens takes T = max_answer_tokens x per_token_seconds, where
  per_token_seconds is the measured per-token latency *at a full batch* (bench/answer.py; a
  fuller batch decodes each sequence more slowly, so the measurement must be at full batch).
- The queue bound is what may wait for that batch. A request queued behind k full batches
  finishes after (k + 1) x T, so to finish within the P99 target k = floor(target / T) - 1
  batches may wait: queue_bound(...) = max(0, k) x max_num_seqs.

The engine's work is tokens, not requests: a batch decodes max_num_seqs tokens per
per_token_seconds whatever the answers' lengths. So the gateway admits in tokens: each live
request holds its own token budget (its max_answer_tokens), and requests are admitted while the
tokens in flight stay within (max_num_seqs + queue bound) x max_answer_tokens, the work that
drains within the target. Fifty 12-token answers fit where sixteen 256-token ones do; a request
of the longest answers counts as one whole slot, which is the count above. Beyond that, waiting
could only miss the target, so the request is refused at once (HTTP 429) with Retry-After: the
seconds one batch takes to drain (T, rounded up, at least 1), when a slot is sure to have been
freed. The count is per process (one event loop): with several gateway processes, give each its
share of the bound.

The start window orders what comes before generation. An admitted streamed request takes a place
in its model's window before its workflow starts and gives it up at its first token (or its
end); at most `start_window` hold one, and the rest wait in arrival order. Retrieval, the
workflow's tasks and the dispatch are CPU work: fifty at once share the CPU and all reach the
engine after about fifty times one's cost, while the engine needs only its batch to start
decoding. In order, the first batch reaches it after a batch's worth, and the rest follow while it
decodes (bench/serving.py, row 4: the first generation began ~2 s into a burst of 50, ~0.4 s
with the window).

Pure: nothing here knows about HTTP, Temporal or the engine.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType

from ragkit.settings import LlmSettings

# Guards floor() against a product like 2.9999999 for a target that is an exact multiple of T.
_EPSILON = 1e-9


def batch_seconds(max_answer_tokens: int, per_token_seconds: float) -> float:
    """T: how long one full batch of the longest answers takes to drain."""
    return max_answer_tokens * per_token_seconds


def queue_bound(
    p99_target_seconds: float,
    per_token_seconds: float,
    max_answer_tokens: int,
    max_num_seqs: int,
) -> int:
    """Generations per model that may wait for a batch slot and still finish within the target.

    One batch of `max_num_seqs` generations of up to `max_answer_tokens` tokens takes
    T = max_answer_tokens x per_token_seconds. A request queued behind k full batches finishes
    after (k + 1) x T; so k = floor(p99_target / T) - 1 batches may queue, and the bound is
    max(0, k) x max_num_seqs. A target under 2 T leaves no queue at all: only the batch itself
    is admitted.
    """
    if p99_target_seconds <= 0 or per_token_seconds <= 0:
        raise ValueError("the P99 target and the per-token latency must be positive")
    if max_answer_tokens < 1 or max_num_seqs < 1:
        raise ValueError("max_answer_tokens and max_num_seqs must be at least 1")
    batch = batch_seconds(max_answer_tokens, per_token_seconds)
    batches = math.floor(p99_target_seconds / batch + _EPSILON) - 1
    return max(0, batches) * max_num_seqs


@dataclass(frozen=True)
class Limits:
    """What one model admits: its batch, the queue behind it, and how long a batch takes."""

    max_num_seqs: int
    queue_bound: int
    batch_seconds: float
    max_answer_tokens: int = 1
    start_window: int = 0  # streamed requests on their way to the engine at once; 0: no window

    @property
    def capacity(self) -> int:
        """Generations of the longest answers in flight (running or waiting) at most."""
        return self.max_num_seqs + self.queue_bound

    @property
    def token_budget(self) -> int:
        """Answer tokens in flight at most: `capacity` generations of the longest answers."""
        return self.capacity * self.max_answer_tokens

    @property
    def retry_after(self) -> int:
        """Whole seconds until one batch has drained, so a slot is free: at least 1."""
        return max(1, math.ceil(self.batch_seconds - _EPSILON))

    @classmethod
    def from_settings(cls, llm: LlmSettings) -> Limits:
        """The limits the settings give: llm_queue_bound when set, else derived from the
        P99 target (queue_bound)."""
        bound = llm.queue_bound
        if bound is None:
            bound = queue_bound(
                llm.p99_target_seconds,
                llm.per_token_seconds,
                llm.max_answer_tokens,
                llm.max_num_seqs,
            )
        return cls(
            max_num_seqs=llm.max_num_seqs,
            queue_bound=bound,
            batch_seconds=batch_seconds(llm.max_answer_tokens, llm.per_token_seconds),
            max_answer_tokens=llm.max_answer_tokens,
            start_window=llm.max_num_seqs if llm.start_window is None else llm.start_window,
        )


class Overloaded(Exception):
    """A live request for `model` cannot start within its budget: retry after `retry_after` s."""

    def __init__(self, model: str, in_flight: int, tokens: int, limits: Limits) -> None:
        self.model, self.in_flight, self.limits = model, in_flight, limits
        self.retry_after = limits.retry_after
        super().__init__(
            f"overloaded: {in_flight} generation(s) for model {model!r} are running or queued "
            f"with {tokens} answer tokens, and this one would pass the most that can finish "
            f"within the latency target ({limits.max_num_seqs} in the batch + "
            f"{limits.queue_bound} queued, of up to {limits.max_answer_tokens} tokens each); "
            f"retry after {self.retry_after} s"
        )


class Ticket:
    """One admitted generation. Release it when the request ends, however it ends; releasing
    twice is harmless. A context manager: `with admission.admit(model): ...`."""

    def __init__(self, admission: Admission, model: str, tokens: int) -> None:
        self._admission, self.model, self.tokens = admission, model, tokens
        self.released = False
        self.in_window = False  # holds a place in the model's start window

    @property
    def retry_after(self) -> int:
        return self._admission.limits(self.model).retry_after

    async def take_turn(self) -> None:
        """Wait for a place in the model's start window (at once while it has room). A waiter
        that is cancelled (its timeout) leaves the line, and takes no place."""
        await self._admission._enter_window(self)

    def streaming(self) -> None:
        """Its first token is out: its place in the start window goes to the next in line.
        Harmless when it holds none."""
        if self.in_window:
            self.in_window = False
            self._admission._leave_window(self.model)

    def release(self) -> None:
        self.streaming()
        if not self.released:
            self.released = True
            self._admission._release(self.model, self.tokens)

    def __enter__(self) -> Ticket:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.release()


class Admission:
    """In-flight live generations per model in this process, admitted while under the limits.

    Not thread-safe: one event loop (the gateway's) admits and releases.
    """

    def __init__(self, limits: Limits | Callable[[str], Limits]) -> None:
        """`limits`: one for every model, or a function of the model's name."""
        self._limits = limits
        self._in_flight: dict[str, int] = {}
        self._tokens: dict[str, int] = {}
        self._in_window: dict[str, int] = {}  # places held in each model's start window
        self._waiting: dict[str, deque[asyncio.Future[None]]] = {}  # in arrival order
        self.admitted = 0
        self.refused = 0

    @classmethod
    def from_settings(cls, llm: LlmSettings) -> Admission:
        return cls(Limits.from_settings(llm))

    def limits(self, model: str) -> Limits:
        return self._limits(model) if callable(self._limits) else self._limits

    def in_flight(self, model: str) -> int:
        return self._in_flight.get(model, 0)

    def tokens_in_flight(self, model: str) -> int:
        return self._tokens.get(model, 0)

    def admit(self, model: str, tokens: int | None = None) -> Ticket:
        """A ticket for one more generation of `model` of up to `tokens` answer tokens (None:
        the longest answer), or Overloaded when the tokens in flight would pass what can finish
        within the target."""
        limits = self.limits(model)
        cost = min(max(1, tokens or limits.max_answer_tokens), limits.max_answer_tokens)
        held = self.tokens_in_flight(model)
        if held + cost > limits.token_budget:
            self.refused += 1
            raise Overloaded(model, self.in_flight(model), held, limits)
        self._in_flight[model] = self.in_flight(model) + 1
        self._tokens[model] = held + cost
        self.admitted += 1
        return Ticket(self, model, cost)

    def in_window(self, model: str) -> int:
        return self._in_window.get(model, 0)

    def waiting(self, model: str) -> int:
        return len(self._waiting.get(model, ()))

    async def _enter_window(self, ticket: Ticket) -> None:
        model, size = ticket.model, self.limits(ticket.model).start_window
        if size <= 0 or ticket.in_window:
            return
        line = self._waiting.setdefault(model, deque())
        if self.in_window(model) < size and not line:
            self._in_window[model] = self.in_window(model) + 1
            ticket.in_window = True
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        line.append(turn)
        try:
            await turn  # _leave_window hands its place over: the count stays as it is
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                ticket.in_window = True  # handed over as it was cancelled: pass it on
                ticket.streaming()
            else:
                line.remove(turn)
            raise
        finally:
            if not line:
                self._waiting.pop(model, None)
        ticket.in_window = True

    def _leave_window(self, model: str) -> None:
        line = self._waiting.get(model)
        while line:
            turn = line.popleft()
            if not turn.done():
                turn.set_result(None)
                return
        left = self.in_window(model) - 1
        if left > 0:
            self._in_window[model] = left
        else:
            self._in_window.pop(model, None)

    def _release(self, model: str, tokens: int) -> None:
        left = self._in_flight.get(model, 0) - 1
        if left > 0:
            self._in_flight[model] = left
            self._tokens[model] = max(0, self._tokens.get(model, 0) - tokens)
        else:  # no entry kept for a model with nothing in flight: the maps stay small
            self._in_flight.pop(model, None)
            self._tokens.pop(model, None)
