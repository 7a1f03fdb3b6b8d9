from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np
import pytest

from ragkit.embedding import Embedder, ModelLoadError, load_embedder, load_tokenizer
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
