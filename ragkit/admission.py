"""Admission of live requests: what each costs, when one is refused, and what a refusal says.

R11's promise, from a latency target down to one comparison. On the serving machine (the engine
and everything on the way to it) a live request costs work, in seconds of that machine's
throughput (`Costs`, measured per model and machine by `bench/burst.py --calibrate`):

- a fixed part, before generation: retrieval, the workflow's tasks, the dispatch to the LLM
  worker, and the prefill of a typical retrieved context (`llm_request_seconds`);
- the prefill of the prompt tokens the request brings itself: its question and conversation
  history (`llm_prefill_seconds_per_token` each);
- its share of the engine's decode steps: a batch of `llm_max_num_seqs` sequences advances one
  token each per `llm_per_token_seconds`, so one answer token costs per_token / max_num_seqs.

Work admitted drains at one second per second. A request's own latency on an idle machine is its
fixed part and prefill plus one decode step per answer token (its tokens come one after the
other, whatever the batch). So a request finishes within the target when

    backlog (the work of the live requests admitted before it) + its own latency <= target

and it is admitted only then. Otherwise it gets 429 at once, with nothing started, and a
Retry-After of the seconds until there is room for it: ceil(backlog + promised + latency -
target), at least 1, at most ten targets. `promised` is the work of the requests refused before
it and told to come back sooner (until their time comes): a burst's refusals are spread over the
time the machine takes to serve them, one after the other, instead of all coming back at once
into another burst. A request alone is always admitted: waiting could not make it faster.

Gateways share the bound. Each counts the work it admitted, and the gateways' heartbeats in
Postgres (gateway/peers.py) say how many are live: with n of them behind a load balancer, each
admits while n x its own backlog + the latency fits, so the sum of all of them stays within one
target. The alternative, one count shared in Postgres (a locked transaction per admission), took
11 ms per admission at P50 and 0.40 s for a burst of 300 on an idle stack, against 0.07 ms here
(`bench/burst.py --sides probe`): a refusal could not come within 100 ms through it.

The start window orders what comes before generation. An admitted request, streamed or plain,
takes a place in its model's window before its workflow starts and gives it up at its first
token (or its end); at most `start_window` hold one, and the rest wait in arrival order. Retrieval, the
workflow's tasks and the dispatch are CPU work: fifty at once share the CPU and all reach the
engine after about fifty times one's cost, while the engine needs only its batch to start
decoding. In order, the first batch reaches it after a batch's worth, and the rest follow while it
decodes (bench/serving.py, row 4: the first generation began ~2 s into a burst of 50, ~0.4 s
with the window).

Pure: nothing here knows about HTTP, Temporal or the engine.
"""

from __future__ import annotations

import asyncio
import heapq
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType

from ragkit.settings import LlmSettings

# Keeps ceil() from turning an excess of 2.0000000001 s (float noise) into 3.
_EPSILON = 1e-9
# The longest Retry-After, in latency targets: clients that ignore theirs cannot push everyone
# else's out without end.
RETRY_AFTER_TARGETS = 10


@dataclass(frozen=True)
class Costs:
    """What a live request costs the serving machine, in seconds of its throughput."""

    request_seconds: (
        float  # fixed: retrieval, workflow tasks, dispatch, a typical context's prefill
    )
    prefill_seconds_per_token: float  # each prompt token the request brings (question, history)
    per_token_seconds: float  # one decode step of a full batch
    max_num_seqs: int  # sequences a decode step advances

    def work(self, prompt_tokens: int, answer_tokens: int) -> float:
        """The seconds of throughput this request takes from everyone behind it."""
        decode = answer_tokens * self.per_token_seconds / self.max_num_seqs
        return self.request_seconds + prompt_tokens * self.prefill_seconds_per_token + decode

    def latency(self, prompt_tokens: int, answer_tokens: int) -> float:
        """Its own time on an idle machine: one decode step per answer token."""
        before = self.request_seconds + prompt_tokens * self.prefill_seconds_per_token
        return before + answer_tokens * self.per_token_seconds


