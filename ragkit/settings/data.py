"""Documents in, passages out: the index, the embedder, ingestion and retrieval."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from ragkit.settings.common import (
    PACKAGED_MINILM,
    group_config,
)


class IndexSettings(BaseModel):
    model_config = group_config("")

    backend: Literal["edge", "qdrant"] = Field(
        default="edge",
        alias="vector_backend",
        description="edge: in-process qdrant-edge; qdrant: a Qdrant server.",
    )
    qdrant_url: str = Field(default="http://127.0.0.1:6333", description="Qdrant server URL.")
    collection: str = Field(
        default="chunks", alias="qdrant_collection", pattern=r"^[A-Za-z0-9_-]+$"
    )
    qdrant_timeout_seconds: float = Field(default=10.0, gt=0, le=300)
    hnsw_m: int = Field(default=16, ge=4, le=64, description="HNSW edges per node (R20: 16-32).")
    hnsw_ef_construct: int = Field(
        default=100, ge=16, le=512, description="HNSW build candidates (R20: 100-200)."
    )
    hnsw_ef_search: int = Field(default=128, ge=8, le=1_024, description="HNSW search candidates.")
    bm25_avg_len: float = Field(
        default=60.0,
        gt=0,
        le=10_000,
        description="BM25 in the index: the average chunk length in terms (after stopwords) "
        "that term weights are normalised by. Changing it needs a rebuild.",
    )
    optimize_after_points: int = Field(
        default=10_000,
        ge=0,
        le=10_000_000,
        description="Edge backend: build the HNSW graph in a background child process once this "
        "many points arrived since the last build, so a large ingest is searched through the "
        "graph, not by a full scan (0: only the compaction's optimize builds it). The Qdrant "
        "server indexes by its own threshold.",
    )
    edge_segments: int = Field(
        default=0,
        ge=0,
        le=64,
        description="Edge backend, for shards created from now on: the optimizer's target "
        "segment count (0: Qdrant's default, from the CPU count). More segments make each "
        "background build index only the new points instead of merging and rebuilding the "
        "graph, but each search visits every segment, and a filter that matches few points of "
        "a segment scans them (bench/vector_search.py: 4 segments for 100k made P99 ~2x).",
    )
    edge_open_wait_seconds: float = Field(
        default=0.0,
        ge=0,
        le=600,
        description="Edge backend: how long an opener waits for another process that has the "
        "index open to close it (the index has one opener); 0 refuses at once. A deploy's new "
        "index worker waits so, loaded, while the old one stops (durable-rag deploy).",
    )
    bm25_k: float = Field(default=1.2, ge=0, le=10, description="BM25 term-frequency saturation.")
    bm25_b: float = Field(default=0.75, ge=0, le=1, description="BM25 length normalisation.")
    read_socket: str = Field(
        default="",
        alias="index_read_socket",
        description="Edge backend: the Unix socket on which the index worker (the index's one "
        "opener) serves searches to the orchestrator's live retrieval; empty: "
        "<data_dir>/run/index-<collection>.sock.",
    )


class EmbeddingSettings(BaseModel):
    model_config = group_config("embedding_")

    model: str = Field(
        default=PACKAGED_MINILM,
        min_length=1,
        description="'packaged:all-MiniLM-L6-v2', a local folder, or a model name such as "
        "BAAI/bge-small-en-v1.5 (loaded the same way by FlagEmbedding).",
    )
    device: str = Field(
        default="cpu",
        pattern=r"^(cpu|cuda(:\d+)?)$",
        description="Where the embedding model (and the reranker) runs; with cuda the index "
        "worker makes the CUDA check at start (ragkit/cuda.py).",
    )
    batch_size: int = Field(
        default=8,
        ge=1,
        le=1_024,
        description="Passages per forward of the encoder on a GPU (on a CPU, at most 2: less "
        "padding); 8x this many per encoder call and per heartbeat. On 2 CPU cores 8 encodes "
        "512-token passages ~1.5x faster than 32.",
    )
    max_length: int = Field(
        default=512, ge=16, le=8_192, description="Token limit passed to the encoder."
    )


class IngestSettings(BaseModel):
    model_config = group_config("ingest_")

    chunk_tokens: int = Field(
        default=512,
        ge=128,
        le=1_024,
        alias="chunk_tokens",
        description="Chunk budget in embedding-model tokens (R19).",
    )
    chunk_overlap: float = Field(
        default=0.15,
        ge=0.10,
        le=0.20,
        alias="chunk_overlap",
        description="Fraction of a chunk repeated in the next (R19).",
    )
    max_document_bytes: int = Field(
        default=20 * 1024 * 1024,
        ge=1_024,
        le=1024 * 1024 * 1024,
        alias="max_document_bytes",
        description="Larger files are refused.",
    )
    batch_documents: int = Field(
        default=8, ge=1, le=500, description="Documents per ingest batch (one resumable unit)."
    )
    batches_per_run: int = Field(
        default=50,
        ge=1,
        le=10_000,
        description="Batches one ingest workflow run handles before continue-as-new.",
    )
    parse_cpu_seconds: int = Field(
        default=60,
        ge=1,
        le=3_600,
        description="CPU time one document's parse may take in its child process; past it the "
        "document fails as parse_error and the next one gets a fresh process.",
    )
    parse_memory_mb: int = Field(
        default=2_048,
        ge=256,
        le=65_536,
        description="Address space of the parsing child process (RLIMIT_AS); a document that "
        "needs more fails as parse_error.",
    )
    parse_timeout_seconds: float = Field(
        default=180.0,
        gt=0,
        le=7_200,
        description="Wall-clock time one document's parse may take (a parser that waits without "
        "using CPU): past it the child is killed and the document fails as parse_error.",
    )


class RetrievalSettings(BaseModel):
    model_config = group_config("")

    mode: Literal["hybrid", "dense", "keyword"] = Field(
        default="hybrid",
        alias="retrieval_mode",
        description="hybrid: vector and keyword search in parallel, fused; or one of them alone.",
    )
    candidates: int = Field(
        default=20,
        ge=1,
        le=200,
        alias="retrieval_candidates",
        description="Passages each retriever returns before fusion.",
    )
    keyword: Literal["bm25", "ts_rank"] = Field(
        default="bm25",
        alias="retrieval_keyword",
        description="Keyword ranking: bm25, BM25 in the vector index (Postgres full text is its "
        "fallback); ts_rank, Postgres full text.",
    )
    fusion_method: Literal["zscore", "rrf", "dbsf"] = Field(
        default="zscore",
        description="How vector and keyword results are merged: zscore (weighted z-scores, in "
        "workflow code), rrf or dbsf (in the index, in one query, with BM25). The default and "
        "its weights are chosen from bench/retrieval.py on two sets (BENCHMARKS.md).",
    )
    fusion_dense_weight: float = Field(default=0.4, ge=0, le=1)
    fusion_keyword_weight: float = Field(default=0.6, ge=0, le=1)
    fusion_dense_min_spread: float = Field(
        default=0.1,
        ge=0,
        le=1,
        description="zscore: the least spread the dense scores (cosines) are divided by, so a "
        "retriever whose candidates all score alike casts a weak vote (0: their own standard "
        "deviation). Chosen with the weights for the packaged MiniLM (BENCHMARKS.md); another "
        "embedding model spreads its cosines differently: measure with bench/retrieval.py "
        "--sweep.",
    )
    fusion_rrf_k: int = Field(default=60, ge=1, le=1_000, description="RRF's rank constant.")
    reranker_model: str = Field(
        default="",
        description="Cross-encoder for reranking: 'packaged:minilm-reranker' (a locally made "
        "stand-in), a folder or a model name (e.g. BAAI/bge-reranker-v2-m3); empty: no rerank.",
    )
    rerank_candidates: int = Field(
        default=10, ge=1, le=100, description="Fused passages the reranker scores."
    )
