"""Admission of live requests: what each costs, the latency bound, and the start window."""

from __future__ import annotations

import asyncio
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from ragkit.admission import Admission, Costs, Limits, Overloaded
from ragkit.settings import Settings


def costs(
    request: float = 0.0, prefill: float = 0.0, per_token: float = 0.1, seqs: int = 8
) -> Costs:
    return Costs(
        request_seconds=request,
        prefill_seconds_per_token=prefill,
        per_token_seconds=per_token,
        max_num_seqs=seqs,
    )


def limits(target: float = 60, max_answer_tokens: int = 256, **given: float) -> Limits:
    return Limits(
        costs=costs(**given),  # type: ignore[arg-type]
        target_seconds=target,
        max_answer_tokens=max_answer_tokens,
    )


def test_a_request_costs_its_fixed_part_its_prefill_and_its_share_of_the_decode_steps() -> None:
    c = costs(request=0.3, prefill=0.001, per_token=0.1, seqs=8)
    # Work: what it takes from everyone behind it; a decode step serves 8 sequences.
    assert math.isclose(c.work(prompt_tokens=100, answer_tokens=80), 0.3 + 0.1 + 1.0)
    # Latency: its own tokens come one step after the other.
    assert math.isclose(c.latency(prompt_tokens=100, answer_tokens=80), 0.3 + 0.1 + 8.0)


def test_a_request_is_admitted_while_the_work_ahead_plus_its_latency_fits_the_target() -> None:
    """1 s fixed, 8-token answers at 0.1 s a step in batches of 8: each holds 1.1 s of work and
    takes 1.8 s itself, so 8 s of target admits 6 (5 x 1.1 + 1.8 = 7.3; a 7th would finish at
    8.4)."""
    admission = Admission(limits(target=8, request=1.0))
    tickets = [admission.admit("smol", 8) for _ in range(6)]
    assert math.isclose(admission.backlog("smol"), 6.6) and admission.in_flight("smol") == 6
    with pytest.raises(Overloaded) as refused:
        admission.admit("smol", 8)
    # 6.6 + 1.8 = 8.4 s against 8 s: 0.4 s must drain first.
    assert refused.value.retry_after == 1 and admission.refused == 1
    message = str(refused.value)
    assert "6 live request(s)" in message and "6.6 s of work" in message
    assert "finish after 8.4 s, past the 8 s latency target; retry after 1 s" in message
    # Another model has its own count.
    with admission.admit("large", 8):
        assert admission.in_flight("large") == 1
    assert admission.in_flight("large") == 0
    # One ending frees its work; releasing it twice frees nothing more.
    tickets[0].release()
    tickets[0].release()
    assert admission.in_flight("smol") == 5
    admission.admit("smol", 8)
    with pytest.raises(Overloaded):
        admission.admit("smol", 8)


def test_long_answers_and_long_prompts_cost_more_so_fewer_fit() -> None:
    admission = Admission(limits(target=60, request=0.3, prefill=0.001))
    short = [admission.admit("smol", 8) for _ in range(40)]  # 0.4 s of work each: 16 s
    # The longest answer takes 25.6 s itself: 16 + 0.3 + 25.6 = 41.9 s fits...
    long = admission.admit("smol")  # None: the longest answer
    assert long.work == pytest.approx(0.3 + 3.2)
    # ...and a question of 20,000 tokens adds 20 s of prefill: 19.5 + 20.3 + 25.6 = 65.4 > 60.
    with pytest.raises(
        Overloaded, match=r"after 65\.4 s, past the 60 s latency target; retry after 6 s"
    ):
        admission.admit("smol", prompt_tokens=20_000)
    for ticket in [*short, long]:
        ticket.release()
    # A request over the longest answer counts as the longest (validation refuses it later).
    assert admission.admit("smol", 10_000).work == pytest.approx(0.3 + 3.2)


def test_a_request_alone_is_admitted_even_if_it_cannot_meet_the_target() -> None:
    admission = Admission(limits(target=1))
    alone = admission.admit("smol")  # 25.6 s on its own: waiting would not make it faster
    with pytest.raises(Overloaded) as refused:
        admission.admit("smol", 1)
    # 3.2 s of work ahead + 0.1 s of its own, 1 s target: 2.3 s to drain, in whole seconds.
    assert refused.value.retry_after == 3
    alone.release()
    admission.admit("smol", 1)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_bursts_refusals_are_told_to_come_back_one_after_the_other() -> None:
    """Each refusal's Retry-After also waits for the work of those refused before it: they come
    back spread over the time it takes to serve them, not all at once into another burst."""
    clock = Clock()
    admission = Admission(limits(target=8, request=1.0), clock=clock)
    held = [admission.admit("smol", 8) for _ in range(6)]  # 6.6 s of work; 1.1 s each more
    waits = []
    for _ in range(5):
        with pytest.raises(Overloaded) as refused:
            admission.admit("smol", 8)
        waits.append(refused.value.retry_after)
    # 8.4 s against 8: 0.4 s, then 1.1 s more for each refused before it.
    assert waits == [1, 2, 3, 4, 5]
    assert "requests refused before it bring 4.4 s of work back sooner" in str(refused.value)
    assert math.isclose(admission.promised("smol"), 5.5)
    # The first came back after its second: its promise is gone, the others' stand.
    clock.now += 1
    assert math.isclose(admission.promised("smol"), 4.4)
    with pytest.raises(Overloaded) as refused:
        admission.admit("smol", 8)
    assert refused.value.retry_after == 5  # 0.4 + 4.4
    # Admission itself never waits for promises: room now is given now.
    held.pop().release()
    admission.admit("smol", 8)
    # All back, none left.
    clock.now += 60
    assert admission.promised("smol") == 0.0


