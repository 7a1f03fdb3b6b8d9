"""In-process Qdrant Edge adapter (embedded profile): real HNSW, payload filters, every write
flushed before it returns, and no WAL (a shard created before 2026-12-07 keeps its own).

Qdrant Edge runs no optimizer of its own, and its `optimize()` holds Python's global lock for
the whole build (a minute at 100k points), so this adapter never calls it in the serving
process. `optimize()` copies the shard (`cp` in a niced child), builds the graph in a child
process (SCHED_IDLE, its own GIL, on half the CPUs, which this process's threads leave while it
runs), reads the new shard into the page cache, replays the writes made meanwhile onto the copy,
and switches to it under the read lock for a pointer swap: searches go on against the old shard
throughout. The old shard is closed after the swap, outside the read lock, and its folder
removed by `rm` in a niced child. A shard opened from disk is read ahead into the page cache in
a thread (`posix_fadvise(WILLNEED)`), so the first searches after a restart do not wait for the
disk one page at a time. With `optimize_after`, the same runs in a background thread
whenever that many points arrived since the last build, so the graph stays current as documents
are ingested, not only after the nightly compaction.

On disk, `<path>/CURRENT` names the live shard folder (`shard-<n>`); a shard created before
this layout lives in `<path>` itself until its first optimize.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import qdrant_edge as qe

from ragkit.cpus import thread_ids
from ragkit.index.base import (
    PAYLOAD_INDEXES,
    WAITING_FOR_OPENER,
    Fusion,
    IndexConfigError,
    IndexFilter,
    IndexHit,
    IndexPoint,
    IndexUnavailableError,
    NoKeywordVectorsError,
)
from ragkit.index.bm25 import SPARSE_NAME, SparseVector

log = logging.getLogger(__name__)

CURRENT = "CURRENT"
_INDEXING_THRESHOLD_KB = 1
# A segment is rewritten (vacuumed) when over this share of its points are deleted: any.
_VACUUM_DELETED_SHARE = 1e-9
# Between two warming searches: a query holds Python's lock while it runs, and back to back they
# kept a live search waiting for the interpreter's 5 ms switch interval each time.
WARM_PAUSE_SECONDS = 0.001
# Run by the child: its own interpreter, so the build holds its own GIL; on CPUs of its own,
# which this process's threads leave while it runs (`_build_split`, `_BuildCpus`); and
# SCHED_IDLE (nice 19 where that is refused): on a CPU it shares (a machine with one), it runs
# only when nothing else wants it, where nice 19 still takes its slice from a search. Last, it
# reads every file of the new shard once: building drops the new
# segments' pages from the page cache, so the first searches after the switch waited for the
# disk (at 10k points, ~2,600 page faults that needed a read in the first 600 searches: P99
# 2.5 ms against 0.6 ms warm).
_OPTIMIZE_CHILD = """
import json, os, sys
os.nice(19)
try:
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
except (AttributeError, OSError):
    pass
import qdrant_edge as qe
shard = qe.EdgeShard.load(sys.argv[1])
changed = shard.optimize()
info = shard.info()
shard.flush()
shard.close()
buffer = bytearray(1 << 20)
for folder, _, files in os.walk(sys.argv[1]):
    for name in files:
        with open(os.path.join(folder, name), "rb", buffering=0) as handle:
            while handle.readinto(buffer):
                pass
