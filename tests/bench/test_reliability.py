"""The reliability suite in CI: a 60-second soak smoke and the fast subset of the fault matrix,
on one embedded stack of real processes (bench/stack.py).

The full matrix (eight faults) is `make faults`; the 10-minute soak is `make soak`. Both are the
same code as here, run longer.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench.faults import FAST, FAULTS, format_table, run_matrix
from bench.soak import format_report, run_soak
from bench.stack import ProcessStack

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def process_stack() -> Iterator[ProcessStack]:
    stack = ProcessStack("ci")
    try:
        stack.start()  # a part that cannot start raises StackError with its log's tail
        yield stack
    finally:
        stack.close()


async def test_a_minute_of_mixed_load_has_no_failure_and_reports_windows_and_memory(
    process_stack: ProcessStack,
) -> None:
    report = await run_soak(process_stack, duration=60, window=15)
    print(format_report(report))
    assert report.failed == 0, [w for w in report.windows if w.failed]
    assert len(report.windows) >= 4
    assert all(w.requests > 0 for w in report.windows), "a window with no request finished"
    assert set(report.by_kind) == {"answer", "ingest", "turn"}
    parts = {"temporal", "postgres", "worker-orchestrator", "worker-index", "worker-llm"}
    assert set(report.windows[0].rss_mb) == parts
    assert all(mb > 10 for mb in report.windows[-1].rss_mb.values()), report.windows[-1].rss_mb
    assert report.p99_drift > 0


async def test_the_fast_fault_subset_loses_nothing_duplicates_nothing_fails_nothing(
    process_stack: ProcessStack,
) -> None:
    assert set(FAST) < set(FAULTS)
    rows = await run_matrix(process_stack, FAST, window=10)
    print(format_table(rows))
    for row in rows:
        assert row.requests > 0
        assert row.clean, f"{row.fault}: {row.details}"
    # The faults did strike: a dense search past its timeout makes answers keyword-only.
    (slow,) = [r for r in rows if r.fault == "slow_activity"]
    assert slow.degraded > 0
