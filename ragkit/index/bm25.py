"""BM25 as sparse vectors in the index (issue 18): keyword ranking with IDF and length
normalisation, where Postgres' `ts_rank` has neither.

One tokenizer for both adapters: Qdrant Edge's `Bm25` model (stemmer, stopwords, `avg_len`)
encodes documents and queries on our side, and both the Edge shard and the Qdrant server store
the vectors under `bm25` with `Modifier.Idf`, so the index weighs each term by its rarity among
the points it holds. The same text gives the same vector whichever adapter stores it, and the
same scores (tests/ragkit/index/test_contract.py).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

import qdrant_edge as qe

SPARSE_NAME = "bm25"


@dataclass(frozen=True)
class SparseVector:
    """Term ids (hashes of the stemmed tokens) and their BM25 term weights; the index applies
    the IDF at query time."""

    indices: tuple[int, ...]
    values: tuple[float, ...]


@dataclass(frozen=True)
class Bm25Config:
    """`avg_len`: the corpus's average document length in tokens, which BM25 normalises by;
    `k` saturates term frequency, `b` is how much length counts."""

    avg_len: float = 100.0
    k: float = 1.2
    b: float = 0.75
    language: str = "english"


class Bm25Encoder:
    def __init__(self, config: Bm25Config | None = None) -> None:
        self.config = config or Bm25Config()
        self._model = qe.Bm25(
            qe.Bm25Config(
                avg_len=self.config.avg_len,
                k=self.config.k,
                b=self.config.b,
                language=self.config.language,
            )
        )
        self._lock = threading.Lock()  # the model's thread safety is not documented

    def documents(self, texts: Sequence[str]) -> list[SparseVector]:
        with self._lock:
            return [_sparse(self._model.embed_document(text)) for text in texts]

    def query(self, text: str) -> SparseVector:
        with self._lock:
            return _sparse(self._model.embed_query(text))


def _sparse(vector: qe.SparseVector) -> SparseVector:
    return SparseVector(tuple(vector.indices), tuple(float(v) for v in vector.values))
