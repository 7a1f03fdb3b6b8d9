"""The vector index contract: both adapters must pass every test here.

QdrantServerIndex runs against qdrant-client's local mode, which has the server's API.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest
import qdrant_edge as qe
from qdrant_client import QdrantClient
from qdrant_client import models as qm

from ragkit.index import IndexConfigError, IndexFilter, IndexHit, IndexPoint, VectorIndex
from ragkit.index.base import Fusion
from ragkit.index.bm25 import Bm25Encoder
from ragkit.index.edge import EdgeIndex
from ragkit.index.qdrant import QdrantServerIndex

DIM = 16


def open_adapter(kind: str, where: Path, dim: int = DIM) -> VectorIndex:
    if kind == "edge":
        return EdgeIndex(where / "edge", dim, hnsw_m=16, hnsw_ef_construct=100, hnsw_ef_search=64)
    client = QdrantClient(path=str(where / "qdrant-local"))
    return QdrantServerIndex(client, "chunks", dim, 16, 100, 64)


@pytest.fixture(params=["edge", "qdrant"])
def index(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VectorIndex]:
    adapter = open_adapter(request.param, tmp_path)
    yield adapter
    adapter.close()


def vec(seed: int) -> list[float]:
    v = np.random.default_rng(seed).normal(size=DIM)
    return [float(x) for x in v / np.linalg.norm(v)]


def point(
    seed: int, tenant: str = "t1", doc: uuid.UUID | None = None, version: int = 1
) -> IndexPoint:
    return IndexPoint(
        id=uuid.uuid5(uuid.NAMESPACE_OID, f"{seed}"),
        vector=vec(seed),
        payload={
            "tenant": tenant,
            "document_id": str(doc or uuid.uuid5(uuid.NAMESPACE_OID, f"doc{seed}")),
            "version": version,
            "text": f"text {seed}",
        },
    )


def test_upsert_is_idempotent_by_id(index: VectorIndex) -> None:
    points = [point(i) for i in range(20)]
    index.upsert(points)
    index.upsert(points)
    assert index.count() == 20
    assert sorted(index.point_ids()) == sorted(p.id for p in points)


def test_search_finds_the_exact_vector_first_with_payload(index: VectorIndex) -> None:
    index.upsert([point(i) for i in range(30)])
    hits = index.search(vec(7), 3, IndexFilter(tenant="t1"))
    assert hits[0].id == point(7).id
    assert hits[0].score == pytest.approx(1.0, abs=1e-4)
    assert hits[0].payload["text"] == "text 7"
    assert len(hits) == 3
    assert hits[0].score >= hits[1].score >= hits[2].score


def test_search_is_scoped_to_the_tenant(index: VectorIndex) -> None:
    index.upsert([point(1, tenant="a"), point(2, tenant="b")])
    hits = index.search(vec(2), 10, IndexFilter(tenant="a"))
    assert [h.id for h in hits] == [point(1).id]
    assert index.count("a") == 1 and index.count("b") == 1 and index.count() == 2
    assert index.point_ids("b") == [point(2).id]


def test_search_can_narrow_to_documents(index: VectorIndex) -> None:
    doc = uuid.uuid4()
    index.upsert([point(1, doc=doc), point(2), point(3, doc=doc)])
    hits = index.search(vec(2), 10, IndexFilter(tenant="t1", document_ids=(doc,)))
    assert {h.id for h in hits} == {point(1).id, point(3).id}


DAY = [datetime(2026, 11, d, 12, tzinfo=UTC) for d in range(1, 8)]


def dated(seed: int, created: int, updated: int, **meta: str) -> IndexPoint:
    """A point as `_points` writes it: the document's first ingest, its version's, its pairs."""
    base = point(seed)
    return IndexPoint(
        base.id,
        base.vector,
        base.payload
        | {
            "created_at": DAY[created].isoformat(),
            "updated_at": DAY[updated].isoformat(),
            "meta": meta,
        },
    )


def test_search_filters_by_time_range_and_metadata(index: VectorIndex) -> None:
    """R20: bounds are inclusive, both kinds of time, pairs must all match; the same answers
    from both adapters."""
    index.upsert(
        [
            dated(1, created=0, updated=0, lang="en", team="a"),
            dated(2, created=0, updated=4, lang="fr", team="a"),
            dated(3, created=2, updated=2, lang="en", team="b"),
            dated(4, created=5, updated=6, lang="en"),
        ]
    )

    def found(**bounds: object) -> set[int]:
        hits = index.search(vec(1), 10, IndexFilter(tenant="t1", **bounds))  # type: ignore[arg-type]
        return {seed for seed in range(1, 5) if point(seed).id in {h.id for h in hits}}

    assert found() == {1, 2, 3, 4}
    assert found(updated_after=DAY[2]) == {2, 3, 4}  # inclusive
    assert found(updated_before=DAY[2]) == {1, 3}
    assert found(updated_after=DAY[1], updated_before=DAY[4]) == {2, 3}
    assert found(created_after=DAY[0], created_before=DAY[0]) == {1, 2}
    assert found(created_before=DAY[2], updated_after=DAY[3]) == {2}
    assert found(metadata={"lang": "en"}) == {1, 3, 4}
    assert found(metadata={"lang": "en", "team": "a"}) == {1}
    assert found(metadata={"team": "c"}) == set()
    assert found(metadata={"lang": "en"}, created_after=DAY[1]) == {3, 4}
    # Another timezone for the same instant is the same bound.
    east = DAY[2].astimezone(timezone(timedelta(hours=9)))
    assert found(updated_after=east) == {2, 3, 4}


def test_delete_by_id(index: VectorIndex) -> None:
    index.upsert([point(i) for i in range(5)])
    index.delete([point(0).id, point(1).id])
    assert index.count() == 3
    assert point(0).id not in index.point_ids()


def test_delete_other_versions_keeps_only_the_named_version(index: VectorIndex) -> None:
    doc = uuid.uuid4()
    old = [point(i, doc=doc, version=1) for i in range(3)]
    new = [point(i, doc=doc, version=2) for i in range(10, 12)]
    other = point(99, version=1)
    index.upsert([*old, *new, other])
    index.delete_other_versions("t1", doc, keep_version=2)
    assert set(index.point_ids()) == {p.id for p in new} | {other.id}


def test_wrong_dimension_vectors_are_refused(index: VectorIndex) -> None:
    with pytest.raises(IndexConfigError):
        index.upsert(
            [IndexPoint(id=uuid.uuid4(), vector=[0.1] * (DIM + 1), payload={"tenant": "t"})]
        )
    with pytest.raises(IndexConfigError):
        index.search([0.1] * (DIM - 1), 3, IndexFilter(tenant="t"))


@pytest.mark.parametrize("kind", ["edge", "qdrant"])
def test_reopening_with_another_dimension_is_a_clear_error(kind: str, tmp_path: Path) -> None:
    first = open_adapter(kind, tmp_path)
    first.upsert([point(1)])
    first.close()
    with pytest.raises(IndexConfigError, match="rebuild the index"):
        open_adapter(kind, tmp_path, dim=DIM * 2)


@pytest.mark.parametrize("kind", ["edge", "qdrant"])
def test_points_persist_across_reopen(kind: str, tmp_path: Path) -> None:
    first = open_adapter(kind, tmp_path)
    first.upsert([point(i) for i in range(4)])
    first.close()
    again = open_adapter(kind, tmp_path)
    try:
        assert again.count() == 4
    finally:
        again.close()


def test_edge_index_has_one_opener_and_a_refused_one_leaves_its_files_alone(
    tmp_path: Path,
) -> None:
    """A second opener (a deploy's new index worker started beside the old) is refused before
    it touches a file: Qdrant Edge's own lock came after its load had cut the open shard's
    BM25 journal short, and the first opener's next write failed ("Tracker journal ... is
    shorter than expected")."""
    from ragkit.index import IndexUnavailableError

    first = open_adapter("edge", tmp_path)
    try:
        first.upsert([point(i) for i in range(20)])
        for _ in range(2):
            with pytest.raises(IndexUnavailableError, match="another process"):
                open_adapter("edge", tmp_path)
        first.upsert([point(i) for i in range(20, 40)])
        assert first.count() == 40
    finally:
        first.close()
    again = open_adapter("edge", tmp_path)
    try:
        assert again.count() == 40
    finally:
        again.close()


def test_an_opener_told_to_wait_opens_the_moment_the_other_lets_go(tmp_path: Path) -> None:
    """A deploy's new index worker waits, loaded, for the old one to close the index."""
    first = open_adapter("edge", tmp_path)
    first.upsert([point(i) for i in range(5)])
    opened: list[VectorIndex] = []
    waiter = threading.Thread(
        target=lambda: opened.append(EdgeIndex(tmp_path / "edge", DIM, 16, 100, 64, open_wait=30))
    )
    waiter.start()
    time.sleep(0.5)
    assert opened == []  # still held
    closed = time.monotonic()
    first.close()
    waiter.join(30)
    assert opened, "the waiting opener never opened"
    assert time.monotonic() - closed < 5
    try:
        assert opened[0].count() == 5
    finally:
        opened[0].close()


def test_the_active_alias_moves_atomically_on_the_server(tmp_path: Path) -> None:
    client = QdrantClient(path=str(tmp_path / "qdrant-local"))
    old = QdrantServerIndex(client, "chunks", DIM, 16, 100, 64)
    new = QdrantServerIndex(client, "chunks-g2", DIM, 16, 100, 64)
    old.publish_alias("chunks-active")
    new.publish_alias("chunks-active")
    aliases = {a.alias_name: a.collection_name for a in client.get_aliases().aliases}
    assert aliases == {"chunks-active": "chunks-g2"}
    client.close()


# BM25 in the index (issue 18): one tokenizer for both adapters, IDF applied by the index.
PASSAGES = [
    "Peregrine falcons nest on high cliffs and dive faster than any other bird.",
    "Grey herons wade in shallow rivers and stab fish with their bills.",
    "The falcon falcon falcon is a bird.",
    "Sea cliffs erode where waves break against soft rock.",
    "A kestrel is a small falcon that hovers over fields.",
    "Rivers carry sediment from the mountains down to the sea.",
]


def texts(index: VectorIndex, tenant: str = "t1") -> list[IndexPoint]:
    encoder = Bm25Encoder()
    points = [
        IndexPoint(
            id=uuid.uuid5(uuid.NAMESPACE_OID, f"{tenant}-passage{i}"),
            vector=vec(100 + i),
            payload={"tenant": tenant, "document_id": str(uuid.uuid4()), "version": 1, "i": i},
            sparse=sparse,
        )
        for i, sparse in enumerate(encoder.documents(PASSAGES))
    ]
    index.upsert(points)
    return points


def ranked(hits: list[IndexHit]) -> list[tuple[int, float]]:
    return [(int(h.payload["i"]), round(h.score, 4)) for h in hits]


@pytest.fixture
def both(tmp_path: Path) -> Iterator[tuple[VectorIndex, VectorIndex]]:
    edge, server = open_adapter("edge", tmp_path), open_adapter("qdrant", tmp_path)
    yield edge, server
    edge.close()
    server.close()


def test_bm25_ranks_by_rare_terms_the_same_on_both_adapters(
    both: tuple[VectorIndex, VectorIndex],
) -> None:
    encoder = Bm25Encoder()
    results = []
    for index in both:
        assert index.keyword
        texts(index)
        texts(index, tenant="t2")  # another tenant's points: never returned, same IDF stats
        hits = index.search_keyword(encoder.query("falcons on cliffs"), 10, IndexFilter("t1"))
        assert {h.payload["tenant"] for h in hits} == {"t1"}
        results.append(ranked(hits))
        # "cliffs" is rarer than "falcon": the passage with both comes first; stemming
        # matches "falcons" to "falcon"; a passage with neither term is not a hit.
        assert [i for i, _ in results[-1]][:1] == [0]
        assert {i for i, _ in results[-1]} == {0, 2, 3, 4}
        assert index.search_keyword(encoder.query("the and of"), 10, IndexFilter("t1")) == []
    assert results[0] == results[1], "the adapters disagree on BM25"


@pytest.mark.parametrize(
    "fusion", [Fusion("rrf", 60), Fusion("rrf", 60, (0.7, 0.3)), Fusion("dbsf")], ids=str
)
def test_fused_hybrid_is_one_query_and_the_same_on_both_adapters(
    both: tuple[VectorIndex, VectorIndex], fusion: Fusion
) -> None:
    encoder = Bm25Encoder()
    results = []
    for index in both:
        texts(index)
        hits = index.search_fused(
            vec(101), encoder.query("falcon cliffs"), 5, 6, IndexFilter("t1"), fusion
        )
        results.append(ranked(hits))
        found = [i for i, _ in results[-1]]
        # Dense's best (the query is passage 1's vector) and BM25's best (0) both make it.
        assert len(found) == 5 and {0, 1} <= set(found)
        # The filter holds inside both prefetches.
        only = IndexFilter("t1", document_ids=(uuid.UUID(hits[-1].payload["document_id"]),))
        narrowed = index.search_fused(vec(101), encoder.query("falcon"), 4, 6, only, fusion)
        assert [h.id for h in narrowed] == [hits[-1].id]
    assert results[0] == results[1], "the adapters disagree on fusion"


@pytest.mark.parametrize("kind", ["edge", "qdrant"])
def test_an_index_from_before_bm25_says_so_and_still_serves_dense(
    kind: str, tmp_path: Path
) -> None:
    """A generation created before BM25 has no sparse vectors: keyword searches are a clear
    configuration error (the caller falls back to Postgres), dense search works, and writes
    carrying sparse vectors are taken without them; a rebuild makes a generation that has them."""
    if kind == "edge":
        path = tmp_path / "edge"
        path.mkdir()
        shard = qe.EdgeShard.create(
            str(path),
            qe.EdgeConfig(vectors=qe.EdgeVectorParams(size=DIM, distance=qe.Distance.Cosine)),
        )
        shard.close()
    else:
        client = QdrantClient(path=str(tmp_path / "qdrant-local"))
        client.create_collection(
            "chunks", vectors_config=qm.VectorParams(size=DIM, distance=qm.Distance.COSINE)
        )
        client.close()
    old = open_adapter(kind, tmp_path)
    try:
        assert not old.keyword
        texts(old)
        assert old.count() == len(PASSAGES)
        assert int(old.search(vec(103), 1, IndexFilter("t1"))[0].payload["i"]) == 3
        with pytest.raises(IndexConfigError, match="rebuild"):
            old.search_keyword(Bm25Encoder().query("falcon"), 3, IndexFilter("t1"))
        with pytest.raises(IndexConfigError, match="rebuild"):
            old.search_fused(
                vec(1), Bm25Encoder().query("falcon"), 3, 6, IndexFilter("t1"), Fusion()
            )
    finally:
        old.close()
