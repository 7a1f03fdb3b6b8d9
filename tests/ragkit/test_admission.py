"""Admission of live generations: the queue bound a P99 target allows, and the per-model count."""

from __future__ import annotations

import asyncio
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from ragkit.admission import Admission, Limits, Overloaded, batch_seconds, queue_bound
from ragkit.settings import Settings


@pytest.mark.parametrize(
    ("target", "per_token", "tokens", "seqs", "bound"),
    [
        (60, 0.1, 256, 8, 8),  # T = 25.6 s: one batch may wait (2 T = 51.2 s <= 60 s)
        (51.2, 0.1, 256, 8, 8),  # exactly 2 T: still one batch
        (51.1, 0.1, 256, 8, 0),  # under 2 T: only the batch itself
        (10, 0.1, 256, 8, 0),  # under one T: no queue, and no promise either
        (120, 0.05, 100, 4, 92),  # T = 5 s: 24 batches fit, 23 of them waiting
        (30, 0.01, 100, 1, 29),
    ],
)
def test_the_queue_bound_is_the_full_batches_that_still_finish_within_the_target(
    target: float, per_token: float, tokens: int, seqs: int, bound: int
) -> None:
    assert queue_bound(target, per_token, tokens, seqs) == bound


@given(
    target=st.floats(0.5, 600),
    per_token=st.floats(0.001, 1),
    tokens=st.integers(1, 4_096),
    seqs=st.integers(1, 256),
)
def test_the_last_queued_request_meets_the_target_and_one_batch_more_would_not(
    target: float, per_token: float, tokens: int, seqs: int
) -> None:
    bound = queue_bound(target, per_token, tokens, seqs)
    assert bound % seqs == 0
    waiting = bound // seqs  # full batches ahead of the last admitted request
    t = batch_seconds(tokens, per_token)
    if waiting:
        assert (waiting + 1) * t <= target * (1 + 1e-9)
    assert (waiting + 2) * t > target * (1 - 1e-9)  # one more batch waiting would miss it


@pytest.mark.parametrize(
    "args", [(0, 0.1, 256, 8), (60, 0, 256, 8), (60, 0.1, 0, 8), (60, 0.1, 256, 0)]
)
def test_the_queue_bound_needs_positive_inputs(args: tuple[float, float, int, int]) -> None:
    with pytest.raises(ValueError):
        queue_bound(*args)


def test_a_full_model_refuses_with_the_seconds_one_batch_takes_to_drain() -> None:
    admission = Admission(Limits(max_num_seqs=2, queue_bound=1, batch_seconds=25.6))
    tickets = [admission.admit("smol") for _ in range(3)]
    with pytest.raises(Overloaded) as refused:
        admission.admit("smol")
    assert refused.value.retry_after == 26
    assert "3 generation(s)" in str(refused.value) and "retry after 26 s" in str(refused.value)
    assert admission.in_flight("smol") == 3 and admission.refused == 1
    # Another model has its own count.
    with admission.admit("large"):
        assert admission.in_flight("large") == 1
    assert admission.in_flight("large") == 0
    # One ending frees one slot; releasing it twice frees nothing more.
    tickets[0].release()
    tickets[0].release()
    assert admission.in_flight("smol") == 2
    admission.admit("smol")
    with pytest.raises(Overloaded):
        admission.admit("smol")


def test_admission_counts_answer_tokens_so_short_answers_share_a_slot() -> None:
    """The engine's work is tokens: with room for two 256-token answers, 42 answers of 12 tokens
    fit (504 of 512 tokens), and one long answer needs what 21 short ones hold."""
    admission = Admission(
        Limits(max_num_seqs=1, queue_bound=1, batch_seconds=25.6, max_answer_tokens=256)
    )
    short = [admission.admit("smol", 12) for _ in range(42)]
    assert admission.tokens_in_flight("smol") == 504 and admission.in_flight("smol") == 42
    with pytest.raises(Overloaded, match="42 generation"):
        admission.admit("smol", 12)
    for ticket in short[:20]:
        ticket.release()
    with pytest.raises(Overloaded):
        admission.admit("smol")  # the longest answer needs 256: only 248 are free
    short[20].release()
    long = admission.admit("smol")  # None: the longest answer
    assert long.tokens == 256 and admission.tokens_in_flight("smol") == 508
    # A request over the limit counts as the longest answer (validation refuses it later).
    for ticket in [*short[21:], long]:
        ticket.release()
    assert admission.admit("smol", 10_000).tokens == 256


def test_a_ticket_is_released_when_its_request_fails() -> None:
    admission = Admission(Limits(max_num_seqs=1, queue_bound=0, batch_seconds=1))
    with pytest.raises(RuntimeError), admission.admit("smol"):
        raise RuntimeError("the workflow failed")
    assert admission.in_flight("smol") == 0
    assert admission._in_flight == {}  # nothing kept for an idle model
    admission.admit("smol").release()


