"""The CUDA check at a GPU worker's start (R30): each disagreement is refused with its fix, and
a worker configured for a GPU on this machine (no GPU, CPU torch) exits before it loads a
model."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from ragkit import cuda
from ragkit.cuda import CudaFacts, CudaMismatch

GOOD = CudaFacts(driver_cuda=(12, 8), torch_cuda=(12, 8), torch_version="2.13.0", visible_gpus=1)


def test_a_matching_machine_passes() -> None:
    cuda.check(GOOD, "the LLM worker")
    newer_driver = CudaFacts((13, 0), (12, 8), "2.13.0", 2)
    cuda.check(newer_driver, "the LLM worker")  # drivers run older runtimes


@pytest.mark.parametrize(
    ("facts", "words"),
    [
        (CudaFacts((12, 8), None, "2.13.0+cpu", 0), ["is a CPU build", "'.[gpu]'"]),
        (CudaFacts(None, (12, 8), "2.13.0", 0), ["no NVIDIA driver answers"]),
        (
            CudaFacts((12, 2), (12, 8), "2.13.0", 1),
            ["supports CUDA up to 12.2", "needs CUDA 12.8", "Upgrade the NVIDIA driver"],
        ),
        (CudaFacts((12, 8), (12, 8), "2.13.0", 0), ["no GPU is visible", "CUDA_VISIBLE_DEVICES"]),
    ],
)
def test_each_disagreement_is_refused_with_its_fix(facts: CudaFacts, words: list[str]) -> None:
    with pytest.raises(CudaMismatch) as refused:
        cuda.check(facts, "the LLM worker")
    message = str(refused.value)
    assert message.startswith("the LLM worker is configured for a GPU, but")
    for word in words:
        assert word in message


def test_this_machine_is_probed_for_real() -> None:
    import torch

    facts = cuda.probe()
    assert facts.torch_version == str(torch.__version__)
    if torch.version.cuda is None:
        assert facts.torch_cuda is None and facts.visible_gpus == 0


@pytest.mark.parametrize(
    ("worker", "env"),
    [
        ("llm", {"DURABLE_RAG_LLM_DEVICE": "cuda"}),
        ("index", {"DURABLE_RAG_EMBEDDING_DEVICE": "cuda"}),
    ],
)
def test_a_worker_configured_for_a_gpu_refuses_to_start_without_one(
    worker: str, env: dict[str, str]
) -> None:
    began = time.monotonic()
    # No Temporal, no Postgres: the check comes before anything is loaded or connected. No GPU is
    # visible to it, on this machine or one that has a GPU: the check must refuse either way.
    done = subprocess.run(
        [sys.executable, "-m", f"workers.{worker}"],
        env={**os.environ, **env, "CUDA_VISIBLE_DEVICES": ""},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert "refusing to start:" in done.stderr and "configured for a GPU, but" in done.stderr
    assert time.monotonic() - began < 60, "the check ran after a model load"


@pytest.mark.gpu
def test_the_check_passes_on_a_gpu_machine() -> None:
    cuda.check(cuda.probe(), "the LLM worker")
