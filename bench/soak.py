"""Soak: a sustained mixed load on the embedded stack, watching for drift (R3).

    .venv/bin/python bench/soak.py [--duration SECONDS] [--window SECONDS] [--json PATH]

Every part is a real process (bench/stack.py): Temporal dev server, Postgres, orchestrator, index
and LLM workers. The load (bench/load.py) runs for `--duration` (default 10 minutes): two clients
asking questions, one ingesting a new document at a time, one conversation. Per time window it
reports the requests finished, throughput, failures, latency P50/P99, and the resident memory of
each part (with its child processes); the windows cover the load's own time, and requests still
in flight when it stops count in the last one. At the end: the drift of P99 and of each part's
RSS from the first window to the last; each part's RSS slope over the second half of the run (MB
per hour, a least-squares fit: past the warm-up, what a week of it would add); and each store's
growth on disk per 1,000 requests (Temporal's database, Postgres, the index, the logs). A growing
RSS or P99 under a steady load is a leak or a slowdown that would take a production service down
after hours.

P99 drifts by kind of request, over the requests *started* in the first and the last window: an
answer that takes longer than a window finishes in the next, so a first window counted by
completion held ingests alone (P99 under a second) and a later one answers (tens of seconds on 2
busy CPUs): a "drift" of x28 with nothing slowing down.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.load import (  # noqa: E402
    MixedLoad,
    Outcome,
    degradations_by_kind,
    format_kinds,
    latency_summary,
)
from bench.stack import ProcessStack, quiet_runtime, started  # noqa: E402
from ragkit import disk  # noqa: E402
from ragkit.settings import Settings  # noqa: E402
from ragkit.temporal import connect  # noqa: E402

MB = 1024 * 1024


@dataclass
class Window:
    start_s: float
    requests: int
    failed: int
    degraded: int
    throughput: float  # requests finished per second
    p50_ms: float
    p99_ms: float
    rss_mb: dict[str, float]
    degradations: dict[str, int] = field(default_factory=dict)  # requests per kind


@dataclass
class SoakReport:
    duration_s: float
    window_s: float
    windows: list[Window] = field(default_factory=list)
    requests: int = 0
    failed: int = 0
    degraded: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    # Degraded requests per degradation kind (bench/load.degradation_kinds; a request with two
    # kinds counts under both), and one message of each kind: why it fell back.
    degradations: dict[str, int] = field(default_factory=dict)
    examples: dict[str, str] = field(default_factory=dict)
    fault: str = ""  # "<name> at <seconds>s", or none
    documents: int = 0  # the ingest client's documents (bench/load.MixedLoad); 0: all new
    # Per kind of request: P99 of those started in the last window over those started in the
    # first (1.0: no drift); a kind with no request started in either is left out.
    p99_drift_by_kind: dict[str, float] = field(default_factory=dict)
    # Each part's RSS over the run: (seconds from the load's start, bytes per part).
    rss_samples: list[tuple[float, dict[str, int]]] = field(default_factory=list)
    # The same for PSS (a shared page counts 1/n in each of its n processes): what a part holds.
    pss_samples: list[tuple[float, dict[str, int]]] = field(default_factory=list)
    # Each store's size on disk (bytes) once the seed is in, and at the end.
    stores_before: dict[str, int] = field(default_factory=dict)
    stores_after: dict[str, int] = field(default_factory=dict)

    @property
    def degraded_rate(self) -> float:
        return self.degraded / self.requests if self.requests else 0.0

    @property
    def p99_drift(self) -> float:
        """The largest drift of any kind's P99, first window to last (1.0: no drift)."""
        return max(self.p99_drift_by_kind.values(), default=float("nan"))

    def rss_drift_mb(self) -> dict[str, float]:
        first, last = self.windows[0].rss_mb, self.windows[-1].rss_mb
        return {part: last.get(part, 0.0) - mb for part, mb in first.items()}

    def rss_slope_mb_per_hour(self) -> dict[str, float]:
        """Each part's RSS slope over the run's second half (MB per hour, least squares): the
        first half holds the warm-up (caches filling, the engine's first batches)."""
        return self._slopes(self.rss_samples)

    def pss_slope_mb_per_hour(self) -> dict[str, float]:
        """The same for PSS: Postgres's RSS grows as its backends touch shared buffers; its PSS
        only with memory it adds."""
        return self._slopes(self.pss_samples)

    def _slopes(self, samples: list[tuple[float, dict[str, int]]]) -> dict[str, float]:
        half = self.duration_s / 2
        late = [(at, sizes) for at, sizes in samples if at >= half]
        parts = sorted({part for _, sizes in late for part in sizes})
        return {
            part: slope_per_hour([(at, sizes[part] / MB) for at, sizes in late if part in sizes])
            for part in parts
        }

    def store_growth_mb_per_1000(self) -> dict[str, float]:
        """Each store's growth on disk per 1,000 requests (MB)."""
        if not self.requests:
            return {}
        return {
            store: (self.stores_after.get(store, 0) - size) / MB * 1000 / self.requests
            for store, size in self.stores_before.items()
        }


