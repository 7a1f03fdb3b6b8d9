"""bench/soak.py cuts the load into windows over its own time: the drain's stragglers join the
last window, never a window of their own; P99 drifts by kind, over the requests started in the
first and the last window."""

from __future__ import annotations

import math
from pathlib import Path

from bench.load import Outcome
from bench.soak import MB, SoakReport, _windows, p99_drift_by_kind, slope_per_hour, store_sizes
from ragkit.settings import Settings


def test_a_long_drain_joins_the_last_window_instead_of_making_one() -> None:
    steady = [Outcome("ingest", started=100.0 + t, seconds=0.2, status="ok") for t in range(59)]
    # in flight at the stop (t=60 s), done 10 s later: more than half a window
    stragglers = [Outcome("answer", started=159.5, seconds=10.5, status="ok")]
    rss = [(100.0, {"temporal": 1024 * 1024})]
    windows = _windows(steady + stragglers, began=100.0, stopped=160.0, window=15.0, rss=rss)
    assert [w.start_s for w in windows] == [0.0, 15.0, 30.0, 45.0]
    assert [w.requests for w in windows] == [15, 15, 15, 15]  # 14 steady + the straggler last
    assert windows[-1].p99_ms > 10_000 > windows[0].p99_ms


def test_p99_drifts_by_kind_over_requests_started_in_the_first_and_last_window() -> None:
    """The CI soak that failed at "x28": answers of ~18 s never finish inside the first 15-s
    window, so counted by completion its P99 was the ingests' (0.8 s) and a later one the
    answers'. By start and by kind, a steady load drifts x1."""
    ingests = [Outcome("ingest", started=100.0 + t, seconds=0.5, status="ok") for t in range(60)]
    answers = [Outcome("answer", started=100.0 + t, seconds=18.0, status="ok") for t in (2, 50)]
    outcomes = ingests + answers
    rss = [(100.0, {"temporal": 1024 * 1024})]
    windows = _windows(outcomes, began=100.0, stopped=160.0, window=15.0, rss=rss)
    assert windows[0].p99_ms == 500 and windows[-1].p99_ms == 18_000  # by completion: x36
    report = SoakReport(duration_s=60, window_s=15)
    report.p99_drift_by_kind = p99_drift_by_kind(outcomes, began=100.0, stopped=160.0, window=15.0)
    assert report.p99_drift_by_kind == {"answer": 1.0, "ingest": 1.0}
    assert report.p99_drift == 1.0
    # A tail that does grow is still caught: the last window's answers take 3 x as long.
    slower = [*ingests, answers[0], Outcome("answer", started=150.0, seconds=54.0, status="ok")]
    assert p99_drift_by_kind(slower, 100.0, 160.0, 15.0)["answer"] == 3.0
    # A kind with nothing started in one of the two windows is not compared.
    assert "turn" not in p99_drift_by_kind(
        [*outcomes, Outcome("turn", started=101.0, seconds=5.0, status="ok")], 100.0, 160.0, 15.0
    )


def test_the_rss_slope_is_fitted_over_the_second_half_and_stores_grow_per_1000_requests(
    tmp_path: Path,
) -> None:
    """A part that warms up (+500 MB in its first half) and then grows 10 MB an hour reads +10,
    not the warm-up; a flat one reads 0."""
    report = SoakReport(duration_s=7200, window_s=720)
    for at in range(0, 7201, 60):
        warm = min(at, 3000) / 3000 * 500  # the warm-up, over by the half
        growing = 1000 + warm + at / 3600 * 10
        report.rss_samples.append((float(at), {"llm": int(growing * MB), "index": int(900 * MB)}))
        # PSS: the shared pages the RSS counts once per process, counted once (flat here).
        report.pss_samples.append((float(at), {"llm": int((growing - 300) * MB), "pg": 60 * MB}))
    slopes = report.rss_slope_mb_per_hour()
    assert math.isclose(slopes["llm"], 10.0, abs_tol=1e-6) and slopes["index"] == 0.0
    proportional = report.pss_slope_mb_per_hour()
    assert math.isclose(proportional["llm"], 10.0, abs_tol=1e-6) and proportional["pg"] == 0.0
    assert math.isnan(slope_per_hour([(1.0, 5.0)]))

    (tmp_path / "postgres" / "base").mkdir(parents=True)
    (tmp_path / "postgres" / "base" / "1").write_bytes(b"x" * 4 * MB)
    (tmp_path / "temporal.db").write_bytes(b"x" * MB)
    (tmp_path / "temporal.db-wal").write_bytes(b"x" * MB)
    settings = Settings(data_dir=tmp_path, profile="embedded", vector_backend="edge")
    before = store_sizes(settings)
    assert before == {"temporal": 2 * MB, "postgres": 4 * MB, "index": 0, "logs": 0}
    (tmp_path / "postgres" / "base" / "2").write_bytes(b"x" * 2 * MB)
    report.stores_before, report.stores_after = before, store_sizes(settings)
    report.requests = 500
    assert report.store_growth_mb_per_1000() == {
        "temporal": 0.0,
        "postgres": 4.0,
        "index": 0.0,
        "logs": 0.0,
    }


def test_an_unknown_fault_is_refused_before_anything_starts() -> None:
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    for args, said in [
        (["--fault", "meteor"], "--fault: no fault 'meteor'; known: "),
        (["--fault", "postgres_restart", "--fault-at", "1.5"], "--fault-at must be between"),
    ]:
        done = subprocess.run(
            [sys.executable, str(root / "bench" / "soak.py"), *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 2, done.stderr
        assert said in done.stderr
