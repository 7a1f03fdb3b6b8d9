"""The live read path: the index worker's read socket answers the orchestrator's searches with
what the index itself answers, and says clearly when it cannot."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ragkit.index import IndexConfigError, IndexFilter, IndexUnavailableError
from ragkit.index.base import Fusion
from ragkit.index.bm25 import Bm25Encoder
from ragkit.index.edge import EdgeIndex
from ragkit.index.reads import ActiveReader, ReadClient, ReadServer
from tests.ragkit.index.test_contract import DIM, open_adapter, point, texts, vec

MODEL = "packaged:all-MiniLM-L6-v2"


class OneGeneration:
    """The one thing ActiveReader asks of `Generations`: the index that serves live reads."""

    def __init__(self, index: EdgeIndex) -> None:
        self.index = index

    def serving(self) -> EdgeIndex:
        return self.index


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[EdgeIndex, ReadServer, ReadClient]]:
    index = open_adapter("edge", tmp_path)
    assert isinstance(index, EdgeIndex)
    index.upsert([point(i, tenant="t1" if i % 2 else "t2") for i in range(40)])
    server = ReadServer(tmp_path / "run" / "index.sock", ActiveReader(OneGeneration(index)), MODEL)
    server.start()
    client = ReadClient(server.path, MODEL, timeout=5)
    yield index, server, client
    client.close()
    server.close()
    index.close()


def test_a_search_through_the_socket_is_the_index_search(
    served: tuple[EdgeIndex, ReadServer, ReadClient],
) -> None:
    index, _, client = served
    for seed in (1, 3, 8):
        where = IndexFilter(tenant="t1")
        direct = index.search(vec(seed), 5, where)
        remote = client.search(vec(seed), 5, where)
        assert [(h.id, round(h.score, 5)) for h in remote] == [
            (h.id, round(h.score, 5)) for h in direct
        ]
        assert remote and all(h.payload == {} for h in remote)  # ids and scores only
    documents = (uuid.uuid5(uuid.NAMESPACE_OID, "doc3"),)
    hits = client.search(vec(3), 5, IndexFilter(tenant="t1", document_ids=documents))
    assert [h.id for h in hits] == [uuid.uuid5(uuid.NAMESPACE_OID, "3")]
    # Every field of the filter crosses the socket: no point has these times or pairs.
    later = datetime(2100, 1, 1, tzinfo=UTC)
    for where in (
        IndexFilter(tenant="t1", created_after=later),
        IndexFilter(tenant="t1", updated_after=later),
        IndexFilter(tenant="t1", metadata={"lang": "en"}),
    ):
        assert client.search(vec(3), 5, where) == [] == index.search(vec(3), 5, where)


def test_threads_share_one_client_and_each_gets_its_own_answer(
    served: tuple[EdgeIndex, ReadServer, ReadClient],
) -> None:
    index, _, client = served
    errors: list[BaseException] = []

    def ask(seed: int) -> None:
        try:
            for _ in range(20):
                got = client.search(vec(seed), 3, IndexFilter(tenant="t2"))
                assert got[0].id == index.search(vec(seed), 3, IndexFilter(tenant="t2"))[0].id
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=ask, args=(seed,)) for seed in (0, 2, 4, 6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_a_query_embedded_with_another_model_is_a_configuration_error(
    served: tuple[EdgeIndex, ReadServer, ReadClient],
) -> None:
    _, server, _ = served
    other = ReadClient(server.path, "BAAI/bge-small-en-v1.5")
    with pytest.raises(IndexConfigError, match="same model"):
        other.search(vec(1), 3, IndexFilter(tenant="t1"))
    other.close()


def test_no_index_worker_is_unavailable_and_a_restarted_one_is_found_again(
    tmp_path: Path,
) -> None:
    path = tmp_path / "index.sock"
    client = ReadClient(path, MODEL, timeout=2)
    with pytest.raises(IndexUnavailableError, match="is the index worker running"):
        client.search(vec(1), 3, IndexFilter(tenant="t1"))
    index = open_adapter("edge", tmp_path)
    index.upsert([point(1)])
    for _ in range(2):  # the second server is a restarted index worker on the same path
        server = ReadServer(path, ActiveReader(OneGeneration(index)), MODEL).start()  # type: ignore[arg-type]
        assert [h.id for h in client.search(vec(1), 1, IndexFilter(tenant="t1"))] == [point(1).id]
        server.close()
    client.close()
    index.close()
    assert len(vec(1)) == DIM


def test_bm25_and_fused_searches_through_the_socket_are_the_index_searches(
    served: tuple[EdgeIndex, ReadServer, ReadClient],
) -> None:
    index, _, client = served
    texts(index)
    encoder = Bm25Encoder()
    where = IndexFilter(tenant="t1")
    query = encoder.query("falcons on cliffs")
    assert client.search_keyword(query, 5, where) and [
        (h.id, round(h.score, 5)) for h in client.search_keyword(query, 5, where)
    ] == [(h.id, round(h.score, 5)) for h in index.search_keyword(query, 5, where)]
    for fusion in (Fusion("rrf", 60, (0.7, 0.3)), Fusion("dbsf")):
        remote = client.search_fused(vec(101), query, 4, 10, where, fusion)
        direct = index.search_fused(vec(101), query, 4, 10, where, fusion)
        assert [(h.id, round(h.score, 5)) for h in remote] == [
            (h.id, round(h.score, 5)) for h in direct
        ]
