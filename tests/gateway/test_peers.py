"""Gateways sharing the admission bound (gateway/peers.py) through their heartbeats on the real
Postgres: a new gateway counts itself and its live peers before its first request, a peer that
stops cleanly stops counting at once, and one that was killed after three missed heartbeats."""

from __future__ import annotations

import asyncio

import pytest

from gateway.peers import MISSED_BEATS, Peers
from ragkit.admission import Admission, Costs, Limits, Overloaded
from ragkit.store import gateways
from tests.conftest import Database

pytestmark = pytest.mark.integration


def admission() -> Admission:
    costs = Costs(request_seconds=1, prefill_seconds_per_token=0, per_token_seconds=0.1,
                  max_num_seqs=8)  # fmt: skip
    return Admission(Limits(costs=costs, target_seconds=8, max_answer_tokens=8))


async def test_gateways_count_each_other_and_share_the_bound(database: Database) -> None:
    every = 0.2
    first, second = admission(), admission()
    one, two = Peers(database.sessions, first, every), Peers(database.sessions, second, every)
    await one.start()
    assert first.gateways == 1
    alone = [first.admit("m", 8) for _ in range(6)]  # as many as one gateway holds
    for ticket in alone:
        ticket.release()
    await two.start()  # counts itself and the first before it serves
    assert second.gateways == 2
    await asyncio.sleep(every * 2)  # the first sees it at its next beat
    assert first.gateways == 2
    shared = [first.admit("m", 8) for _ in range(3)] + [second.admit("m", 8) for _ in range(3)]
    assert len(shared) == 6  # together, what one held alone
    with pytest.raises(Overloaded, match="across 2 gateways"):
        first.admit("m", 8)

    await two.stop()  # a clean stop leaves at once
    await one.beat()
    assert first.gateways == 1

    # A killed gateway: its row stays, and counts until three heartbeats have passed.
    gateways.beat(database.sessions, "killed", every * MISSED_BEATS)
    await one.beat()
    assert first.gateways == 2
    await asyncio.sleep(every * MISSED_BEATS + 0.3)
    await one.beat()
    assert first.gateways == 1
    await one.stop()
    assert database.rows("SELECT id FROM gateways WHERE id <> 'killed'") == []
