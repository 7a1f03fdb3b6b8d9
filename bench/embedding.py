"""Encoder calls with FlagEmbedding's trial batch run twice (as the library does) and once (our
TrialBatchReuse), on the same loaded models, in one run.

    .venv/bin/python bench/embedding.py [--rounds N] [--json PATH]

FlagEmbedding encodes the longest `batch_size` inputs once to probe memory, then again as the
first batch. `ragkit.embedding.TrialBatchReuse` hands the second forward the first's output. The
table shows, per call size, the median time of a call with the library's behaviour and with ours,
alternated round by round, and their ratio; the outputs are compared bit for bit.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

from ragkit.embedding import Embedder, load_embedder  # noqa: E402
from ragkit.rerank import PACKAGED_RERANKER, Reranker, load_reranker  # noqa: E402
from ragkit.settings import PACKAGED_MINILM, Settings  # noqa: E402

SENTENCE = "The lighthouse keeper lit the lamp at dusk and logged the ships passing the reef. "


def passages(count: int) -> list[str]:
    """Passages of 60 to 480 tokens, as chunks of a 512-token budget run."""
    return [SENTENCE * (4 + (i * 7) % 28) for i in range(count)]


def timed(
    call: Callable[[], Any], rounds: int, owner: Embedder | Reranker
) -> tuple[float, float, bool]:
    """Median seconds of `call` with the library's double trial batch and with ours, alternated,
    and whether the two gave equal outputs."""
    wrapper = owner._forwards
    model = owner._model
    library: list[float] = []
    ours: list[float] = []
    outputs: dict[str, Any] = {}
    for _ in range(rounds):
        for mode, times in (("library", library), ("ours", ours)):
            model.model = wrapper.model if mode == "library" else wrapper
            began = time.perf_counter()
            outputs[mode] = call()
            times.append(time.perf_counter() - began)
    model.model = wrapper
    same = np.array_equal(np.asarray(outputs["library"]), np.asarray(outputs["ours"]))
    return statistics.median(library), statistics.median(ours), same


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path, help="also write the figures here as JSON")
    args = parser.parse_args()
    batch = Settings().embedding.batch_size
    embedder = load_embedder(PACKAGED_MINILM, "cpu", 512, batch)
    reranker = load_reranker(PACKAGED_RERANKER, Path(tempfile.mkdtemp()), "cpu")
    embedder.embed_passages(passages(2))  # warm up
    rows: list[tuple[str, float, float, bool]] = []
    cases: list[tuple[str, Callable[[], Any], Embedder | Reranker]] = [
        ("1 query", lambda: embedder.embed_query("when was the reef light built?"), embedder),
        (
            f"{batch} passages (one batch)",
            lambda: embedder.embed_passages(passages(batch)),
            embedder,
        ),
        ("16 passages (an ingest batch)", lambda: embedder.embed_passages(passages(16)), embedder),
        ("64 passages (one call)", lambda: embedder.embed_passages(passages(64)), embedder),
        ("rerank 20 candidates", lambda: reranker.score("the reef light?", passages(20)), reranker),
    ]
    for name, call, owner in cases:
        library, ours, same = timed(call, args.rounds, owner)
        rows.append((name, library, ours, same))
        print(f"  {name}: {library * 1000:.0f} ms -> {ours * 1000:.0f} ms", flush=True)

    print(
        f"\nEncoder calls, packaged MiniLM and its reranker on CPU, {os.cpu_count()} CPUs, "
        f"embedding batch {batch}, median of {args.rounds} rounds"
    )
    print(f"{'call':<32} {'library ms':>10} {'ours ms':>8} {'speed-up':>8}  outputs")
    for name, library, ours, same in rows:
        print(
            f"{name:<32} {library * 1000:>10.0f} {ours * 1000:>8.0f} {library / ours:>7.2f}x  "
            f"{'identical' if same else 'DIFFER'}"
        )
    if args.json:
        figures = [
            {
                "call": name,
                "library_ms": round(library * 1000, 1),
                "ours_ms": round(ours * 1000, 1),
                "speed_up": round(library / ours, 2),
                "outputs": "identical" if same else "differ",
            }
            for name, library, ours, same in rows
        ]
        args.json.write_text(json.dumps({"name": "embedding", "rows": figures}, indent=2) + "\n")
    if not all(same for *_, same in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