@dataclass(frozen=True)
class Limits:
    """What one model admits: its costs, the latency target, and the longest answer."""

    costs: Costs
    target_seconds: float
    max_answer_tokens: int
    start_window: int = 0  # streamed requests on their way to the engine at once; 0: no window

    def answer_tokens(self, asked: int | None) -> int:
        """The answer tokens a request may use: what it asks for, within the longest answer."""
        return min(max(1, asked or self.max_answer_tokens), self.max_answer_tokens)

    @classmethod
    def from_settings(cls, llm: LlmSettings) -> Limits:
        return cls(
            costs=Costs(
                request_seconds=llm.request_seconds,
                prefill_seconds_per_token=llm.prefill_seconds_per_token,
                per_token_seconds=llm.per_token_seconds,
                max_num_seqs=llm.max_num_seqs,
            ),
            target_seconds=llm.p99_target_seconds,
            max_answer_tokens=llm.max_answer_tokens,
            start_window=llm.max_num_seqs if llm.start_window is None else llm.start_window,
        )


@dataclass(frozen=True)
class Decision:
    """The figures an admission decided on: kept on the ticket, said in a refusal."""

    model: str
    in_flight: int  # live requests of this model admitted by this gateway
    backlog: float  # seconds of their work, as all live gateways hold it (x gateways)
    latency: float  # this request's own, on an idle machine
    target: float
    gateways: int
    # Seconds of work of the requests refused before it that are told to come back sooner.
    promised: float = 0.0

    @property
    def finish(self) -> float:
        """When this request would finish, seconds from now."""
        return self.backlog + self.latency

    @property
    def retry_after(self) -> int:
        """Whole seconds until the backlog, and the work promised to those refused before it,
        have drained enough for this request: at least 1, at most ten targets."""
        wait = math.ceil(self.finish + self.promised - self.target - _EPSILON)
        return min(max(1, wait), max(1, math.ceil(RETRY_AFTER_TARGETS * self.target)))


class Overloaded(Exception):
    """A live request for `model` would finish after the latency target: retry after
    `retry_after` s. Nothing was started."""

    def __init__(self, decision: Decision) -> None:
        self.decision, self.model = decision, decision.model
        self.retry_after = decision.retry_after
        gateways = f" across {decision.gateways} gateways" if decision.gateways > 1 else ""
        super().__init__(
            f"overloaded: {decision.in_flight} live request(s) for model {decision.model!r} "
            f"hold {decision.backlog:.1f} s of work{gateways}, and this one would finish after "
            f"{decision.finish:.1f} s, past the {decision.target:g} s latency target; retry "
            f"after {self.retry_after} s"
            + (
                f" (requests refused before it bring {decision.promised:.1f} s of work back sooner)"
                if decision.promised
                else ""
            )
        )


