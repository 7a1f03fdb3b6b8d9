"""The vector index contract: both adapters must pass every test here.

QdrantServerIndex runs against qdrant-client's local mode, which has the server's API.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from qdrant_client import QdrantClient

from ragkit.index import IndexConfigError, IndexFilter, IndexPoint, VectorIndex
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


def test_edge_index_has_one_opener(tmp_path: Path) -> None:
    from ragkit.index import IndexUnavailableError

    first = open_adapter("edge", tmp_path)
    try:
        first.upsert([point(1)])
        with pytest.raises(IndexUnavailableError, match="another process"):
            open_adapter("edge", tmp_path)
    finally:
        first.close()


def test_the_active_alias_moves_atomically_on_the_server(tmp_path: Path) -> None:
    client = QdrantClient(path=str(tmp_path / "qdrant-local"))
    old = QdrantServerIndex(client, "chunks", DIM, 16, 100, 64)
    new = QdrantServerIndex(client, "chunks-g2", DIM, 16, 100, 64)
    old.publish_alias("chunks-active")
    new.publish_alias("chunks-active")
    aliases = {a.alias_name: a.collection_name for a in client.get_aliases().aliases}
    assert aliases == {"chunks-active": "chunks-g2"}
    client.close()
