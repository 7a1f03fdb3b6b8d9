"""bench/soak.py cuts the load into windows over its own time: the drain's stragglers join the
last window, never a window of their own."""

from __future__ import annotations

from bench.load import Outcome
from bench.soak import _windows


def test_a_long_drain_joins_the_last_window_instead_of_making_one() -> None:
    steady = [Outcome("ingest", started=100.0 + t, seconds=0.2, status="ok") for t in range(59)]
    # in flight at the stop (t=60 s), done 10 s later: more than half a window
    stragglers = [Outcome("answer", started=159.5, seconds=10.5, status="ok")]
    rss = [(100.0, {"temporal": 1024 * 1024})]
    windows = _windows(steady + stragglers, began=100.0, stopped=160.0, window=15.0, rss=rss)
    assert [w.start_s for w in windows] == [0.0, 15.0, 30.0, 45.0]
    assert [w.requests for w in windows] == [15, 15, 15, 15]  # 14 steady + the straggler last
    assert windows[-1].p99_ms > 10_000 > windows[0].p99_ms