def test_retry_after_is_at_most_ten_targets_and_promises_stay_few_under_a_flood() -> None:
    clock = Clock()
    admission = Admission(limits(target=8, request=1.0), clock=clock)
    for _ in range(6):
        admission.admit("smol", 8)
    waits = []
    for _ in range(10_000):
        with pytest.raises(Overloaded) as refused:
            admission.admit("smol", 8)
        waits.append(refused.value.retry_after)
    assert max(waits) == 80 and waits == sorted(waits)
    assert len(admission._promised["smol"]) <= 80  # one entry per second they come back in


def test_gateways_share_the_bound_each_counting_its_backlog_once_per_gateway() -> None:
    """Two gateways behind a load balancer: each admits while twice its own backlog plus the
    latency fits, so both together hold what one gateway alone would."""
    one, each = Admission(limits(target=8, request=1.0)), Admission(limits(target=8, request=1.0))
    each.gateways = 2
    alone = [one.admit("smol", 8) for _ in range(6)]
    with pytest.raises(Overloaded):
        one.admit("smol", 8)
    shared = [each.admit("smol", 8) for _ in range(3)]  # 2 x 3.3 + 1.8 = 8.4 > 8 for a 4th
    with pytest.raises(Overloaded, match="across 2 gateways"):
        each.admit("smol", 8)
    assert 2 * each.backlog("smol") == pytest.approx(one.backlog("smol")) and len(
        shared
    ) * 2 == len(alone)
    assert each.drain_seconds("smol") == 7  # 2 x 3.3 s held by both


def test_a_ticket_is_released_when_its_request_fails() -> None:
    admission = Admission(limits(target=1))
    with pytest.raises(RuntimeError), admission.admit("smol"):
        raise RuntimeError("the workflow failed")
    assert admission.in_flight("smol") == 0
    assert admission._in_flight == {} and admission._work == {}  # nothing kept for an idle model
    admission.admit("smol").release()


@given(
    fixed=st.floats(0, 5),
    prefill=st.floats(0, 0.01),
    per_token=st.floats(0.001, 1),
    seqs=st.integers(1, 64),
    target=st.floats(1, 600),
    answers=st.lists(st.integers(1, 512), min_size=1, max_size=60),
)
def test_whatever_is_admitted_is_predicted_to_finish_within_the_target(
    fixed: float,
    prefill: float,
    per_token: float,
    seqs: int,
    target: float,
    answers: list[int],
) -> None:
    admission = Admission(
        Limits(
            costs=costs(request=fixed, prefill=prefill, per_token=per_token, seqs=seqs),
            target_seconds=target,
            max_answer_tokens=512,
        )
    )
    for n, tokens in enumerate(answers):
        ahead = admission.backlog("m")
        try:
            ticket = admission.admit("m", tokens, prompt_tokens=50)
        except Overloaded as refused:
            assert refused.decision.finish > target
            assert refused.retry_after >= 1
            continue
        if n and admission.in_flight("m") > 1:
            assert ahead + ticket.decision.latency <= target * (1 + 1e-9)


def test_limits_follow_the_settings() -> None:
    derived = Limits.from_settings(Settings().llm)
    assert derived.target_seconds == 60 and derived.max_answer_tokens == 256
    llm = Settings().llm
    assert derived.costs == Costs(
        request_seconds=llm.request_seconds,
        prefill_seconds_per_token=llm.prefill_seconds_per_token,
        per_token_seconds=llm.per_token_seconds,
        max_num_seqs=8,
    )
    tight = Settings(llm_request_seconds=2, llm_per_token_seconds=0.1, llm_max_num_seqs=4)
    assert Limits.from_settings(tight.llm).costs.work(0, 4) == pytest.approx(2.1)


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
        ("llm_request_seconds", -1),
        ("llm_prefill_seconds_per_token", -0.1),
        ("gateway_heartbeat_seconds", 0),
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


def test_the_retired_queue_bound_is_refused_by_name_not_ignored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DURABLE_RAG_LLM_QUEUE_BOUND", "50")
    with pytest.raises(ValueError, match=r"DURABLE_RAG_LLM_QUEUE_BOUND is retired: admission"):
        Settings()
    monkeypatch.delenv("DURABLE_RAG_LLM_QUEUE_BOUND")
    assert Settings().llm.request_seconds > 0


def window(size: int) -> Admission:
    return Admission(
        Limits(costs=costs(), target_seconds=600, max_answer_tokens=8, start_window=size)
    )


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


async def test_many_waiters_giving_up_while_places_are_given_up_all_leave_cleanly() -> None:
    """A burst's waiters time out together while the holders give their places up: a place
    handed on skips (and takes out of the line) a waiter already cancelled, whose own clean-up
    then finds it gone. Each must end with its TimeoutError, never another error."""
    admission = window(2)
    holders = [admission.admit("m") for _ in range(2)]
    for holder in holders:
        await holder.take_turn()
    waiters = [admission.admit("m") for _ in range(20)]
    tasks = [asyncio.create_task(asyncio.wait_for(w.take_turn(), 0.05)) for w in waiters]
    await asyncio.sleep(0.05)
    for task in tasks[:10]:
        task.cancel()  # as their timeouts fire,
    for holder in holders:
        holder.release()  # the places are given up
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(
        o is None or isinstance(o, (TimeoutError, asyncio.CancelledError)) for o in outcomes
    ), outcomes
    assert admission.waiting("m") == 0


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
