"""`make bench`: run every benchmark and write BENCHMARKS.md.

    .venv/bin/python bench/report.py [--only ingest,answer,...] [--soak-duration 60]
                                     [--output BENCHMARKS.md]

Runs each benchmark in its own process (each starts its services on free ports and loads its own
models; one process each keeps one's memory from skewing the next), with `--json`, and composes
their figures into one Markdown file: the machine, a summary of every figure beside its plain-loop
baseline or target, and each benchmark's table. Long runs recorded once (the 30-minute soak, the
full fault matrix) are kept as JSON under bench/results/ and rendered from there, so rerunning
`make bench` never loses them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"

# name -> (script, extra arguments)
BENCHMARKS: dict[str, tuple[str, list[str]]] = {
    "ingest": ("bench/ingest.py", []),
    "embedding": ("bench/embedding.py", []),
    "answer": ("bench/answer.py", []),
    "serving": ("bench/serving.py", []),
    "codec": ("bench/codec.py", []),
    "dispatch": ("bench/dispatch.py", []),
    "forget": ("bench/forget.py", []),
    "vector_search": ("bench/vector_search.py", []),
    "retrieval": ("bench/retrieval.py", []),
    "intake": ("bench/intake.py", ["--search"]),
    "soak": ("bench/soak.py", ["--window", "15"]),
}


def machine() -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = 0.0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = int(line.split()[1]) / 1024 / 1024
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(),
        "cpu": model or platform.processor() or platform.machine(),
        "memory_gib": round(memory, 1),
        "python": platform.python_version(),
        "os": f"{platform.system()} {platform.release()}",
    }


def run(name: str, out: Path, extra: list[str]) -> dict[str, Any]:
    """Run one benchmark; its figures, or why there are none."""
    script, args = BENCHMARKS[name]
    target = out / f"{name}.json"
    log = out / f"{name}.log"
    print(f"\n=== {name}: {script} {' '.join(args + extra)}", flush=True)
    began = time.monotonic()
    with log.open("w") as handle:
        proc = subprocess.run(
            [sys.executable, str(ROOT / script), *args, *extra, "--json", str(target)],
            cwd=ROOT,
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
    text = log.read_text(errors="replace")
    print(text[-4000:], flush=True)
    if target.exists():
        figures: dict[str, Any] = json.loads(target.read_text())
    else:
        tail = "\n".join(text.splitlines()[-5:])
        figures = {"name": name, "error": f"exit {proc.returncode}: {tail}"}
    figures["run_seconds"] = time.monotonic() - began
    return figures


# --- rendering (pure: tested in tests/bench/test_report.py) --------------------------------------


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"
    if isinstance(value, dict):
        return ", ".join(f"{k} {_fmt(v)}" for k, v in value.items())
    return str(value)


def table(rows: list[dict[str, Any]], skip: tuple[str, ...] = ()) -> str:
    if not rows:
        return "(no rows)\n"
    keys = [k for k in rows[0] if k not in skip]
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(_fmt(r.get(k, "")) for k in keys) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def summary(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per headline figure: the baseline beside it, the ratio, the target."""
    rows: list[dict[str, Any]] = []
    ingest = results.get("ingest", {})
    if "rows" in ingest:
        plain, flow = ingest["rows"][0], ingest["rows"][1]
        rows.append({
            "figure": "ingest throughput (chunks/s)",
            "plain-loop baseline": plain["chunks_per_s"],
            "durable-rag": flow["chunks_per_s"],
            "ratio": ingest["ratio"],
            "target": "ratio >= 0.85",
            "met": ingest["ratio"] >= 0.85,
        })  # fmt: skip
    answer = results.get("answer", {})
    if "rows" in answer:
        plain, flow = answer["rows"][0], answer["rows"][1]
        for q in ("p50", "p99"):
            rows.append({
                "figure": f"answer latency {q.upper()} (ms)",
                "plain-loop baseline": plain[f"{q}_ms"],
                "durable-rag": flow[f"{q}_ms"],
                "ratio": flow[f"{q}_ms"] / plain[f"{q}_ms"] if plain[f"{q}_ms"] else math.nan,
                "target": "overhead <= 15 ms" if q == "p50" else "",
                "met": answer["overhead_p50_ms"] <= 15 if q == "p50" else "",
            })  # fmt: skip
    rows += serving_summary(results.get("serving", {}))
    codec = results.get("codec", {})
    if codec.get("rows"):
        worst_ms = codec["worst_seal_plus_open_us_p50"] / 1000
        answer_ms = codec.get("answer_p50_ms")
        rows.append({
            "figure": "payload encryption: seal + open per answer (ms), worst recorded answer",
            "plain-loop baseline": answer_ms or "",
            "durable-rag": worst_ms,
            "ratio": worst_ms / answer_ms if answer_ms else math.nan,
            "target": "under 1% of an answer",
            "met": bool(answer_ms) and worst_ms / answer_ms < 0.01,
        })  # fmt: skip
    dispatch = results.get("dispatch", {})
    if "rows" in dispatch:
        ours, defaults = dispatch["rows"][0], dispatch["rows"][1]
        rows.append({
            "figure": f"workflow of {dispatch['activities']} no-op activities P50 (ms)",
            "plain-loop baseline": f"{defaults['p50_ms']:.1f} (dev server defaults)",
            "durable-rag": ours["p50_ms"],
            "ratio": dispatch["ratio_p50"],
            "target": "ratio < 1",
            "met": dispatch["ratio_p50"] < 1,
        })  # fmt: skip
    forget = results.get("forget", {})
    if "rows" in forget:
        ours, defaults = forget["rows"][0], forget["rows"][1]
        rows.append({
            "figure": "a deleted run's history and visibility record gone, P50 (s)",
            "plain-loop baseline": f"{defaults['text_gone_p50_s']:.1f} (dev server defaults)",
            "durable-rag": ours["text_gone_p50_s"],
            "ratio": forget["ratio_p50"],
            "target": "ratio < 1",
            "met": forget["ratio_p50"] < 1,
        })  # fmt: skip
    vectors = results.get("vector_search", {})
    for row in vectors.get("rows", []):
        p99 = row.get("p99_ms", math.nan)
        chunks = f"{row.get('size', '?'):,} chunks" + (
            ", one tenant" if row.get("tenants") == 1 else ""
        )
        during = row.get("state") == "during optimize"
        rows.append({
            "figure": f"vector search P99 (ms), {chunks}, {row.get('state', '')}, "
                      f"filter {row.get('filter', '')}"
                      + (f", {row.get('degraded', '?')} degraded" if during else "")
                      + (f", {row['optimize_rounds']} optimizes pooled (each: "
                         + " / ".join(f"x{r:.2f}" for r in row["p99_ratio_per_round"]) + ")"
                         if during and row.get("p99_ratio_per_round") else ""),
            "plain-loop baseline": row.get("idle_p99_ms", "") if during else "",
            "durable-rag": p99,
            "ratio": row["p99_ratio_to_idle"] if during else p99 / 50.0,
            "target": row.get("target", "P99 < 50 ms (ratio < 1)"),
            "met": row.get("target_met", p99 < 50.0),
        })  # fmt: skip
    rows += intake_summary(results.get("intake", {}))
    soak = results.get("soak", {})
    if soak.get("windows"):
        rows.append({
            "figure": f"soak {soak['duration_s']:.0f} s: P99 drift (last / first window)",
            "plain-loop baseline": "",
            "durable-rag": soak["p99_drift"],
            "ratio": soak["p99_drift"],
            "target": "no failed request",
            "met": soak["failed"] == 0,
        })  # fmt: skip
    return rows