def slope_per_hour(points: list[tuple[float, float]]) -> float:
    """The least-squares slope of (seconds, value) points, per hour; NaN under two times."""
    if len({at for at, _ in points}) < 2:
        return math.nan
    n = len(points)
    mean_t = sum(at for at, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    covariance = sum((at - mean_t) * (v - mean_v) for at, v in points)
    variance = sum((at - mean_t) ** 2 for at, _ in points)
    return covariance / variance * 3600


# The stores of the embedded stack, under its data folder (ragkit.settings.Settings.data_dir).
def store_sizes(settings: Settings) -> dict[str, int]:
    """Bytes on disk of each store (ragkit/disk.py: what `durable-rag status` prints)."""
    return {u.store: u.bytes for u in disk.usage(disk.stores(settings))}


def _windows(
    outcomes: list[Outcome],
    began: float,
    stopped: float,
    window: float,
    rss: list[tuple[float, dict[str, int]]],
) -> list[Window]:
    """Windows over the load's own time, `began` to `stopped`. Counted from the last completion
    instead, a drain longer than half a window made a window of its own: a handful of requests
    in flight at the stop, compared as if it were a window of steady load."""
    windows: list[Window] = []
    count = max(1, round((stopped - began) / window))
    for i in range(count):
        lo, hi = began + i * window, began + (i + 1) * window
        done = [o for o in outcomes if lo <= o.started + o.seconds < hi]
        if i == count - 1:  # the drain's stragglers belong to the last window
            done += [o for o in outcomes if o.started + o.seconds >= hi]
        p50, p99 = latency_summary(done)
        samples = [sizes for at, sizes in rss if lo <= at < hi] or [rss[-1][1]]
        last = samples[-1]
        windows.append(
            Window(
                start_s=i * window,
                requests=len(done),
                failed=sum(1 for o in done if o.status == "failed"),
                degraded=sum(1 for o in done if o.status == "degraded"),
                throughput=len(done) / window,
                p50_ms=p50,
                p99_ms=p99,
                rss_mb={part: size / MB for part, size in last.items()},
                degradations=degradations_by_kind(done),
            )
        )
    return windows


def p99_drift_by_kind(
    outcomes: list[Outcome], began: float, stopped: float, window: float
) -> dict[str, float]:
    """Each kind's P99 over the requests started in the last window, over those started in the
    first: like compared with like, whenever they finish."""
    first = [o for o in outcomes if began <= o.started < began + window]
    last = [o for o in outcomes if stopped - window <= o.started < stopped]
    drift: dict[str, float] = {}
    for kind in sorted({o.kind for o in first} & {o.kind for o in last}):
        _, before = latency_summary([o for o in first if o.kind == kind])
        _, after = latency_summary([o for o in last if o.kind == kind])
        if before > 0 and not math.isnan(after):  # all failed: a NaN P99, nothing to compare
            drift[kind] = after / before
    return drift


async def strike(stack: ProcessStack, name: str, after: float, outage: float) -> None:
    """Inject the fault `name` (bench/faults.py) `after` seconds in; an outage heals `outage`
    seconds later, a restart at once."""
    from bench.faults import FAULTS

    fault = FAULTS[name]
    await asyncio.sleep(after)
    print(f"fault at {after:.0f}s: {fault.what}", flush=True)
    await asyncio.to_thread(fault.inject, stack)
    if fault.outage:
        await asyncio.sleep(outage)
    await asyncio.to_thread(fault.heal, stack)


async def run_soak(
    stack: ProcessStack,
    duration: float,
    window: float,
    fault: str = "",
    fault_at: float = 0.5,
    documents: int = 0,
) -> SoakReport:
    client = await connect(stack.settings, quiet_runtime())
    load = MixedLoad(
        client, stack.settings, "soak", stack.work / "corpus" / "soak", documents=documents
    )
    await load.seed()
    stores_before = await asyncio.to_thread(store_sizes, stack.settings)
    stop = asyncio.Event()
    rss: list[tuple[float, dict[str, int]]] = []
    pss: list[tuple[float, dict[str, int]]] = []
    began = time.monotonic()
    running = asyncio.create_task(load.run(stop))
    striking = (
        asyncio.create_task(strike(stack, fault, fault_at * duration, window / 2))
        if fault
        else None
    )
    while time.monotonic() - began < duration:
        rss.append((time.monotonic(), await asyncio.to_thread(stack.rss)))
        pss.append((time.monotonic(), await asyncio.to_thread(stack.pss)))
        await asyncio.sleep(min(5.0, window / 3))
    stop.set()
    stopped = time.monotonic()
    await running
    if striking is not None:
        await striking
    rss.append((time.monotonic(), await asyncio.to_thread(stack.rss)))
    outcomes = load.ledger.outcomes
    report = SoakReport(duration_s=duration, window_s=window)
    report.fault = f"{fault} at {fault_at * duration:.0f}s" if fault else ""
    report.documents = documents
    report.windows = _windows(outcomes, began, stopped, window, rss)
    report.p99_drift_by_kind = p99_drift_by_kind(outcomes, began, stopped, window)
    report.rss_samples = [(at - began, sizes) for at, sizes in rss]
    report.pss_samples = [(at - began, sizes) for at, sizes in pss]
    report.stores_before = stores_before
    report.stores_after = await asyncio.to_thread(store_sizes, stack.settings)
    report.requests = len(outcomes)
    report.failed = sum(1 for o in outcomes if o.status == "failed")
    report.degraded = sum(1 for o in outcomes if o.status == "degraded")
    report.degradations = degradations_by_kind(outcomes)
    for o in outcomes:
        report.by_kind[o.kind] = report.by_kind.get(o.kind, 0) + 1
        for kind, message in o.degradations.items():
            report.examples.setdefault(kind, f"{o.kind}: {message[:200]}")
    return report


def format_report(report: SoakReport) -> str:
    parts = list(report.windows[0].rss_mb)
    head = f"{'window':>7} {'requests':>8} {'req/s':>6} {'failed':>6} {'degraded':>8} " \
           f"{'P50 ms':>8} {'P99 ms':>8} " + " ".join(f"{p[:12]:>12}" for p in parts)  # fmt: skip
    lines = [head + "   (RSS MB)  degraded by kind"]
    for w in report.windows:
        lines.append(
            f"{w.start_s:>6.0f}s {w.requests:>8} {w.throughput:>6.2f} {w.failed:>6} "
            f"{w.degraded:>8} {w.p50_ms:>8.0f} {w.p99_ms:>8.0f} "
            + " ".join(f"{w.rss_mb.get(p, 0):>12.0f}" for p in parts)
            + f"   {format_kinds(w.degradations)}"
        )
    drift = report.rss_drift_mb()
    lines.append(
        f"\n{report.requests} requests ({', '.join(f'{k} {v}' for k, v in report.by_kind.items())})"
        f", {report.failed} failed, {report.degraded} degraded"
    )
    lines.append(f"fault: {report.fault or 'none'}")
    lines.append(
        f"ingested: new versions of {report.documents} documents in turn"
        if report.documents
        else "ingested: a new document each time"
    )
    lines.append(f"degraded by kind: {format_kinds(report.degradations)}")
    lines += [f"    {kind}, e.g. {why}" for kind, why in report.examples.items()]
    by_kind = ", ".join(f"{k} x{d:.2f}" for k, d in report.p99_drift_by_kind.items())
    lines.append(
        f"drift, first window to last: P99 x{report.p99_drift:.2f} ({by_kind or 'no kind in both'}"
        "; by start); RSS " + ", ".join(f"{p} {d:+.0f} MB" for p, d in drift.items())
    )
    slopes = report.rss_slope_mb_per_hour()
    lines.append(
        "RSS slope over the second half (MB/hour, least squares): "
        + ", ".join(f"{p} {v:+.0f}" for p, v in slopes.items())
    )
    if report.pss_samples:
        lines.append(
            "PSS slope over the second half (MB/hour; a shared page counted once): "
            + ", ".join(f"{p} {v:+.0f}" for p, v in report.pss_slope_mb_per_hour().items())
        )
    growth = report.store_growth_mb_per_1000()
    lines.append(
        "stores on disk, after the seed -> the end (MB), growth per 1,000 requests: "
        + ", ".join(
            f"{store} {report.stores_before[store] / MB:.0f} -> "
            f"{report.stores_after.get(store, 0) / MB:.0f} ({growth.get(store, math.nan):+.1f})"
            for store in report.stores_before
        )
    )
    return "\n".join(lines)


def to_json(report: SoakReport) -> dict[str, object]:
    return {
        "name": "soak",
        **asdict(report),
        "p99_drift": report.p99_drift,
        "degraded_rate": report.degraded_rate,
        "rss_drift_mb": report.rss_drift_mb(),
        "rss_slope_mb_per_hour": report.rss_slope_mb_per_hour(),
        "pss_slope_mb_per_hour": report.pss_slope_mb_per_hour(),
        "store_growth_mb_per_1000": report.store_growth_mb_per_1000(),
    }


async def main_async(
    duration: float,
    window: float,
    json_path: Path | None,
    fault: str = "",
    fault_at: float = 0.5,
    documents: int = 0,
) -> int:
    stack = await started("soak")
    try:
        report = await run_soak(stack, duration, window, fault, fault_at, documents)
    finally:
        await asyncio.to_thread(stack.close)
    print(f"\nSoak: {duration:.0f} s of mixed load, windows of {window:.0f} s, "
          f"{os.cpu_count()} CPUs")  # fmt: skip
    print(format_report(report))
    if json_path:
        json_path.write_text(json.dumps(to_json(report)))
    return 0 if report.failed == 0 else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=600.0, help="seconds (default 600)")
    parser.add_argument("--window", type=float, default=0.0, help="seconds; default duration/10")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--fault", default="", help="a fault of bench/faults.py to inject once (default none)"
    )
    parser.add_argument(
        "--fault-at", type=float, default=0.5, help="when, as a share of --duration (0.5)"
    )
    parser.add_argument(
        "--documents",
        type=int,
        default=0,
        help="ingest new versions of this many documents in turn, so the index holds a steady "
        "amount (default 0: every ingest a new document)",
    )
    args = parser.parse_args()
    if args.documents < 0:
        parser.error("--documents must be 0 or more")
    if args.duration < 10:
        parser.error("--duration must be at least 10 seconds")
    if args.fault:
        from bench.faults import FAULTS

        if args.fault not in FAULTS:
            parser.error(f"--fault: no fault {args.fault!r}; known: {', '.join(sorted(FAULTS))}")
    if not 0 < args.fault_at < 1:
        parser.error("--fault-at must be between 0 and 1")
    window = args.window or max(5.0, args.duration / 10)
    sys.exit(
        asyncio.run(
            main_async(args.duration, window, args.json, args.fault, args.fault_at, args.documents)
        )
    )


if __name__ == "__main__":
    main()
