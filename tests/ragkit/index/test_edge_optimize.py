"""The Edge index builds its HNSW graph without stopping its readers: `optimize()` works on a copy
in a child process, the writes made meanwhile are replayed onto it, and the switch is a pointer
swap. Points arriving build the graph in the background. Whatever stops a build (a close, a
crash) leaves the live shard whole."""

from __future__ import annotations

import contextlib
import mmap
import os
import resource
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import qdrant_edge as qe

from ragkit.index import IndexFilter, IndexUnavailableError
from ragkit.index.edge import CURRENT, EdgeIndex, _build_split, _copy_tree, _remove_tree
from ragkit.index.reads import ActiveReader, ReadClient, ReadServer
from ragkit.policies import PolicyTable
from tests.conftest import ROOT
from tests.ragkit.index.test_contract import DIM, point, vec
from tests.ragkit.index.test_reads import MODEL, OneGeneration

POINTS = 3_000
WHERE = IndexFilter(tenant="t1")


def open_edge(path: Path, optimize_after: int = 0) -> EdgeIndex:
    return EdgeIndex(path, DIM, 16, 100, 64, optimize_after=optimize_after, segments=8)


def dense_indexed(index: EdgeIndex) -> int:
    """Dense vectors in the graph: these points carry no BM25 vector, which would count too."""
    return int(index._shard.info().indexed_vectors_count)


def wait_for_child(index: EdgeIndex) -> int:
    deadline = time.monotonic() + 30
    while (child := index._child) is None:
        assert time.monotonic() < deadline, "the build never started its child process"
        time.sleep(0.005)
    return child.pid


def thread_cpus() -> dict[int, set[int]]:
    """Each thread of this process: the CPUs it may run on."""
    cpus: dict[int, set[int]] = {}
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(ProcessLookupError):  # it may end between two looks
            cpus[int(tid)] = os.sched_getaffinity(int(tid))
    return cpus


def start_optimize(index: EdgeIndex) -> tuple[threading.Thread, list[BaseException]]:
    """`index.optimize()` started in a thread; what it raised lands in the list."""
    failure: list[BaseException] = []

    def optimize() -> None:
        try:
            index.optimize()
        except BaseException as exc:
            failure.append(exc)

    build = threading.Thread(target=optimize)
    build.start()
    return build, failure


@pytest.fixture
def index(tmp_path: Path) -> Iterator[EdgeIndex]:
    index = filled(tmp_path / "edge")
    yield index
    index.close()


def filled(path: Path) -> EdgeIndex:
    index = open_edge(path)
    for start in range(0, POINTS, 500):
        index.upsert([point(i) for i in range(start, start + 500)])
    return index