class Ticket:
    """One admitted live request. Release it when the request ends, however it ends; releasing
    twice is harmless. A context manager: `with admission.admit(model, ...): ...`."""

    def __init__(self, admission: Admission, decision: Decision, work: float) -> None:
        self._admission, self.decision, self.work = admission, decision, work
        self.model = decision.model
        self.released = False
        self.in_window = False  # holds a place in the model's start window

    @property
    def retry_after(self) -> int:
        """For a request that gave up waiting: the seconds the work ahead of it takes."""
        return self._admission.drain_seconds(self.model)

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
            self._admission._release(self.model, self.work)

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
    """The live requests this gateway admitted per model, and the work they hold.

    Not thread-safe: one event loop (the gateway's) admits and releases. `gateways` is how
    many gateways are live (gateway/peers.py keeps it current; 1 alone).
    """

    def __init__(
        self,
        limits: Limits | Callable[[str], Limits],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`limits`: one for every model, or a function of the model's name."""
        self._limits, self._clock = limits, clock
        self._in_flight: dict[str, int] = {}
        self._work: dict[str, float] = {}
        self._in_window: dict[str, int] = {}  # places held in each model's start window
        self._waiting: dict[str, deque[asyncio.Future[None]]] = {}  # in arrival order
        # model -> the work refused requests were told to bring back, by the second (of the
        # clock) they come back in: by the second, so a flood of refusals keeps it small.
        self._promised: dict[str, _Promises] = {}
        self.gateways = 1
        self.admitted = 0
        self.refused = 0

    @classmethod
    def from_settings(cls, llm: LlmSettings) -> Admission:
        return cls(Limits.from_settings(llm))

    def limits(self, model: str) -> Limits:
        return self._limits(model) if callable(self._limits) else self._limits

    def in_flight(self, model: str) -> int:
        return self._in_flight.get(model, 0)

    def backlog(self, model: str) -> float:
        """Seconds of work this gateway's live requests of `model` hold."""
        return self._work.get(model, 0.0)

    def models(self) -> list[str]:
        return list(self._in_flight)

    def drain_seconds(self, model: str) -> int:
        """Whole seconds until the work all gateways hold for `model` has drained: at least 1."""
        return max(1, math.ceil(self.gateways * self.backlog(model) - _EPSILON))

    def admit(self, model: str, answer_tokens: int | None = None, prompt_tokens: int = 0) -> Ticket:
        """A ticket for one live request of `model` that brings `prompt_tokens` of its own
        (question, history) and may answer with `answer_tokens` (None: the longest answer); or
        Overloaded, when it would finish after the latency target."""
        limits = self.limits(model)
        answer = limits.answer_tokens(answer_tokens)
        prompt = max(0, prompt_tokens)
        in_flight = self.in_flight(model)
        backlog = self.gateways * self.backlog(model)
        latency = limits.costs.latency(prompt, answer)
        work = limits.costs.work(prompt, answer)
        refused = bool(in_flight) and backlog + latency > limits.target_seconds + _EPSILON
        now = self._clock() if refused else 0.0
        # One Decision, built once: a burst refuses hundreds a second on the event loop that
        # answers them, and a frozen dataclass's construction is most of a refusal's cost here
        # (a second one, through dataclasses.replace, was 40 % of it).
        decision = Decision(
            model, in_flight, backlog, latency, limits.target_seconds, self.gateways,
            promised=self.gateways * self.promised(model, now) if refused else 0.0,
        )  # fmt: skip
        if refused:
            self.refused += 1
            self._promise(model, now + decision.retry_after, work)
            raise Overloaded(decision)
        self._in_flight[model] = in_flight + 1
        self._work[model] = self.backlog(model) + work
        self.admitted += 1
        return Ticket(self, decision, work)

    def promised(self, model: str, now: float | None = None) -> float:
        """Seconds of work this gateway's refused requests of `model` were told to bring back
        after `now` (the clock's, by default)."""
        due = self._promised.get(model)
        if due is None:
            return 0.0
        left = due.after(self._clock() if now is None else now)
        if not due:
            del self._promised[model]
        return left

    def _promise(self, model: str, at: float, work: float) -> None:
        self._promised.setdefault(model, _Promises()).add(at, work)

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
            elif turn in line:  # a place given up meanwhile skipped it, and took it out
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

    def _release(self, model: str, work: float) -> None:
        left = self._in_flight.get(model, 0) - 1
        if left > 0:
            self._in_flight[model] = left
            self._work[model] = max(0.0, self._work.get(model, 0.0) - work)
        else:  # no entry kept for a model with nothing in flight: the maps stay small
            self._in_flight.pop(model, None)
            self._work.pop(model, None)


class _Promises:
    """The work refused requests of one model bring back, by the second they come back in.
    Each refusal reads and adds to it, so both are O(log n) in the seconds held (up to ten
    targets' worth): a burst's refusals stay cheap however many came before."""

    def __init__(self) -> None:
        self._work: dict[int, float] = {}
        self._seconds: list[int] = []  # a heap of `_work`'s keys
        self._total = 0.0

    def __len__(self) -> int:
        return len(self._work)

    def add(self, at: float, work: float) -> None:
        second = math.floor(at)  # gone by the time its requests come back
        if second not in self._work:
            self._work[second] = 0.0
            heapq.heappush(self._seconds, second)
        self._work[second] += work
        self._total += work

    def after(self, now: float) -> float:
        """The work due after `now`; what came due by then is dropped."""
        while self._seconds and self._seconds[0] <= now:
            self._total -= self._work.pop(heapq.heappop(self._seconds))
        if not self._work:
            self._total = 0.0  # no rounding left over
        return max(0.0, self._total)
