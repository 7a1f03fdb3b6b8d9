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
    "forget": {
        "name": "forget",
        "rows": [
            {"server": "durable-rag dev server settings", "text_gone_p50_s": 4.0},
            {"server": "dev server defaults", "text_gone_p50_s": 40.0},
        ],
        "ratio_p50": 0.1,
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
    "serving": {
        "name": "serving",
        "concurrency": 50,
        "rows": [
            {
                "figure": "answer overhead P50 / P99 (ms)",
                "result": "+9.0 / +30.0 ms",
                "target": "P50 <= 15 ms; P99 <= 40 ms",
                "met": True,
            }
        ],
        "hops": [
            {
                "flow": "answer (client)",
                "hop": "generate dispatch",
                "n": 100,
                "p50_ms": 4.0,
                "p99_ms": 9.0,
            }
        ],
        "problems": ["serve-c1-0: HTTP 429"],
        "note": "How to read: the rows.",
        "dispatches": {"answer": {"remote_before_generate": {"0": 100}}},
        "answer_overhead_p50_ms": 9.0,
        "answer_overhead_p99_ms": 30.0,
        "answer_plain_p50_ms": 1000.0,
        "answer_flow_p50_ms": 1009.0,
        "ttft_overhead_p50_ms": 55.0,
        "ttft_plain_p50_ms": 400.0,
        "ttft_gateway_p50_ms": 455.0,
        "search_idle_p50_ms": 90.0,
        "search_ingest_p50_ms": 135.0,
        "search_ratio_p50": 1.5,
        "concurrent_completed": 49,
        "concurrent_streams": 50,
        "concurrent_ratio": 0.95,
        "concurrent_tokens_per_s": 95.0,
        "engine_tokens_per_s": 100.0,
    },
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
    forget = rows["a deleted run's history and visibility record gone, P50 (s)"]
    assert forget["plain-loop baseline"] == "40.0 (dev server defaults)"
    assert (forget["durable-rag"], forget["ratio"], forget["met"]) == (4.0, 0.1, True)


def test_an_optimize_row_pooled_over_rounds_shows_each_round_s_ratio() -> None:
    during = {
        "size": 10_000, "tenants": 10, "state": "during optimize", "filter": "tenant",
        "p99_ms": 2.6, "idle_p99_ms": 1.3, "p99_ratio_to_idle": 2.0, "degraded": 0,
        "target": "<= 2x idle, 0 degraded", "target_met": True, "optimize_rounds": 3,
        "p99_ratio_per_round": [1.9, 2.25, 1.8],
    }  # fmt: skip
    (row,) = summary({"vector_search": {"name": "vector_search", "rows": [during]}})
    assert row["figure"] == (
        "vector search P99 (ms), 10,000 chunks, during optimize, filter tenant, 0 degraded, "
        "3 optimizes pooled (each: x1.90 / x2.25 / x1.80)"
    )
    assert (row["plain-loop baseline"], row["ratio"], row["met"]) == (1.3, 2.0, True)


def test_the_serving_figures_are_summarized_against_their_targets() -> None:
    rows = {
        r["figure"].split(",")[0]: r for r in summary(RESULTS) if r["figure"].startswith("serving")
    }
    overhead = rows["serving: answer overhead P50 / P99 (ms)"]
    assert (overhead["durable-rag"], overhead["met"]) == ("+9.0 / +30.0", True)
    ttft = rows["serving: time to first token P50 (ms)"]
    assert ttft["ratio"] == 455.0 / 400.0 and ttft["met"] is False  # 55 ms is over 40
    search = rows["serving: search P50 (ms) during an ingest"]
    assert (search["ratio"], search["met"]) == (1.5, True)
    (streams,) = [r for f, r in rows.items() if "concurrent streams" in f]
    assert "49/50 completed" in streams["figure"] and streams["met"] is False  # one did not


def test_render_has_the_machine_every_section_and_the_recorded_runs() -> None:
    recorded = {
        "soak-30min": {**RESULTS["soak"], "title": "soak, 30 minutes", "note": "once"},
        "soak-long": {
            **RESULTS["soak"],
            "title": "soak, with a fault",
            "fault": "postgres_restart at 1890s",
            "rss_slope_mb_per_hour": {"worker-llm": 709.4, "temporal": -3.2},
            "store_growth_mb_per_1000": {"temporal": 34.71, "index": 0.12},
        },
    }
    text = render(RESULTS, recorded, machine(), "2026-12-01 00:00 UTC")
    assert "**Machine:**" in text and "CPUs" in text
    for heading in ("## Summary", "## Ingest", "## Answer", "## Task dispatch", "## Forgetting",
                    "## Vector search", "## Soak",
                    "## Serving", "## Recorded: soak, 30 minutes"):  # fmt: skip
        assert heading in text, heading
    assert "Did not finish: `exit 1: boom`" in text  # a failed benchmark says so, never vanishes
    assert "| ingest throughput (chunks/s) | 20.0 | 18.2 | 0.91 | ratio >= 0.85 | yes |" in text
    assert "P99 x1.10" in text and "temporal +4 MB" in text
    assert "Fault: postgres_restart at 1890s." in text
    assert "(MB per hour, least squares): worker-llm +709, temporal -3." in text
    assert "Disk growth per 1,000 requests: temporal +34.7 MB, index +0.1 MB." in text
    assert "| answer (client) | generate dispatch | 100 | 4.00 | 9.00 |" in text  # the hops
    assert "- serve-c1-0: HTTP 429" in text
    assert "How to read: the rows." in text and "| answer | 0 100 |" in text


def test_intake_figures_are_summarised_by_their_worst_format_against_the_targets() -> None:
    from bench.report import intake_summary

    figures = {
        "today": {"html": {"words": 0.79, "headings": 0.55, "cells": 0.7, "phrases": None}},
        "new": {
            "html": {"words": 0.999, "headings": 0.98, "cells": 1.0, "phrases": 1.0},
            "xlsx": {"words": 0.96, "headings": 0.96, "cells": 0.97, "phrases": 0.9},
            "all": {"words": 0.5, "headings": 0.5, "cells": 0.5, "phrases": 0.5},
        },
    }
    rows = {r["figure"]: r for r in intake_summary({"figures": figures})}
    words = rows["intake: words recall, worst format (xlsx)"]
    assert words["durable-rag"] == 0.96 and words["met"] is False
    headings = rows["intake: headings recall, worst format (xlsx)"]
    assert headings["met"] is True
    assert rows["intake: phrases recall, worst format (xlsx)"]["met"] is False
    assert intake_summary({}) == []