# Issue 37's targets for the new parsers, on every format where the figure exists.
INTAKE_TARGETS = {"words": 0.97, "headings": 0.9, "cells": 0.95, "phrases": 0.95}


def intake_summary(intake: dict[str, Any]) -> list[dict[str, Any]]:
    """bench/intake.py: each recall's worst format for the new parsers, beside today's."""
    figures = intake.get("figures", {})
    if "new" not in figures:
        return []
    rows: list[dict[str, Any]] = []
    for figure, target in INTAKE_TARGETS.items():
        by_format = {
            fmt: shares[figure]
            for fmt, shares in figures["new"].items()
            if fmt != "all" and shares.get(figure) is not None
        }
        if not by_format:
            continue
        worst = min(by_format, key=lambda fmt: by_format[fmt])
        today = figures.get("today", {}).get(worst, {}).get(figure)
        rows.append({
            "figure": f"intake: {figure} recall, worst format ({worst})",
            "plain-loop baseline": f"{today:.3f} (today's parser)" if today is not None else "",
            "durable-rag": by_format[worst],
            "ratio": by_format[worst] / today if today else math.nan,
            "target": f">= {target} on every format",
            "met": by_format[worst] >= target,
        })  # fmt: skip
    return rows


def serving_summary(serving: dict[str, Any]) -> list[dict[str, Any]]:
    """bench/serving.py's four figures, each beside its baseline and target."""
    rows: list[dict[str, Any]] = []
    if not serving.get("rows"):
        return rows
    n = serving

    def ratio(a: Any, b: Any) -> float:
        return (
            a / b if isinstance(a, int | float) and isinstance(b, int | float) and b else math.nan
        )

    if n.get("answer_overhead_p50_ms") is not None:
        p50, p99 = n["answer_overhead_p50_ms"], n["answer_overhead_p99_ms"]
        rows.append({
            "figure": "serving: answer overhead P50 / P99 (ms), client, paired with a plain function",
            "plain-loop baseline": n["answer_plain_p50_ms"],
            "durable-rag": f"+{p50:.1f} / +{p99:.1f}",
            "ratio": ratio(n["answer_flow_p50_ms"], n["answer_plain_p50_ms"]),
            "target": "P50 <= 15 ms; P99 <= 40 ms",
            "met": p50 <= 15 and p99 <= 40,
        })  # fmt: skip
    if n.get("ttft_overhead_p50_ms") is not None:
        over = n["ttft_overhead_p50_ms"]
        rows.append({
            "figure": "serving: time to first token P50 (ms), gateway SSE against a plain pipeline",
            "plain-loop baseline": n["ttft_plain_p50_ms"],
            "durable-rag": n["ttft_gateway_p50_ms"],
            "ratio": ratio(n["ttft_gateway_p50_ms"], n["ttft_plain_p50_ms"]),
            "target": "overhead <= 40 ms",
            "met": over <= 40,
        })  # fmt: skip
    if n.get("search_ratio_p50") is not None:
        rows.append({
            "figure": "serving: search P50 (ms) during an ingest, against idle",
            "plain-loop baseline": n["search_idle_p50_ms"],
            "durable-rag": n["search_ingest_p50_ms"],
            "ratio": n["search_ratio_p50"],
            "target": "ratio <= 2.0",
            "met": n["search_ratio_p50"] <= 2.0,
        })  # fmt: skip
    if n.get("concurrent_ratio") is not None:
        done, total = n["concurrent_completed"], n["concurrent_streams"]
        rows.append({
            "figure": f"serving: {n.get('concurrency', '?')} concurrent streams, tokens/s "
                      f"({done}/{total} completed with tokens)",
            "plain-loop baseline": n["engine_tokens_per_s"],
            "durable-rag": n["concurrent_tokens_per_s"],
            "ratio": n["concurrent_ratio"],
            "target": "all complete; ratio >= 0.9",
            "met": done == total and n["concurrent_ratio"] >= 0.9,
        })  # fmt: skip
    return rows


