"""Cross-encoder reranking with FlagEmbedding's FlagReranker, by name or folder.

No cross-encoder weights ship in any package here, so `packaged:minilm-reranker` builds one folder
locally (once) from the packaged MiniLM encoder plus a fresh, seeded one-logit head. It proves the
loading and scoring code, not ranking quality; production names a real reranker
(e.g. BAAI/bge-reranker-v2-m3), loaded by the same code.
"""

from __future__ import annotations

import fcntl
import threading
from pathlib import Path
from typing import Any

from ragkit.embedding import ModelLoadError, resolve_model_path, reuse_trial_batch
from ragkit.model_thread import ModelThread
from ragkit.settings import PACKAGED_MINILM

PACKAGED_RERANKER = "packaged:minilm-reranker"


def ensure_minilm_reranker(models_dir: Path) -> Path:
    target = models_dir / "minilm-reranker"
    if (target / "config.json").exists():
        return target
    models_dir.mkdir(parents=True, exist_ok=True)
    with (models_dir / ".reranker.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / "config.json").exists():
            return target
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        source = resolve_model_path(PACKAGED_MINILM)
        torch.manual_seed(20261130)  # the same head on every machine
        model = AutoModelForSequenceClassification.from_pretrained(source, num_labels=1)
        partial = models_dir / "minilm-reranker.partial"
        model.save_pretrained(partial)
        AutoTokenizer.from_pretrained(source).save_pretrained(partial)
        partial.rename(target)
    return target


class Reranker:
    """A loaded cross-encoder. Thread-safe: scores one call at a time, on its own thread
    (ragkit/model_thread.py)."""

    def __init__(self, name: str, model: Any) -> None:
        self.name = name
        self._model = model
        self._forwards = reuse_trial_batch(model)
        self._lock = threading.Lock()
        self._thread = ModelThread("reranker")

    def score(self, query: str, passages: list[str]) -> list[float]:
        if not passages:
            return []
        with self._lock:
            try:
                scores = self._thread.run(
                    self._model.compute_score, [(query, p) for p in passages], batch_size=16
                )
            finally:
                self._forwards.forget()
        if isinstance(scores, float):
            scores = [scores]
        return [float(s) for s in scores]


def load_reranker(name: str, data_dir: Path, device: str) -> Reranker:
    from FlagEmbedding import FlagAutoReranker
    from FlagEmbedding.inference.reranker.encoder_only import base as reranker_base

    from ragkit.embedding import no_progress_bars

    no_progress_bars(reranker_base)  # a bar per call of over 16 pairs, in a worker's log

    path = str(ensure_minilm_reranker(data_dir / "models")) if name == PACKAGED_RERANKER else name
    try:
        model = FlagAutoReranker.from_finetuned(
            path,
            model_class="encoder-only-base",
            use_fp16=device.startswith("cuda"),
            devices=device,
        )
    except Exception as exc:
        raise ModelLoadError(f"cannot load reranker {name!r} ({path}): {exc}") from exc
    return Reranker(name, model)