@pytest.fixture
def on_disk() -> Iterator[Path]:
    """A folder on the repository's disk: the run's temporary folders may be in memory
    (tests/conftest.py), where no page can be dropped from the cache."""
    (ROOT / ".data").mkdir(exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="test-on-disk-", dir=ROOT / ".data"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_searches_through_the_read_socket_are_not_degraded_while_an_optimize_runs(
    index: EdgeIndex, tmp_path: Path
) -> None:
    """Through the live read path, with the live path's own timeout: every search made while the
    child builds answers in time and with what the index answered before; a write made
    meanwhile is in the optimized shard."""
    timeout = PolicyTable.declared().policy_for("search_vectors").start_to_close.total_seconds()
    server = ReadServer(tmp_path / "run" / "index.sock", ActiveReader(OneGeneration(index)), MODEL)
    server.start()
    client = ReadClient(server.path, MODEL, timeout=timeout)
    seeds = (1, 7, 42)
    assert [client.search(vec(s), 10, WHERE)[0].id for s in seeds] == [point(s).id for s in seeds]
    assert dense_indexed(index) == 0
    build, failure = start_optimize(index)
    try:
        wait_for_child(index)
        during = 0
        late = point(POINTS + 1)
        index.upsert([late])  # replayed onto the copy
        index.delete([point(5).id])
        while build.is_alive():
            for seed in seeds:
                began = time.monotonic()
                hits = client.search(vec(seed), 10, WHERE)
                assert time.monotonic() - began < timeout
                assert len(hits) == 10 and hits[0].id == point(seed).id
                during += 1
            # Searches as traffic makes them, not a spin: the child builds at idle priority, and
            # with the other CPU taken a loop without a pause starved it (40 s for a 3 s build).
            time.sleep(0.01)
        build.join()
    finally:
        client.close()
        server.close()
    assert not failure, failure
    assert during > 0, "the build ended before any search ran during it"
    assert index.count() == POINTS
    # The graph covers every point the copy held; the late one waits for the next build.
    assert dense_indexed(index) >= POINTS - 1
    assert [h.id for h in index.search(late.vector, 1, WHERE)] == [late.id]
    assert point(5).id not in index.point_ids()
    assert (index.path / CURRENT).read_text().strip() == "shard-1"
    assert sorted(p.name for p in index.path.iterdir()) == [CURRENT, "shard-1"]


def test_the_build_runs_in_a_child_process_at_idle_priority(index: EdgeIndex) -> None:
    """Not in the serving process: the child holds its own interpreter lock. It sets itself to
    SCHED_IDLE as it starts, so it takes no CPU time a search wants."""
    build = threading.Thread(target=index.optimize)
    build.start()
    pid = wait_for_child(index)
    assert pid != os.getpid()
    policies: set[int] = set()
    while index._child is not None:
        with contextlib.suppress(ProcessLookupError):  # it may end between two looks
            policies.add(os.sched_getscheduler(pid))
        time.sleep(0.002)
    build.join()
    assert os.SCHED_IDLE in policies, policies


def test_the_process_leaves_the_builds_cpus_while_it_runs_and_gets_them_back(
    index: EdgeIndex,
) -> None:
    """The child builds on the upper half of the CPUs; meanwhile every thread of this process
    (Qdrant's search pool, the searching threads) runs on the rest, so a search never shares a
    CPU with the build. Afterwards each thread has its CPUs back, a thread started during the
    build too. On one CPU there is nothing to split: the build shares it at idle priority."""
    usual = os.sched_getaffinity(0)
    split = _build_split()
    if len(usual) < 2:
        assert split is None
    else:
        assert split is not None
        serving, building = set(split[0]), set(split[1])
        assert serving | building == usual and not serving & building and serving
    release = threading.Event()
    born: list[threading.Thread] = []  # a thread started during the build, alive after it
    build = threading.Thread(target=index.optimize)
    build.start()
    pid = wait_for_child(index)
    seen: dict[str, set[int]] = {"child": set(), "threads": set()}
    try:
        while index._child is not None:
            with contextlib.suppress(OSError):  # the child may end between two looks
                seen["child"] |= os.sched_getaffinity(pid)
            for cpus in thread_cpus().values():
                seen["threads"] |= cpus
            if not born:
                born.append(threading.Thread(target=release.wait))
                born[0].start()
            time.sleep(0.002)
        build.join()
        if split is None:
            assert seen["threads"] == usual
        else:
            assert seen["child"] == building, seen
            assert seen["threads"] == serving, seen
        assert set(map(frozenset, thread_cpus().values())) == {frozenset(usual)}
        assert born, "the build ended before a thread could start during it"
        assert os.sched_getaffinity(born[0].native_id or 0) == usual
    finally:
        release.set()


def test_overlapping_builds_of_two_indexes_share_the_split_and_give_the_cpus_back(
    index: EdgeIndex, tmp_path: Path
) -> None:
    """Two generations may build at once: the second child gets the build's CPUs too (not the
    narrow set its starting thread has by then), and once both builds are done every thread has
    its CPUs back."""
    usual = os.sched_getaffinity(0)
    split = _build_split()
    other = open_edge(tmp_path / "other")
    try:
        other.upsert([point(i) for i in range(POINTS)])
        first, failed = start_optimize(index)
        wait_for_child(index)
        second, also_failed = start_optimize(other)
        pid = wait_for_child(other)
        assert index._child is not None, "the first build ended before the second began"
        seen: set[int] = set()
        while other._child is not None:
            with contextlib.suppress(ProcessLookupError):  # it may end between two looks
                seen |= os.sched_getaffinity(pid)
            time.sleep(0.002)
        first.join()
        second.join()
        assert not failed and not also_failed, failed + also_failed
        assert seen == (set(split[1]) if split else usual)
    finally:
        other.close()
    assert set(map(frozenset, thread_cpus().values())) == {frozenset(usual)}


def test_the_new_shard_is_read_into_the_page_cache_before_it_serves(index: EdgeIndex) -> None:
    """Building drops the new segments' pages from the page cache; the child reads them back,
    so the first searches after the switch find them in memory instead of waiting for the disk
    (without that read: 77 page faults that needed a disk read in these 200 searches)."""
    for seed in range(20):  # the search's own code paths are loaded before anything is counted
        index.search(vec(seed), 50, WHERE)
    index.optimize()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_majflt
    for seed in range(200):
        index.search(vec(seed), 50, WHERE)
    # A stray fault elsewhere in the process (a page of a library) may count: 5 leaves room.
    assert resource.getrusage(resource.RUSAGE_SELF).ru_majflt - before <= 5


def evict(folder: Path) -> int:
    """Drop a closed shard's pages from the page cache, as a restart finds them; then read one
    file through a mapping to prove it worked here: the major faults that took (0 on a file
    system that keeps everything in memory, where the test below would prove nothing)."""
    os.sync()  # only clean pages can be dropped
    files = [Path(d) / name for d, _, names in os.walk(folder) for name in names]
    for file in files:
        handle = os.open(file, os.O_RDONLY)
        try:
            os.posix_fadvise(handle, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(handle)
    largest = max(files, key=lambda f: f.stat().st_size)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_majflt
    with open(largest, "rb") as handle, mmap.mmap(handle.fileno(), 0, prot=mmap.PROT_READ) as m:
        sum(m[i] for i in range(0, len(m), mmap.PAGESIZE))
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_majflt - before
    handle = os.open(largest, os.O_RDONLY)
    try:
        os.posix_fadvise(handle, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(handle)
    return faults


def test_a_shard_opened_from_disk_is_read_ahead_into_the_page_cache(on_disk: Path) -> None:
    """After a restart the shard's pages are not cached: the open asks the kernel to read them
    ahead, so the first searches do not fault them in one at a time (without it: ~100 faults
    that needed a disk read in these 200 searches)."""
    index = filled(on_disk / "edge")
    index.optimize()
    path = index.path
    index.close()
    assert evict(path) > 0, "could not drop the shard from the page cache on this file system"
    reopened = open_edge(path)
    try:
        assert reopened.wait_read_ahead(30)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_majflt
        for seed in range(200):
            reopened.search(vec(seed), 50, WHERE)
        # A stray fault elsewhere in the process (a page of a library) may count: 5 leaves room.
        assert resource.getrusage(resource.RUSAGE_SELF).ru_majflt - before <= 5
    finally:
        reopened.close()


def test_points_arriving_build_the_graph_in_the_background(tmp_path: Path) -> None:
    index = open_edge(tmp_path / "edge", optimize_after=1_000)
    try:
        for start in range(0, 2_500, 250):
            index.upsert([point(i) for i in range(start, start + 250)])
        assert index.wait_optimized(timeout=120)
        # Every build that came due ran; what is left is under the threshold.
        assert index.unindexed < 1_000
        assert dense_indexed(index) >= 2_000
        assert index.count() == 2_500
        assert [h.id for h in index.search(vec(17), 1, WHERE)] == [point(17).id]
    finally:
        index.close()
    reopened = open_edge(tmp_path / "edge")
    try:
        assert reopened.count() == 2_500
        assert 2_500 - dense_indexed(reopened) <= reopened.unindexed <= 2_500
    finally:
        reopened.close()


def test_a_close_during_a_build_abandons_it_and_keeps_the_live_shard(
    index: EdgeIndex, tmp_path: Path
) -> None:
    build, failure = start_optimize(index)
    wait_for_child(index)
    index.close()
    build.join()
    assert len(failure) == 1 and isinstance(failure[0], IndexUnavailableError), failure
    assert sorted(p.name for p in index.path.iterdir()) == [CURRENT, "shard-0"]
    reopened = open_edge(index.path)
    try:
        assert reopened.count() == POINTS
    finally:
        reopened.close()


def test_leftovers_of_a_crashed_build_are_removed_on_open(tmp_path: Path) -> None:
    path = tmp_path / "edge"
    index = open_edge(path)
    index.upsert([point(i) for i in range(10)])
    index.close()
    (path / "shard-1").mkdir()  # a copy whose build never finished
    (path / "shard-1" / "segments").mkdir()
    (path / f"{CURRENT}.tmp").write_text("shard-1\n")
    reopened = open_edge(path)
    try:
        assert reopened.count() == 10
        assert sorted(p.name for p in path.iterdir()) == [CURRENT, "shard-0"]
    finally:
        reopened.close()


def test_a_shard_from_before_the_layout_moves_on_its_first_optimize(tmp_path: Path) -> None:
    """An index written by the earlier adapter holds the shard's files in its own folder."""
    path = tmp_path / "edge"
    config = qe.EdgeConfig(vectors=qe.EdgeVectorParams(size=DIM, distance=qe.Distance.Cosine))
    shard = qe.EdgeShard.create(str(path), config)
    shard.update(
        qe.UpdateOperation.upsert_points(
            [qe.Point(str(point(i).id), point(i).vector, point(i).payload) for i in range(20)]
        )
    )
    shard.flush()
    shard.close()
    index = open_edge(path)
    try:
        assert not index.keyword and index.count() == 20
        index.optimize()
        assert sorted(p.name for p in path.iterdir()) == [CURRENT, "shard-1"]
        assert [h.id for h in index.search(vec(3), 1, WHERE)] == [point(3).id]
    finally:
        index.close()
    reopened = open_edge(path)
    try:
        assert reopened.count() == 20
    finally:
        reopened.close()


def test_a_second_optimize_waits_for_the_first_and_one_with_nothing_to_do_keeps_the_shard(
    index: EdgeIndex,
) -> None:
    ids = set(index.point_ids())
    builds = [threading.Thread(target=index.optimize) for _ in range(2)]
    for build in builds:
        build.start()
    for build in builds:
        build.join()
    # The second found the graph built and nothing written since: no switch.
    assert sorted(p.name for p in index.path.iterdir()) == [CURRENT, "shard-1"]
    assert set(index.point_ids()) == ids


def test_the_shard_copy_and_removal_run_outside_this_process_and_refuse_to_nest(
    tmp_path: Path,
) -> None:
    """`cp`/`rm` in a child (no GIL of ours held); the copy is exact, and a target that is
    still there is refused rather than copied into."""
    source = tmp_path / "shard-0"
    (source / "segments" / "a").mkdir(parents=True)
    (source / "segments" / "a" / "data").write_bytes(os.urandom(1 << 16))
    (source / "wal").write_text("log")
    target = tmp_path / "shard-1"
    _copy_tree(source, target)
    copied = sorted(p.relative_to(target) for p in target.rglob("*"))
    assert copied == sorted(p.relative_to(source) for p in source.rglob("*"))
    assert (target / "segments" / "a" / "data").read_bytes() == (
        source / "segments" / "a" / "data"
    ).read_bytes()
    with pytest.raises(IndexUnavailableError, match="could not be removed"):
        _copy_tree(source, target)
    _remove_tree(target)
    assert not target.exists() and source.exists()
    _remove_tree(target)  # gone already: nothing to do