def soak_section(soak: dict[str, Any]) -> str:
    windows = [
        {
            "window": f"{w['start_s']:.0f} s",
            "requests": w["requests"],
            "req/s": w["throughput"],
            "failed": w["failed"],
            "degraded": w["degraded"],
            "P50 ms": w["p50_ms"],
            "P99 ms": w["p99_ms"],
            **{f"{part} MB": mb for part, mb in w["rss_mb"].items()},
        }
        for w in soak["windows"]
    ]
    drift = ", ".join(f"{p} {d:+.0f} MB" for p, d in soak["rss_drift_mb"].items())
    kinds = ", ".join(f"{k} {v}" for k, v in soak.get("by_kind", {}).items())
    lines = [
        table(windows) + f"\n{soak['requests']} requests ({kinds}), {soak['failed']} failed, "
        f"{soak['degraded']} degraded. Drift, first window to last: P99 x"
        f"{soak['p99_drift']:.2f}; RSS {drift}.\n"
    ]
    if soak.get("fault"):
        lines.append(f"Fault: {soak['fault']}.\n")
    if soak.get("documents"):
        lines.append(
            f"Ingests: new versions of {soak['documents']} documents in turn (the index holds a "
            "steady amount).\n"
        )
    if soak.get("degradations"):
        lines.append(
            "Degraded by fallback: "
            + "; ".join(f"{why} ({n})" for why, n in sorted(soak["degradations"].items()))
            + ".\n"
        )
    if soak.get("rss_slope_mb_per_hour"):
        slopes = ", ".join(f"{p} {v:+.0f}" for p, v in soak["rss_slope_mb_per_hour"].items())
        lines.append(f"RSS slope over the second half (MB per hour, least squares): {slopes}.\n")
    if soak.get("pss_slope_mb_per_hour"):
        slopes = ", ".join(f"{p} {v:+.0f}" for p, v in soak["pss_slope_mb_per_hour"].items())
        lines.append(
            f"PSS slope over the second half (MB per hour; a page shared by processes counted "
            f"once): {slopes}.\n"
        )
    if soak.get("store_growth_mb_per_1000"):
        growth = ", ".join(f"{s} {v:+.1f} MB" for s, v in soak["store_growth_mb_per_1000"].items())
        lines.append(f"Disk growth per 1,000 requests: {growth}.\n")
    return "".join(lines)