print(json.dumps({"changed": changed, "segments": info.segments_count}))
"""

_SCHEMA = {
    "keyword": qe.PayloadSchemaType.Keyword,
    "integer": qe.PayloadSchemaType.Integer,
    "datetime": qe.PayloadSchemaType.Datetime,
}


class EdgeIndex:
    def __init__(
        self,
        path: Path,
        dimension: int,
        hnsw_m: int,
        hnsw_ef_construct: int,
        hnsw_ef_search: int,
        optimize_after: int = 0,
        segments: int = 0,
        open_wait: float = 0.0,
    ) -> None:
        """`optimize_after`: build the graph in the background once this many points arrived
        since the last build (0: only when `optimize()` is called). `segments`: the optimizer's
        target segment count (0: Qdrant's default, one per CPU); more segments make each build
        cheaper (only the new points are indexed) and each search a little dearer."""
        self.path = path
        self.dimension = dimension
        self._ef_search = hnsw_ef_search
        self._optimize_after = optimize_after
        # Reads and writes hold `_lock` for one call; writes also hold `_write_lock`, which an
        # optimize holds while it copies and while it replays, so reads never wait for either.
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._optimizing = threading.Lock()
        self._journal: list[Any] | None = None
        self._child: subprocess.Popen[str] | None = None
        self._background: threading.Thread | None = None
        self._read_ahead: threading.Thread | None = None
        self._closed = False
        self._shard_closed = False
        hnsw = qe.HnswIndexConfig(
            m=hnsw_m, ef_construct=hnsw_ef_construct, full_scan_threshold=10_000
        )
        # Every segment a build sees is indexed, however small: a build is due only once
        # `optimize_after` points arrived (Qdrant's default skips segments under 10 MB). And
        # every segment holding a deleted point is rewritten without it (Qdrant's default waits
        # for a fifth of a segment of at least 1,000 points): a deleted chunk's text leaves the
        # files at the next build. Kept in the shard's config: a shard from before keeps its own.
        optimizers = qe.EdgeOptimizersConfig(
            default_segment_number=segments or None,
            indexing_threshold=_INDEXING_THRESHOLD_KB,
            deleted_threshold=_VACUUM_DELETED_SHARE,
            vacuum_min_vector_number=1,
        )
        self._opener = _take_opener_lock(path, open_wait)
        try:
            self._open(path, dimension, hnsw, optimizers)
        except BaseException:
            os.close(self._opener)
            raise
        self._unindexed = self._count_unindexed()

    def _open(self, path: Path, dimension: int, hnsw: Any, optimizers: Any) -> None:
        try:
            if path.is_dir() and any(path.iterdir()):
                self._dir = _live_dir(path)
                self.keyword = _has_sparse(self._dir)
                self._shard = qe.EdgeShard.load(str(self._dir))
                existing = self._shard.info()  # noqa: F841  (proves it opened)
                stored = self._stored_dimension()
                if stored is not None and stored != dimension:
                    self._shard.close()
                    raise IndexConfigError(
                        f"vector index at {path} holds {stored}-dimensional vectors but the "
                        f"embedding model gives {dimension}: rebuild the index for the new model"
                    )
                _remove_leftovers(path, self._dir)
                self._read_ahead = threading.Thread(
                    target=_read_ahead, args=(self._dir,), name="edge-read-ahead", daemon=True
                )
                self._read_ahead.start()
            else:
                self._dir = path / "shard-0"
                self._dir.mkdir(parents=True, exist_ok=True)
                config = qe.EdgeConfig(
                    vectors=qe.EdgeVectorParams(size=dimension, distance=qe.Distance.Cosine),
                    sparse_vectors={
                        SPARSE_NAME: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)
                    },
                    hnsw_config=hnsw,
                    optimizers=optimizers,
                    # Every write is flushed before it returns (`_apply`), so a WAL adds no
                    # durability here; it only kept each point's payload, deleted text
                    # included, in `wal/` until the log wrapped.
                    wal_enabled=False,
                )
                self.keyword = True
                self._shard = qe.EdgeShard.create(str(self._dir), config)
                for name, kind in PAYLOAD_INDEXES.items():
                    self._shard.update(qe.UpdateOperation.create_field_index(name, _SCHEMA[kind]))
                self._shard.flush()
                _point_at(path, self._dir)
        except IndexConfigError:
            raise
        except Exception as exc:
            if "WouldBlock" in str(exc):
                raise IndexUnavailableError(
                    f"vector index at {path} is open in another process (only one opener is allowed)"
                ) from exc
            raise IndexUnavailableError(f"cannot open vector index at {path}: {exc}") from exc

    def _stored_dimension(self) -> int | None:
        records, _ = self._shard.scroll(qe.ScrollRequest(limit=1, with_vector=True))
        if not records:
            return None
        vector: Any = records[0].vector
        if isinstance(vector, dict):
            vector = vector.get("", next(iter(vector.values())))
        return len(vector)

    def _check(self, vector: Sequence[float]) -> None:
        if len(vector) != self.dimension:
            raise IndexConfigError(
                f"vector has {len(vector)} dimensions, index has {self.dimension}"
            )

    def upsert(self, points: Sequence[IndexPoint]) -> None:
        if not points:
            return
        for p in points:
            self._check(p.vector)
        ops = [qe.Point(str(p.id), self._vectors(p), p.payload) for p in points]
        self._apply(qe.UpdateOperation.upsert_points(ops), added=len(ops))

    def delete(self, ids: Sequence[uuid.UUID]) -> None:
        if not ids:
            return
        self._apply(qe.UpdateOperation.delete_points([str(i) for i in ids]))

    def delete_other_versions(self, tenant: str, document_id: uuid.UUID, keep_version: int) -> None:
        where = qe.Filter(
            must=[
                qe.FieldCondition(key="tenant", match=qe.MatchValue(tenant)),
                qe.FieldCondition(key="document_id", match=qe.MatchValue(str(document_id))),
            ],
            must_not=[qe.FieldCondition(key="version", match=qe.MatchValue(keep_version))],
        )
        self._apply(qe.UpdateOperation.delete_points_by_filter(where))

    def delete_tenant(self, tenant: str) -> None:
        where = qe.Filter(must=[qe.FieldCondition(key="tenant", match=qe.MatchValue(tenant))])
        self._apply(qe.UpdateOperation.delete_points_by_filter(where))

    def _apply(self, operation: Any, added: int = 0) -> None:
        """One write, flushed; kept for replay while an optimize builds on a copy."""
        with self._write_lock:
            with self._lock:
                self._shard.update(operation)
                self._shard.flush()
            if self._journal is not None:
                self._journal.append(operation)
            self._unindexed += added
            due = 0 < self._optimize_after <= self._unindexed
        if due:
            self._optimize_in_background()

    def search(self, vector: Sequence[float], limit: int, where: IndexFilter) -> list[IndexHit]:
        self._check(vector)
        request = qe.QueryRequest(
            limit=limit,
            query=qe.Query.Nearest(list(vector)),
            filter=self._filter(where),
            with_payload=True,
            params=qe.SearchParams(hnsw_ef=max(self._ef_search, limit)),
        )
        with self._lock:
            points = self._shard.query(request)
        return [
            IndexHit(uuid.UUID(str(p.id)), float(p.score), dict(p.payload or {})) for p in points
        ]

    def _vectors(self, point: IndexPoint) -> Any:
        if not self.keyword:
            return list(point.vector)
        vectors: dict[str, Any] = {"": list(point.vector)}
        if point.sparse is not None:
            vectors[SPARSE_NAME] = qe.SparseVector(
                list(point.sparse.indices), list(point.sparse.values)
            )
        return vectors

    def _require_keyword(self) -> None:
        if not self.keyword:
            raise NoKeywordVectorsError(
                "this index generation holds no BM25 vectors (created before them): "
                "`durable-rag rebuild` builds one that does"
            )

    def search_keyword(self, query: SparseVector, limit: int, where: IndexFilter) -> list[IndexHit]:
        self._require_keyword()
        if not query.indices:  # no term survived (stopwords only): nothing matches
            return []
        request = qe.QueryRequest(
            limit=limit,
            query=qe.Query.Nearest(_edge_sparse(query), using=SPARSE_NAME),
            filter=self._filter(where),
            with_payload=True,
        )
        with self._lock:
            points = self._shard.query(request)
        return [
            IndexHit(uuid.UUID(str(p.id)), float(p.score), dict(p.payload or {})) for p in points
        ]

    def search_fused(
        self,
        vector: Sequence[float],
        query: SparseVector,
        limit: int,
        candidates: int,
        where: IndexFilter,
        fusion: Fusion,
    ) -> list[IndexHit]:
        self._check(vector)
        self._require_keyword()
        where_filter = self._filter(where)
        prefetches = [
            qe.Prefetch(
                limit=candidates,
                query=qe.Query.Nearest(list(vector)),
                filter=where_filter,
                params=qe.SearchParams(hnsw_ef=max(self._ef_search, candidates)),
            )
        ]
        if query.indices:
            prefetches.append(
                qe.Prefetch(
                    limit=candidates,
                    query=qe.Query.Nearest(_edge_sparse(query), using=SPARSE_NAME),
                    filter=where_filter,
                )
            )
        weights = list(fusion.weights) if fusion.weights and len(prefetches) == 2 else None
        method: Any = (
            qe.Fusion.Rrf(fusion.k, weights=weights) if fusion.method == "rrf" else qe.Fusion.Dbsf()
        )
        request = qe.QueryRequest(
            limit=limit, prefetches=prefetches, query=method, filter=where_filter, with_payload=True
        )
        with self._lock:
            points = self._shard.query(request)
        return [
            IndexHit(uuid.UUID(str(p.id)), float(p.score), dict(p.payload or {})) for p in points
        ]

    @staticmethod
    def _filter(where: IndexFilter) -> qe.Filter:
        must: list[Any] = [qe.FieldCondition(key="tenant", match=qe.MatchValue(where.tenant))]
        if where.document_ids:
            must.append(
                qe.FieldCondition(
                    key="document_id", match=qe.MatchAny([str(d) for d in where.document_ids])
                )
            )
        for key, lower, upper in where.ranges():
            must.append(qe.FieldCondition(key=key, range=qe.RangeDateTime(gte=lower, lte=upper)))
        for name, value in sorted(where.metadata.items()):
            must.append(qe.FieldCondition(key=f"meta.{name}", match=qe.MatchValue(value)))
        return qe.Filter(must=must)

    def count(self, tenant: str | None = None) -> int:
        where = None
        if tenant is not None:
            where = qe.Filter(must=[qe.FieldCondition(key="tenant", match=qe.MatchValue(tenant))])
        with self._lock:
            return int(self._shard.count(qe.CountRequest(exact=True, filter=where)))

    def point_ids(self, tenant: str | None = None) -> list[uuid.UUID]:
        where = None
        if tenant is not None:
            where = qe.Filter(must=[qe.FieldCondition(key="tenant", match=qe.MatchValue(tenant))])
        ids: list[uuid.UUID] = []
        offset = None
        with self._lock:
            while True:
                records, offset = self._shard.scroll(
                    qe.ScrollRequest(offset=offset, limit=1_000, filter=where, with_payload=False)
                )
                ids.extend(uuid.UUID(str(r.id)) for r in records)
                if offset is None:
                    return ids

    def optimize(self) -> None:
        """Build the HNSW graph and merge segments without stopping searches or writes: copy the
        shard, optimize the copy in a child process, replay onto it the writes made meanwhile,
        then switch. One at a time (a second call waits for the first)."""
        with self._optimizing:
            if self._closed:
                raise IndexUnavailableError(f"vector index at {self.path} is closed")
            self._optimize()

    def _optimize(self) -> None:
        target = self.path / f"shard-{_serial(self._dir) + 1}"
        _remove_tree(target)
        with self._write_lock:
            # Writes wait for the copy (a flushed shard copies consistently); reads do not.
            _copy_tree(self._dir, target)
            self._journal = []
            built = self._unindexed
        try:
            built_report = self._build(target)
            with self._write_lock:
                if not _changed(built_report) and not self._journal and self._dir != self.path:
                    # Nothing was built and nothing written: the live shard is the same, so it
                    # stays (loading a shard and closing one hold Python's lock a moment). A
                    # shard from before the layout moves all the same.
                    self._journal = None
                    _remove_tree(target)
                    return
            # Loaded and warmed while writes go on (the journal keeps them for the replay).
            shard = qe.EdgeShard.load(str(target))
            try:
                self._warm(shard)
            except BaseException:
                shard.close()
                raise
            with self._write_lock:
                try:
                    for operation in self._journal or []:
                        shard.update(operation)
                    if self._journal:
                        shard.flush()
                    _point_at(self.path, target)
                except BaseException:
                    shard.close()
                    raise
                with self._lock:
                    old, old_dir = self._shard, self._dir
                    self._shard, self._dir = shard, target
                # Outside the read lock: no search holds the old shard once the swap is done,
                # and closing it takes tens of ms that searches need not wait for.
                old.close()
                self._journal = None
                self._unindexed = max(0, self._unindexed - built)
        except BaseException:
            with self._write_lock:
                self._journal = None
            _remove_tree(target)
            raise
        _remove_leftovers(self.path, self._dir)
        log.info(
            "index %s optimized into %s (was %s): %s",
            self.path.name,
            target.name,
            old_dir.name,
            built_report,
        )

    def _build(self, target: Path) -> str:
        split = _build_split()
        child = subprocess.Popen(
            [sys.executable, "-c", _OPTIMIZE_CHILD, str(target)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        if split is not None:
            with contextlib.suppress(OSError):  # it may have failed already: its exit says why
                os.sched_setaffinity(child.pid, split[1])
        # `_child` is set while this process's threads keep off the build's CPUs, not before
        # they move nor after they are back: whoever watches the child sees them moved.
        with _BUILD_CPUS.serving_on(split[0] if split else None):
            self._child = child
            try:
                out, err = child.communicate()
            finally:
                self._child = None
        if child.returncode != 0:
            raise IndexUnavailableError(
                f"optimizing {target} failed (exit {child.returncode}): {err.strip()[-500:]}"
            )
        return out.strip()

    def _warm(self, shard: Any) -> None:
        """A few searches on the new shard before it serves: the first ones after a load read
        its graph and payload index cold (about twice as slow at 100k points)."""
        records, _ = shard.scroll(qe.ScrollRequest(limit=512, with_payload=True, with_vector=True))
        for record in records:
            vector: Any = record.vector
            if isinstance(vector, dict):
                vector = vector.get("")
            tenant = (record.payload or {}).get("tenant")
            if vector is None or tenant is None:
                continue
            shard.query(
                qe.QueryRequest(
                    limit=20,
                    query=qe.Query.Nearest(list(vector)),
                    filter=self._filter(IndexFilter(tenant=str(tenant))),
                    params=qe.SearchParams(hnsw_ef=self._ef_search),
                )
            )
            time.sleep(WARM_PAUSE_SECONDS)

    def _optimize_in_background(self) -> None:
        """Start a build unless one runs: ingest never waits for the graph."""
        if self._closed or (self._background is not None and self._background.is_alive()):
            return

        def run() -> None:
            if not self._optimizing.acquire(blocking=False):
                return
            try:
                # Writes that arrived during a build may have made the next one due.
                while not self._closed and self._unindexed >= self._optimize_after:
                    self._optimize()
            except Exception:
                log.exception("background optimize of %s failed", self.path)
            finally:
                self._optimizing.release()

        self._background = threading.Thread(target=run, name="index-optimize", daemon=True)
        self._background.start()

    def wait_optimized(self, timeout: float | None = None) -> bool:
        """Wait for a background build to finish (benchmarks and tests); False on timeout."""
        thread = self._background
        if thread is not None:
            thread.join(timeout)
            return not thread.is_alive()
        return True

    @property
    def unindexed(self) -> int:
        """Points written since the graph was last built (an estimate after a reopen)."""
        return self._unindexed

    def _count_unindexed(self) -> int:
        info = self._shard.info()
        # The count includes the BM25 vectors, indexed as they arrive; assuming every point has
        # one errs towards one build too many after a reopen, never towards a graph left stale.
        dense_indexed = info.indexed_vectors_count - (info.points_count if self.keyword else 0)
        return min(info.points_count, max(0, info.points_count - max(0, dense_indexed)))

    def wait_read_ahead(self, timeout: float | None = None) -> bool:
        """Whether the read-ahead of a shard opened from disk is done (True when none ran)."""
        if self._read_ahead is not None:
            self._read_ahead.join(timeout)
            return not self._read_ahead.is_alive()
        return True

    def publish_alias(self, alias: str) -> None:
        pass  # in process, the pointer in Postgres is the only reader's alias

    def close(self) -> None:
        self._closed = True  # no background build starts from here on
        child = self._child
        if child is not None:  # a build in flight is abandoned: its copy is removed
            with contextlib.suppress(OSError):
                child.kill()
        if self._background is not None:
            self._background.join()
        with self._optimizing, self._lock:
            if not self._shard_closed:  # a dropped generation is closed before its owner closes it
                self._shard.close()
                self._shard_closed = True
            if self._opener >= 0:
                os.close(self._opener)  # the next opener may load it
                self._opener = -1


def _take_opener_lock(path: Path, wait: float = 0.0) -> int:
    """An exclusive lock beside the index at `path`, held while it is open, taken before any of
    its files is read; another process holding it: wait up to `wait` seconds. Qdrant Edge refuses
    a second opener only after its load has begun: a refused load had cut the open shard's BM25
    journal short, and the first opener's next write failed (tests/ragkit/index/test_contract.py)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = os.open(path.parent / f".{path.name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + wait
    said = False
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return handle
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(handle)
                raise IndexUnavailableError(
                    f"vector index at {path} is open in another process (only one opener is "
                    "allowed)"
                ) from None
        if not said:
            log.info("vector index at %s %s (up to %.0f s)", path, WAITING_FOR_OPENER, wait)
            said = True
        time.sleep(0.05)


def _read_ahead(shard_dir: Path) -> None:
    """Ask the kernel to read every file of a shard into the page cache. After a restart its
    pages are not cached, and each search faulted its graph and vectors in a page at a time
    (10k points: 351 faults that needed a disk read in the first 200 searches, P99 2.1-3.2 ms;
    read ahead, 0 and 1.3-2.0 ms). The kernel reads in large requests; a search that comes first
    is no slower than without. In a thread, so the worker polls at once (at 10k points it took
    25-30 ms here). A file removed meanwhile (an optimize switched shards) is skipped."""
    for folder, _, files in os.walk(shard_dir):
        for name in files:
            with contextlib.suppress(OSError):
                handle = os.open(os.path.join(folder, name), os.O_RDONLY)
                try:
                    os.posix_fadvise(handle, 0, 0, os.POSIX_FADV_WILLNEED)
                finally:
                    os.close(handle)


def _edge_sparse(vector: SparseVector) -> qe.SparseVector:
    return qe.SparseVector(list(vector.indices), list(vector.values))


def _has_sparse(path: Path) -> bool:
    """Whether the shard at `path` was created with BM25 vectors (its config says)."""
    try:
        config = json.loads((path / "edge_config.json").read_text())
    except (OSError, ValueError):
        return False
    return SPARSE_NAME in (config.get("sparse_vectors") or {})


def _changed(report: str) -> bool:
    """Whether the child's optimize changed any segment (its last line; unreadable: yes)."""
    try:
        return bool(json.loads(report.splitlines()[-1])["changed"])
    except (IndexError, KeyError, ValueError):
        return True


def _serial(shard_dir: Path) -> int:
    name = shard_dir.name
    return int(name.removeprefix("shard-")) if name.startswith("shard-") else 0


def _live_dir(path: Path) -> Path:
    """The folder `CURRENT` names, or `path` itself (a shard from before this layout)."""
    try:
        name = (path / CURRENT).read_text().strip()
    except FileNotFoundError:
        return path
    if not name.startswith("shard-") or "/" in name:
        raise IndexConfigError(f"{path / CURRENT} names {name!r}, not a shard folder")
    return path / name


def _point_at(path: Path, shard_dir: Path) -> None:
    """Make `shard_dir` the live shard: CURRENT is replaced in one rename, so a crash leaves
    either the old or the new one named, each complete."""
    staged = path / f"{CURRENT}.tmp"
    staged.write_text(shard_dir.name + "\n")
    with staged.open("rb") as handle:
        os.fsync(handle.fileno())
    os.replace(staged, path / CURRENT)


# A shard is hundreds of files and, at 100k points, ~400 MB. Copied or removed from Python, the
# loop holds the GIL between files (stalls of 30 ms were measured in a searching thread, which
# waits for it) and runs at the serving process's priority; `cp`/`rm` in a child at nice 19
# hold no lock of ours and yield the CPU to searches. The fallbacks keep a machine without
# coreutils working.
_LOW = ["nice", "-n", "19"]
_COREUTILS = all(shutil.which(tool) for tool in ("nice", "cp", "rm"))


def _copy_tree(source: Path, target: Path) -> None:
    if target.exists():  # `cp` would copy into it
        raise IndexUnavailableError(f"cannot copy the shard to {target}: it could not be removed")
    # A shard from before the layout is its index folder itself, so the copy lands inside it:
    # `cp` refuses that, copytree lists the folder before it creates the copy.
    if _COREUTILS and not target.is_relative_to(source):
        done = subprocess.run(
            [*_LOW, "cp", "-a", "--", str(source), str(target)], capture_output=True, text=True
        )
        if done.returncode == 0:
            return
        raise IndexUnavailableError(
            f"copying {source} to {target} failed: {done.stderr.strip()[-500:]}"
        )
    shutil.copytree(source, target)


def _remove_tree(tree: Path) -> None:
    """Remove `tree` if it exists; what cannot be removed is left for the next open."""
    if not tree.exists():
        return
    if _COREUTILS:
        subprocess.run([*_LOW, "rm", "-rf", "--", str(tree)], capture_output=True)
    else:
        shutil.rmtree(tree, ignore_errors=True)


def _remove_leftovers(path: Path, live: Path) -> None:
    """Drop what is not the live shard: replaced shards, a build a crash interrupted, and the
    files of a pre-layout shard once a `shard-<n>` replaced it."""
    if live == path:
        return
    for entry in path.iterdir():
        if entry == live or entry.name == CURRENT:
            continue
        if entry.is_dir():
            _remove_tree(entry)
        else:
            entry.unlink(missing_ok=True)


def _build_split() -> tuple[list[int], list[int]] | None:
    """(searches' CPUs, the build's CPUs) while a build runs: the upper half of this process's
    CPUs builds, the rest serves; None on one CPU, where the build shares it at idle priority."""
    if not hasattr(os, "sched_getaffinity"):  # not Linux: the build shares every CPU
        return None
    cpus = sorted(_BUILD_CPUS.usual())
    if len(cpus) < 2:
        return None
    serving = len(cpus) - len(cpus) // 2
    return cpus[:serving], cpus[serving:]


class _BuildCpus:
    """Keeps this process's threads off the build's CPUs while any build runs.

    SCHED_IDLE alone did not keep searches fast. At 10k points on 2 CPUs (bench/vector_search.py,
    three runs of each, alternated), search P99 during an optimize was 2.2-3.6x idle with this
    process's threads free to run beside the build; 1.4-2.1x with only Qdrant's search pool
    (`edge-search-N`) moved off the build's CPU; 1.2-1.5x with every thread moved (a searching
    thread's own CPU time, which doubled beside the build, stayed as idle). What it costs: bulk
    embedding in this process has the other CPUs only while a graph builds (2-20 s at 10k-100k
    points), and the build gets its CPUs whole rather than what embedding leaves idle.

    Builds of two generations may overlap: the first one in moves the threads, the last one out
    puts them back. A thread born meanwhile inherits the narrow set from its creator, so it gets
    the process's usual set back; a thread that someone else moved elsewhere meanwhile is left
    alone."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._builds = 0
        self._serving: set[int] = set()
        self._usual: set[int] = set()
        self._moved: dict[int, set[int]] = {}

    def usual(self) -> set[int]:
        """This process's CPUs as they are outside builds (a second build starting while one
        runs would otherwise see the narrow set of its own thread)."""
        with self._lock:
            return set(self._usual) if self._builds else os.sched_getaffinity(0)

    @contextlib.contextmanager
    def serving_on(self, cpus: list[int] | None) -> Iterator[None]:
        if cpus is None:
            yield
            return
        with self._lock:
            self._builds += 1
            if self._builds == 1:
                self._move(set(cpus))
        try:
            yield
        finally:
            with self._lock:
                self._builds -= 1
                if self._builds == 0:
                    self._restore()

    def _move(self, cpus: set[int]) -> None:
        self._serving, self._usual = cpus, os.sched_getaffinity(0)
        for tid in thread_ids(os.getpid()):
            with contextlib.suppress(OSError):  # a thread may end between two looks
                mask = os.sched_getaffinity(tid)
                os.sched_setaffinity(tid, cpus & mask or cpus)
                self._moved[tid] = mask

    def _restore(self) -> None:
        for tid in thread_ids(os.getpid()):
            with contextlib.suppress(OSError):
                if os.sched_getaffinity(tid) <= self._serving:
                    os.sched_setaffinity(tid, self._moved.get(tid, self._usual))
        self._moved = {}


_BUILD_CPUS = _BuildCpus()
