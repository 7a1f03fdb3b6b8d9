"""BENCHMARKS.md is composed from the benchmarks' JSON: every headline figure beside its baseline
or target, with the ratio; recorded long runs are rendered too."""

from __future__ import annotations

from typing import Any

from bench.report import machine, render, summary


def window(start: float, p50: float, p99: float, rss: float) -> dict[str, Any]:
    return {"start_s": start, "requests": 10, "throughput": 0.6, "failed": 0, "degraded": 0,
            "p50_ms": p50, "p99_ms": p99, "rss_mb": {"temporal": rss}}  # fmt: skip


RESULTS: dict[str, dict[str, Any]] = {
    "ingest": {
        "name": "ingest",
        "rows": [
            {"path": "plain loop", "chunks": 400, "seconds": 20.0, "chunks_per_s": 20.0},
            {"path": "IngestWorkflow", "chunks": 400, "seconds": 22.0, "chunks_per_s": 18.2},
        ],
        "ratio": 0.91,
    },
    "answer": {
        "name": "answer",
        "rows": [
            {"path": "plain async function", "p50_ms": 1000.0, "p99_ms": 1500.0, "mean_ms": 1.1},
            {"path": "AnswerWorkflow", "p50_ms": 1100.0, "p99_ms": 1800.0, "mean_ms": 1.2},
        ],
        "overhead_p50_ms": 100.0,
    },
    "dispatch": {
        "name": "dispatch",
        "rows": [
            {"server": "durable-rag dev server settings", "p50_ms": 60.0, "p99_ms": 90.0},
            {"server": "dev server defaults", "p50_ms": 350.0, "p99_ms": 360.0},
        ],
        "activities": 3,
        "ratio_p50": 60.0 / 350.0,
    },
    "vector_search": {
        "name": "vector_search",
        "rows": [{"size": 100_000, "filter": "tenant", "p50_ms": 3.0, "p99_ms": 7.5}],
    },
    "soak": {
        "name": "soak",
        "duration_s": 60.0,
        "windows": [
            window(0, 900.0, 2000.0, 100.0),
            window(30, 950.0, 2200.0, 104.0),
        ],
        "requests": 21,
        "failed": 0,
        "degraded": 1,
        "by_kind": {"answer": 15, "ingest": 3, "turn": 3},
        "p99_drift": 1.1,
        "rss_drift_mb": {"temporal": 4.0},
    },
    "retrieval": {"name": "retrieval", "error": "exit 1: boom"},
}


def test_summary_puts_each_figure_beside_its_baseline_and_target() -> None:
    rows = {r["figure"]: r for r in summary(RESULTS)}
    ingest = rows["ingest throughput (chunks/s)"]
    assert (ingest["plain-loop baseline"], ingest["durable-rag"], ingest["met"]) == (
        20.0,
        18.2,
        True,
    )
    p50 = rows["answer latency P50 (ms)"]
    assert p50["ratio"] == 1.1 and p50["met"] is False  # 100 ms of overhead is over 15
    (vector,) = [r for f, r in rows.items() if f.startswith("vector search P99")]
    assert vector["ratio"] == 7.5 / 50 and vector["met"] is True
    assert rows["soak 60 s: P99 drift (last / first window)"]["durable-rag"] == 1.1
    dispatch = rows["workflow of 3 no-op activities P50 (ms)"]
    assert dispatch["plain-loop baseline"] == "350.0 (dev server defaults)"
    assert (dispatch["durable-rag"], dispatch["met"]) == (60.0, True)


def test_render_has_the_machine_every_section_and_the_recorded_runs() -> None:
    recorded = {"soak-30min": {**RESULTS["soak"], "title": "soak, 30 minutes", "note": "once"}}
    text = render(RESULTS, recorded, machine(), "2026-12-01 00:00 UTC")
    assert "**Machine:**" in text and "CPUs" in text
    for heading in ("## Summary", "## Ingest", "## Answer", "## Task dispatch", "## Vector search", "## Soak",
                    "## Recorded: soak, 30 minutes"):  # fmt: skip
        assert heading in text, heading
    assert "Did not finish: `exit 1: boom`" in text  # a failed benchmark says so, never vanishes
    assert "| ingest throughput (chunks/s) | 20.0 | 18.2 | 0.91 | ratio >= 0.85 | yes |" in text
    assert "P99 x1.10" in text and "temporal +4 MB" in text