def render(results: dict[str, dict[str, Any]], recorded: dict[str, dict[str, Any]],
           host: dict[str, Any], when: str) -> str:  # fmt: skip
    out = [
        "# Benchmarks\n",
        f"Written by `make bench` (bench/report.py) on {when}. Every figure comes from one run "
        "on the machine below; ratios compare the two sides measured in that same run, never "
        "figures from different runs. Rerun with `make bench`.\n",
        f"**Machine:** {host['cpus']} CPUs ({host['cpu']}), {host['memory_gib']} GiB memory, "
        f"{host['os']}, Python {host['python']}; embedded stack (Temporal dev server on SQLite, "
        "embedded Postgres, Qdrant Edge, packaged MiniLM, vLLM CPU on SmolLM2-135M); no GPU.\n",
        "## Summary\n",
        table(summary(results)),
    ]
    sections = [
        ("ingest", "Ingest: IngestWorkflow against the same steps in a plain loop"),
        ("embedding", "Encoder calls: FlagEmbedding's trial batch run twice, and once"),
        ("answer", "Answer: AnswerWorkflow against the same steps in a plain async function"),
        ("serving", "Serving: answers, first tokens, search under ingest, concurrent streams"),
        ("codec", "Payload encryption: sealing and opening an answer's payloads"),
        ("dispatch", "Task dispatch: the embedded dev server's settings against its defaults"),
        ("forget", "Forgetting: how long a deleted run's text stays on the Temporal server"),
        ("vector_search", "Vector search on the embedded index, with filters"),
        ("retrieval", "Retrieval quality (labelled sets)"),
        ("intake", "Document intake: what each parser keeps of 157 public documents"),
        ("soak", "Soak (smoke run)"),
    ]
    for name, title in sections:
        figures = results.get(name)
        if figures is None:
            continue
        out.append(f"## {title}\n")
        if "error" in figures:
            out.append(f"Did not finish: `{figures['error']}`\n")
            continue
        if name == "soak":
            out.append(soak_section(figures))
        else:
            out.append(table(figures.get("rows", [])))
        if figures.get("note"):
            out.append("\n" + figures["note"] + "\n")
        if figures.get("dispatches"):
            out.append(
                "\nDispatches per workflow (remote activity dispatches before generate: count):\n"
            )
            out.append(
                table([{"flow": part, **counts} for part, counts in figures["dispatches"].items()])
            )
        if figures.get("hops"):
            out.append("\nPer hop (from the workflows' histories and their own timings_ms):\n")
            out.append(table(figures["hops"]))
        if figures.get("problems"):
            out.append("\nProblems seen:\n\n" + "".join(f"- {p}\n" for p in figures["problems"]))
        extras = {
            k: v
            for k, v in figures.items()
            if k
            not in (
                "name",
                "rows",
                "windows",
                "machine",
                "hops",
                "problems",
                "note",
                "dispatches",
                "figures",
            )
            and not isinstance(v, list)
        }
        if extras and name != "soak":
            out.append("\n" + "; ".join(f"{k}: {_fmt(v)}" for k, v in extras.items()) + "\n")
    for name, figures in sorted(recorded.items()):
        out.append(f"## Recorded: {figures.get('title', name)}\n")
        if figures.get("note"):
            out.append(figures["note"] + "\n\n")
        if figures.get("name") == "soak":
            out.append(soak_section(figures))
        else:
            out.append(table(figures.get("rows", []), skip=("details",)))
    return "\n".join(out)


def recorded_runs() -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(RESULTS.glob("*.json"))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(BENCHMARKS))
    parser.add_argument("--soak-duration", type=float, default=60.0)
    parser.add_argument("--output", type=Path, default=ROOT / "BENCHMARKS.md")
    args = parser.parse_args()
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; known: {', '.join(BENCHMARKS)}")
    out = ROOT / ".data" / "bench"
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, Any]] = {}
    for name in names:
        extra = ["--duration", str(args.soak_duration)] if name == "soak" else []
        results[name] = run(name, out, extra)
    text = render(results, recorded_runs(), machine(), time.strftime("%Y-%m-%d %H:%M UTC",
                                                                      time.gmtime()))  # fmt: skip
    args.output.write_text(text)
    print(f"\nwrote {args.output}")
    failed = [n for n, r in results.items() if "error" in r]
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