@pytest.mark.parametrize(("seconds", "retry_after"), [(0.001, 1), (1.0, 1), (1.2, 2), (25.6, 26)])
def test_retry_after_is_whole_seconds_and_at_least_one(seconds: float, retry_after: int) -> None:
    assert Limits(max_num_seqs=1, queue_bound=0, batch_seconds=seconds).retry_after == retry_after


def test_limits_follow_the_settings_unless_the_bound_is_given() -> None:
    derived = Limits.from_settings(Settings().llm)
    assert (derived.max_num_seqs, derived.queue_bound) == (8, 8)
    assert math.isclose(derived.batch_seconds, 25.6) and derived.capacity == 16
    tight = Settings(llm_p99_target_seconds=30, llm_per_token_seconds=0.05, llm_max_num_seqs=4)
    assert Limits.from_settings(tight.llm).queue_bound == 4  # T = 12.8 s: one batch waits
    given = Settings(llm_queue_bound=0, llm_max_num_seqs=1)
    assert Limits.from_settings(given.llm).capacity == 1


def test_the_access_timeout_is_one_and_a_half_times_the_measured_p99_unless_set() -> None:
    assert Settings().access_timeout_seconds == 90
    assert Settings(llm_inference_p99_seconds=2).access_timeout_seconds == 3
    explicit = Settings(llm_inference_p99_seconds=2, gateway_request_timeout_seconds=240)
    assert explicit.access_timeout_seconds == 240
    # model_copy keeps the override unset, so the derived value follows the P99.
    assert (
        Settings().model_copy(update={"llm_inference_p99_seconds": 10}).access_timeout_seconds == 15
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("llm_queue_bound", -1),
        ("llm_per_token_seconds", 0),
        ("llm_p99_target_seconds", 0),
        ("llm_inference_p99_seconds", 4_000),
        ("gateway_request_timeout_seconds", 0),
    ],
)
def test_out_of_range_admission_settings_are_refused(field: str, value: object) -> None:
    with pytest.raises(ValidationError) as info:
        Settings(**{field: value})
    assert field in str(info.value)


def window(size: int) -> Admission:
    return Admission(Limits(max_num_seqs=8, queue_bound=100, batch_seconds=2, start_window=size))


async def test_the_start_window_lets_a_batch_on_and_the_rest_follow_in_arrival_order() -> None:
    admission = window(2)
    tickets = [admission.admit("m") for _ in range(5)]
    order: list[int] = []

    async def turn(n: int) -> None:
        await tickets[n].take_turn()
        order.append(n)

    tasks = [asyncio.create_task(turn(n)) for n in range(5)]
    await asyncio.sleep(0)
    assert order == [0, 1] and admission.in_window("m") == 2 and admission.waiting("m") == 3
    tickets[1].streaming()  # its first token: its place goes to the first in line
    tickets[1].streaming()  # twice is harmless
    await asyncio.sleep(0)
    assert order == [0, 1, 2] and admission.in_window("m") == 2
    tickets[0].release()  # ended without a token: the same
    tickets[2].release()
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2, 3, 4] and admission.waiting("m") == 0
    for ticket in tickets:
        ticket.release()
    assert admission.in_window("m") == 0 and admission.in_flight("m") == 0


async def test_a_waiter_that_gives_up_leaves_the_line_and_holds_no_place() -> None:
    admission = window(1)
    first, second, third = (admission.admit("m") for _ in range(3))
    await first.take_turn()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(second.take_turn(), 0.05)
    assert admission.waiting("m") == 0 and not second.in_window
    waiting = asyncio.create_task(third.take_turn())
    await asyncio.sleep(0)
    first.streaming()
    await waiting
    assert third.in_window and admission.in_window("m") == 1


async def test_a_place_handed_to_a_cancelled_waiter_goes_on_to_the_next() -> None:
    admission = window(1)
    first, second, third = (admission.admit("m") for _ in range(3))
    await first.take_turn()
    waiters = [asyncio.create_task(t.take_turn()) for t in (second, third)]
    await asyncio.sleep(0)
    first.streaming()  # hands the place to `second`, which is cancelled before it runs
    waiters[0].cancel()
    await asyncio.gather(waiters[0], return_exceptions=True)
    await waiters[1]
    assert not second.in_window and third.in_window and admission.in_window("m") == 1


async def test_models_have_windows_of_their_own_and_zero_means_none() -> None:
    admission = window(1)
    await admission.admit("a").take_turn()
    await asyncio.wait_for(admission.admit("b").take_turn(), 1)  # another model's window
    unbounded = window(0)
    for _ in range(20):
        await asyncio.wait_for(unbounded.admit("m").take_turn(), 1)
    assert unbounded.in_window("m") == 0


def test_the_start_window_is_the_engines_batch_unless_set() -> None:
    assert Limits.from_settings(Settings(llm_max_num_seqs=6).llm).start_window == 6
    assert Limits.from_settings(Settings(llm_start_window=0).llm).start_window == 0
    with pytest.raises(ValidationError):
        Settings(llm_start_window=-1)
