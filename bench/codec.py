"""Payload encryption: what sealing and opening cost per answer, from one run.

    .venv/bin/python bench/codec.py [--rounds N] [--json PATH]

The payloads of recorded answers (tests/workflows/histories/answer*.json: the workflow's input,
each local activity's result marker, generate's input and result, the answer, memo and summaries)
are what one answer puts through the codec. Each round seals them all with ragkit.codec's
EncryptionCodec (AES-256-GCM) and opens them again, beside a round that only serializes them (the
floor every payload pays anyway); rounds alternate. A worker seals each payload once and opens it
at least once (the workflow reads its activities' results; the client reads the answer), so the
"seal + open" column is the added CPU per answer. Printed against the answer's own latency from
BENCHMARKS.md when there is one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from temporalio.api.common.v1 import Payload  # noqa: E402
from temporalio.client import WorkflowHistory  # noqa: E402

from bench.load import percentile  # noqa: E402
from ragkit.codec import EncryptionCodec, Keyring, payloads_in  # noqa: E402

HISTORIES = ROOT / "tests" / "workflows" / "histories"


def answer_payloads() -> dict[str, list[Payload]]:
    found: dict[str, list[Payload]] = {}
    for path in sorted(HISTORIES.glob("answer*.json")):
        recorded = json.loads(path.read_text())
        history = WorkflowHistory.from_json(recorded.pop("workflowId", path.stem), recorded)
        found[path.stem] = [p for e in history.events for p in payloads_in(e) if p.metadata]
    return found


async def measure(payloads: list[Payload], codec: EncryptionCodec, rounds: int) -> dict[str, Any]:
    seal_us: list[float] = []
    open_us: list[float] = []
    floor_us: list[float] = []
    for _ in range(rounds):
        began = time.perf_counter()
        for p in payloads:
            Payload.FromString(p.SerializeToString())
        floor_us.append((time.perf_counter() - began) * 1e6)
        began = time.perf_counter()
        sealed = await codec.encode(payloads)
        seal_us.append((time.perf_counter() - began) * 1e6)
        began = time.perf_counter()
        opened = await codec.decode(sealed)
        open_us.append((time.perf_counter() - began) * 1e6)
        assert opened == payloads
    size = sum(p.ByteSize() for p in payloads)
    sealed_size = sum(p.ByteSize() for p in await codec.encode(payloads))
    return {
        "payloads": len(payloads),
        "bytes": size,
        "sealed_bytes": sealed_size,
        "serialize_only_us_p50": percentile(floor_us, 0.5),
        "seal_us_p50": percentile(seal_us, 0.5),
        "open_us_p50": percentile(open_us, 0.5),
        "seal_plus_open_us_p50": percentile(
            [s + o for s, o in zip(seal_us, open_us, strict=True)], 0.5
        ),
        "seal_plus_open_us_p99": percentile(
            [s + o for s, o in zip(seal_us, open_us, strict=True)], 0.99
        ),
    }


def answer_p50_ms() -> float | None:
    """The answer's P50 from bench/serving.py's last run in BENCHMARKS.md, if it is there."""
    try:
        text = (ROOT / "BENCHMARKS.md").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("| answer overhead P50") and "workflow P50" in line:
            part = line.split("workflow P50", 1)[1].split(",", 1)[0]
            try:
                return float(part.strip())
            except ValueError:
                return None
    return None


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    codec = EncryptionCodec(Keyring((("k1", os.urandom(32)),)))
    rows = []
    for name, payloads in answer_payloads().items():
        rows.append({"history": name, **await measure(payloads, codec, args.rounds)})
    answer_ms = answer_p50_ms()
    worst = max(r["seal_plus_open_us_p50"] for r in rows)
    print(
        f"\nPayload encryption per answer (AES-256-GCM), {args.rounds} rounds, {os.cpu_count()} CPUs\n"
    )
    keys = list(rows[0])
    widths = {k: max(len(k), *(len(_fmt(r[k])) for r in rows)) for k in keys}
    print("  ".join(k.ljust(widths[k]) for k in keys))
    for r in rows:
        print("  ".join(_fmt(r[k]).ljust(widths[k]) for k in keys))
    share = (
        f"{worst / 1000 / answer_ms:.3%} of an answer's P50 ({answer_ms:.0f} ms)"
        if answer_ms
        else ""
    )
    print(f"\nworst seal + open per answer: {worst:.0f} us {share}")
    return {
        "name": "codec",
        "rounds": args.rounds,
        "rows": rows,
        "worst_seal_plus_open_us_p50": worst,
        "answer_p50_ms": answer_ms,
    }


def _fmt(value: Any) -> str:
    return f"{value:,.1f}" if isinstance(value, float) else str(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=500)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    out = asyncio.run(main_async(args))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
