"""What each store holds on disk, and how full the disk under it is.

`durable-rag status` prints it; the index worker exports it (`durable_rag_store_bytes`,
`durable_rag_volume_free_bytes`, `durable_rag_volume_size_bytes`), and the DiskFillingUp alert
predicts from the free bytes when a volume fills. A store is a list of files and folders; one that
is not there (yet) holds 0 bytes.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import REGISTRY
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ragkit.settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StoreUsage:
    store: str
    bytes: int
    # The filesystem the store is on: what it has left, and its size.
    volume_free: int
    volume_size: int


def stores(settings: Settings) -> dict[str, list[Path]]:
    """The stores this process can see on its disk: the vector index's folder (Qdrant Edge) and,
    in the embedded profile, everything else under the data folder too. In production the other
    stores are their own services' volumes (Temporal's and Postgres's database, Qdrant's server)."""
    data = settings.data_dir
    found: dict[str, list[Path]] = {}
    if settings.profile == "embedded":
        found["temporal"] = [
            data / "temporal.db",
            data / "temporal.db-wal",
            data / "temporal.db-shm",
        ]
        found["postgres"] = [data / "postgres"]
    if settings.index.backend == "edge":
        found["index"] = [settings.index_path]
    found["logs"] = [data / "logs"]
    return found


def tree_bytes(paths: Sequence[Path]) -> int:
    """Bytes in the files at or under `paths`; links are not followed."""
    total = 0
    for path in paths:
        files = [path] if path.is_file() else path.rglob("*") if path.is_dir() else []
        for file in files:
            try:
                if file.is_file() and not file.is_symlink():
                    total += file.stat().st_size
            except OSError:  # removed while walked: a segment merged, a WAL recycled
                pass
    return total


def _volume(paths: Sequence[Path]) -> tuple[int, int]:
    """(free, size) of the filesystem of the first of `paths` that exists, or of the nearest
    folder above it that does (a store not yet created will land there)."""
    for path in paths:
        probe = path
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        usage = shutil.disk_usage(probe)
        return usage.free, usage.total
    return 0, 0


def usage(stores: Mapping[str, Sequence[Path]]) -> list[StoreUsage]:
    found = []
    for store, paths in stores.items():
        free, size = _volume(paths)
        found.append(StoreUsage(store, tree_bytes(paths), free, size))
    return found


def human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def rotate_logs(logs: Sequence[Path], max_bytes: int, files: int) -> list[Path]:
    """Each of `logs` past `max_bytes` is copied to `<name>.1` (older copies shift up to
    `<name>.<files - 1>`, the oldest is dropped) and truncated in place: its part keeps writing
    to it (they append), so nothing restarts. Lines written between the copy and the truncate
    are lost, as with logrotate's copytruncate. Returns the logs rotated."""
    rotated = []
    for path in logs:
        try:
            if path.stat().st_size <= max_bytes:
                continue
        except OSError:  # not there (yet)
            continue
        if files > 1:
            for n in range(files - 2, 0, -1):
                older = path.with_name(f"{path.name}.{n}")
                if older.exists():
                    older.replace(path.with_name(f"{path.name}.{n + 1}"))
            shutil.copyfile(path, path.with_name(f"{path.name}.1"))
        with path.open("r+b") as live:
            live.truncate(0)
        rotated.append(path)
    return rotated


def embedded_logs(settings: Settings) -> list[Path]:
    """The logs `durable-rag up`'s parts write (durable_rag/stack): one per part, and Postgres's."""
    data = settings.data_dir
    return [*sorted((data / "logs").glob("*.log")), data / "postgres" / "server.log"]


class StoreUsageCollector(Collector):
    """Exports `usage(stores)` as gauges. A walk of a large index takes a while, so a thread
    refreshes the figures every `every` seconds and a scrape reads the last ones: a scrape never
    walks a folder. `chores` run on the same thread first (the embedded stack's log rotation)."""

    def __init__(
        self,
        stores: Mapping[str, Sequence[Path]],
        every: float = 60.0,
        chores: Callable[[], object] | None = None,
    ) -> None:
        self.stores = stores
        self.every = every
        self.chores = chores
        self.last: list[StoreUsage] = usage(stores)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._refresh, name="store-usage", daemon=True)
        self._thread.start()

    def _refresh(self) -> None:
        while not self._stop.wait(self.every):
            began = time.monotonic()
            if self.chores is not None:
                try:
                    self.chores()
                except OSError as exc:  # a full disk, a permission: the figures still refresh
                    log.warning("disk chores failed: %s", exc)
            self.last = usage(self.stores)
            # A walk that takes a fair share of the period would keep a core busy: back off.
            self._stop.wait(min(self.every, 10 * (time.monotonic() - began)))

    def close(self) -> None:
        self._stop.set()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        last = self.last
        held = GaugeMetricFamily(
            "durable_rag_store_bytes", "Bytes a store holds on disk", labels=["store"]
        )
        free = GaugeMetricFamily(
            "durable_rag_volume_free_bytes",
            "Bytes free on the filesystem a store is on",
            labels=["store"],
        )
        size = GaugeMetricFamily(
            "durable_rag_volume_size_bytes",
            "Size of the filesystem a store is on",
            labels=["store"],
        )
        for u in last:
            held.add_metric([u.store], u.bytes)
            free.add_metric([u.store], u.volume_free)
            size.add_metric([u.store], u.volume_size)
        yield from (held, free, size)


_registered: StoreUsageCollector | None = None


def register_store_usage(settings: Settings) -> StoreUsageCollector:
    """Once per process (the index worker's: it sees the index, and in the embedded profile
    every store, and rotates every part's log)."""
    global _registered
    if _registered is None:
        chores = None
        if settings.profile == "embedded":
            limit, files = settings.log.max_mb * 1024 * 1024, settings.log.files

            def chores() -> None:
                rotate_logs(embedded_logs(settings), limit, files)

        _registered = StoreUsageCollector(stores(settings), chores=chores)
        REGISTRY.register(_registered)
    return _registered
