from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np
import pytest

from ragkit.embedding import (
    CPU_PASSAGES_PER_FORWARD,
    Embedder,
    ModelLoadError,
    load_embedder,
    load_tokenizer,
)
from ragkit.index import IndexConfigError, open_index
from ragkit.settings import Settings


def test_packaged_minilm_embeds_offline(embedder: Embedder) -> None:
    assert embedder.dimension == 384
    vectors = np.array(
        embedder.embed_passages(["The cat sat on the mat.", "A feline rested on a rug."])
    )
    assert vectors.shape == (2, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    query = np.array(embedder.embed_query("Where did the cat sit?"))
    unrelated = np.array(embedder.embed_passages(["Quarterly revenue rose by four percent."])[0])
    assert query @ vectors[0] > query @ unrelated


def test_a_wrong_model_name_is_a_clear_startup_error() -> None:
    with pytest.raises(ModelLoadError, match="no-such-org/no-such-model"):
        load_embedder("no-such-org/no-such-model", "cpu", 512, 8)
    with pytest.raises(ModelLoadError, match="unknown packaged model"):
        load_embedder("packaged:bge-huge", "cpu", 512, 8)
    with pytest.raises(ModelLoadError):
        load_tokenizer("/nonexistent/model/folder")


def test_a_dimension_mismatch_with_the_existing_index_is_a_startup_error(
    tmp_path: Path, embedder: Embedder
) -> None:
    settings = Settings(data_dir=tmp_path)
    index = open_index(settings, 768)  # as if built by a 768-dimensional model before
    from ragkit.index import IndexPoint

    index.upsert([IndexPoint(id=uuid.uuid4(), vector=[0.1] * 768, payload={"tenant": "t"})])
    index.close()
    with pytest.raises(IndexConfigError, match=r"768-dimensional.*gives 384"):
        open_index(settings, embedder.dimension)


def test_concurrent_queries_are_encoded_together_with_the_same_vectors(
    embedder: Embedder,
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    questions = [f"What did the survey count on day {n}?" for n in range(24)]
    alone = [embedder.embed_query(q) for q in questions]
    calls = 0
    encode = embedder._model.encode_queries

    def counting(*args: object, **kwargs: object) -> object:
        nonlocal calls
        calls += 1
        return encode(*args, **kwargs)

    embedder._model.encode_queries = counting
    try:
        with ThreadPoolExecutor(12) as pool:
            together = list(pool.map(embedder.embed_query, questions))
    finally:
        embedder._model.encode_queries = encode
    for a, b in zip(alone, together, strict=True):
        assert np.allclose(a, b, atol=1e-5)
    assert calls < len(questions), f"{calls} encoder calls for {len(questions)} queries"


def test_every_encode_runs_on_the_models_own_thread(embedder: Embedder, tmp_path: Path) -> None:
    """Torch is called from one thread per model, made at load, never from a pool thread that
    comes and goes (ragkit/model_thread.py says why)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from ragkit.rerank import PACKAGED_RERANKER, load_reranker

    reranker = load_reranker(PACKAGED_RERANKER, tmp_path, "cpu")
    seen: dict[str, set[int]] = {"encode_queries": set(), "encode_corpus": set()}
    originals = {name: getattr(embedder._model, name) for name in seen}
    scored: set[int] = set()
    compute = reranker._model.compute_score

    def recording(name: str) -> object:
        def call(*args: object, **kwargs: object) -> object:
            seen[name].add(threading.get_ident())
            return originals[name](*args, **kwargs)

        return call

    def scoring(*args: object, **kwargs: object) -> object:
        scored.add(threading.get_ident())
        return compute(*args, **kwargs)

    for name in seen:
        setattr(embedder._model, name, recording(name))
    reranker._model.compute_score = scoring
    try:
        for _ in range(3):  # a fresh pool each time, as a worker per test makes
            with ThreadPoolExecutor(4) as pool:
                callers = set(pool.map(lambda _: threading.get_ident(), range(4)))
                list(pool.map(embedder.embed_query, ["a question", "another"]))
                list(pool.map(embedder.embed_passages, [["a passage"], ["two", "three"]]))
                list(pool.map(lambda p: reranker.score("q", [p]), ["one", "two"]))
    finally:
        for name, original in originals.items():
            setattr(embedder._model, name, original)
        reranker._model.compute_score = compute
    assert len(seen["encode_queries"] | seen["encode_corpus"]) == 1
    assert len(scored) == 1 and scored != seen["encode_queries"]
    assert not (seen["encode_queries"] | scored) & callers


def test_a_failed_batch_fails_each_query_with_the_encoders_error(embedder: Embedder) -> None:
    import time
    from concurrent.futures import ThreadPoolExecutor

    encode = embedder._model.encode_queries
    calls = 0

    def failing(*args: object, **kwargs: object) -> object:
        nonlocal calls
        calls += 1
        time.sleep(0.2)  # the other callers queue up behind this one meanwhile
        raise RuntimeError("the encoder is gone")

    def outcome(question: str) -> str:
        try:
            embedder.embed_query(question)
        except RuntimeError as exc:
            return str(exc)
        return "no error"

    embedder._model.encode_queries = failing
    try:
        with ThreadPoolExecutor(8) as pool:
            seen = list(pool.map(outcome, [f"question {n}" for n in range(8)]))
    finally:
        embedder._model.encode_queries = encode
    assert seen == ["the encoder is gone"] * 8
    assert calls < 8, "the queries were not batched, so this proves nothing"


def _raw(flag_model: object, call: object) -> object:
    """What FlagEmbedding gives without our TrialBatchReuse: the reference for equality."""
    wrapper = flag_model.model  # type: ignore[attr-defined]
    flag_model.model = wrapper.model  # type: ignore[attr-defined]
    try:
        return call()  # type: ignore[operator]
    finally:
        flag_model.model = wrapper  # type: ignore[attr-defined]


def test_the_trial_batch_runs_once_and_vectors_are_unchanged(embedder: Embedder) -> None:
    """FlagEmbedding runs the longest batch once to probe memory and again as the first batch;
    the second run is reused, so a call of one batch costs one forward, not two."""
    wrapper = embedder._forwards
    few = [f"passage {i} about the {w} of rivers" for i, w in enumerate(["length", "mouth"])]
    many = [f"passage {i}: " + "word " * (i % 40) for i in range(embedder.per_forward * 2 + 1)]
    for texts, batches in ((few, 1), (many, 3)):
        before = wrapper.forwards
        vectors = embedder.embed_passages(texts)
        assert wrapper.forwards - before == batches
        reference = _raw(
            embedder._model,
            lambda t=texts: embedder._model.encode_corpus(
                t, batch_size=embedder.per_forward, max_length=embedder.max_length
            ),
        )
        assert np.array_equal(np.array(vectors, dtype=np.float32), reference)
    before = wrapper.forwards
    embedder.embed_query("which river is longest?")
    assert wrapper.forwards - before == 1
    assert wrapper._last is None  # nothing of a call stays in memory


def test_on_a_cpu_passages_go_two_per_forward_and_embed_as_in_one(embedder: Embedder) -> None:
    """Less padding, the same vectors: a call's passages of mixed lengths, two per forward, embed
    as one forward of all of them does."""
    assert embedder.batch_size == 32 and embedder.per_forward == CPU_PASSAGES_PER_FORWARD == 2
    texts = [f"passage {i}: " + "word " * (i * 37 % 200) for i in range(8)]
    before = embedder._forwards.forwards
    vectors = np.array(embedder.embed_passages(texts))
    assert embedder._forwards.forwards - before == 4
    wide = _raw(
        embedder._model,
        lambda: embedder._model.encode_corpus(texts, batch_size=32, max_length=512),
    )
    assert np.abs(vectors - wide).max() < 1e-5


def test_the_rerankers_trial_batch_runs_once_and_scores_are_unchanged(tmp_path: Path) -> None:
    from ragkit.rerank import PACKAGED_RERANKER, load_reranker

    reranker = load_reranker(PACKAGED_RERANKER, tmp_path, "cpu")
    passages = [f"candidate {i} " + "text " * i for i in range(20)]
    before = reranker._forwards.forwards
    scores = reranker.score("which candidate?", passages)
    assert reranker._forwards.forwards - before == 2  # 20 pairs in batches of 16, no trial
    reference = _raw(
        reranker._model,
        lambda: reranker._model.compute_score(
            [("which candidate?", p) for p in passages], batch_size=16
        ),
    )
    assert scores == [float(s) for s in reference]  # type: ignore[union-attr]
