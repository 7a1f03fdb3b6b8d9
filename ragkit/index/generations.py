"""Index generations (R18): a rebuild builds a new physical index beside the active one.

Postgres (`index_generations`) says which generation of a collection serves queries (`active`,
one per collection) and which is being built (`building`). Every write goes to both, so an ingest
or a delete during a rebuild is in the new generation too; queries read the active one until the
rebuild verifies the new one and switches the pointer in one transaction. The old one is then
`retired`, and dropped after a grace period.

The first generation's physical name is the collection itself, so an index made before
generations existed is generation one as it is.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from ragkit.db import GenerationStatus, IndexGeneration
from ragkit.index.base import IndexConfigError, VectorIndex
from ragkit.index.factory import drop_index, open_index
from ragkit.settings import Settings

log = logging.getLogger(__name__)

# How long a live read may use the active generation it last looked up: two Postgres round trips
# (with the pool's ping) per search were a tenth of the CPU an answer costs this process under
# 50 concurrent streams. A switch made elsewhere reaches readers within this; a generation is
# dropped no sooner than this after it was retired (`drop_wait`).
SERVING_TTL_SECONDS = 0.5


class Generations:
    """The index worker's view of one collection's generations, and their open handles."""

    def __init__(
        self,
        settings: Settings,
        sessions: sessionmaker[Session],
        embedding_model: str,
        dimension: int,
        opened: VectorIndex | None = None,
    ) -> None:
        self.settings = settings
        self.sessions = sessions
        self.collection = settings.index.collection
        self.embedding_model = embedding_model
        self.dimension = dimension
        self._open: dict[str, VectorIndex] = {}
        if opened is not None:
            self._open[self.collection] = opened
        self._lock = threading.Lock()
        self._serving: tuple[IndexGeneration, float] | None = None
        self._bootstrap()

    def _bootstrap(self) -> None:
        """Record generation one (the collection's own index) if nothing is recorded yet."""
        with self.sessions() as session:
            if session.scalar(
                select(IndexGeneration.id).where(IndexGeneration.collection == self.collection)
            ):
                return
        try:
            with self.sessions.begin() as session:
                session.add(
                    IndexGeneration(
                        collection=self.collection,
                        name=self.collection,
                        status=GenerationStatus.ACTIVE,
                        embedding_model=self.embedding_model,
                        dimension=self.dimension,
                        hnsw_m=self.settings.index.hnsw_m,
                        hnsw_ef_construct=self.settings.index.hnsw_ef_construct,
                        activated_at=datetime.now(UTC),
                    )
                )
        except IntegrityError:
            pass  # another worker recorded it first

    def rows(self, *statuses: str) -> list[IndexGeneration]:
        with self.sessions() as session:
            return list(
                session.scalars(
                    select(IndexGeneration)
                    .where(
                        IndexGeneration.collection == self.collection,
                        IndexGeneration.status.in_(statuses),
                    )
                    .order_by(IndexGeneration.id)
                )
            )

    def compatible(self, row: IndexGeneration) -> bool:
        return row.embedding_model == self.embedding_model and row.dimension == self.dimension

    def handle(self, row: IndexGeneration) -> VectorIndex:
        with self._lock:
            if row.name not in self._open:
                self._open[row.name] = open_index(
                    self.settings, self.dimension, row.name, row.hnsw_m, row.hnsw_ef_construct
                )
            return self._open[row.name]

    def active_row(self) -> IndexGeneration:
        rows = self.rows(GenerationStatus.ACTIVE)
        if not rows:
            raise IndexConfigError(f"no active index generation for {self.collection!r}")
        return rows[0]

    def active(self) -> VectorIndex:
        """The generation that serves queries. A generation built with another embedding model
        cannot be searched with this worker's vectors: that is a configuration error until a
        rebuild for this model switches over."""
        return self._searchable(self.active_row())

    def _searchable(self, row: IndexGeneration) -> VectorIndex:
        if not self.compatible(row):
            raise IndexConfigError(
                f"the active index generation {row.name!r} holds {row.dimension}-dimensional "
                f"vectors of {row.embedding_model!r}, but this worker embeds with "
                f"{self.embedding_model!r} ({self.dimension}): run `durable-rag rebuild`"
            )
        return self.handle(row)

    def serving(self) -> VectorIndex:
        """`active()` for live reads: the generation looked up at most SERVING_TTL_SECONDS ago.
        Writes never use it (`writers()` reads fresh: a write that missed a generation being
        built would be lost from it)."""
        now = time.monotonic()
        cached = self._serving
        if cached is None or now - cached[1] >= SERVING_TTL_SECONDS:
            self._serving = cached = (self.active_row(), now)
        return self._searchable(cached[0])

    def forget_serving(self) -> None:
        """A switch or a drop in this process: its readers look the active generation up anew."""
        self._serving = None

    def writers(self) -> list[VectorIndex]:
        """Every generation a write must reach: the active one and any being built, of this
        worker's model (another model's generation cannot take these vectors)."""
        rows = self.rows(GenerationStatus.ACTIVE, GenerationStatus.BUILDING)
        return [self.handle(row) for row in rows if self.compatible(row)]

    def drop(self, name: str) -> None:
        self.forget_serving()
        with self._lock:
            index = self._open.pop(name, None)
        if index is not None:
            index.close()
        drop_index(self.settings, name)

    def close(self) -> None:
        self.forget_serving()
        with self._lock:
            for index in self._open.values():
                index.close()
            self._open.clear()


def drop_wait(retired_at: datetime | None, now: datetime) -> float:
    """Seconds to wait before a generation retired at `retired_at` may be dropped: until every
    reader's `serving()` lookup has expired (a generation never active needs none)."""
    if retired_at is None:
        return 0.0
    return max(0.0, 2 * SERVING_TTL_SECONDS - (now - retired_at).total_seconds())
