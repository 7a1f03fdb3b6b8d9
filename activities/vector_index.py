"""Vector index activities: the only code that touches the index.

In the embedded profile the in-process index allows one opener, so these run in the index worker,
which also holds the embedding model: vectors go from the model to the index inside one activity
and never pass through workflow history (chunk vectors on ingest, the query vector on search).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime

from sqlalchemy import Row, select, tuple_
from sqlalchemy.orm import Session, sessionmaker
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.errors import index_error
from activities.heartbeat import beating
from ragkit import failpoints, policies
from ragkit.db import Chunk, Document, GenerationStatus, IndexGeneration, dead_chunk
from ragkit.embedding import Embedder
from ragkit.index import IndexFilter, IndexPoint, VectorIndex
from ragkit.index.bm25 import Bm25Encoder
from ragkit.index.generations import Generations, drop_wait
from ragkit.index.reads import ActiveReader, search_query
from ragkit.metrics import CHUNKS_EMBEDDED, STEP_SECONDS
from schemas.documents import DocumentRef
from schemas.ingest import DocumentsInput, IndexDocumentsOutput
from schemas.maintenance import CompactionInput, IndexStats, SweepIndexOutput, TenantRef
from schemas.rebuild import (
    CopyChunksInput,
    CopyChunksOutput,
    GenerationNameInput,
    GenerationRef,
    RebuildInput,
    VerifyInput,
    VerifyOutput,
)
from schemas.search import DenseSearchInput, VectorHit, VectorSearchOutput

REBUILD_RUNNING = "RebuildRunning"
REBUILD_UNVERIFIED = "RebuildUnverified"


def embedding_text(heading_path: str, text: str) -> str:
    """What the encoder sees for a chunk: its heading path gives context the body often lacks."""
    return f"{heading_path}\n\n{text}" if heading_path else text


class VectorIndexActivities:
    """Writes reach every generation being written (the active one, and one being rebuilt);
    queries read the active one (ragkit/index/generations.py)."""

    def __init__(
        self,
        generations: Generations,
        embedder: Embedder,
        sessions: sessionmaker[Session],
        bm25: Bm25Encoder | None = None,
    ) -> None:
        self.generations = generations
        self.embedder = embedder
        self.sessions = sessions
        self.bm25 = bm25 or Bm25Encoder()

    def _writers(self) -> list[VectorIndex]:
        try:
            return self.generations.writers()
        except Exception as exc:
            raise index_error(exc) from exc

    def _active(self) -> VectorIndex:
        try:
            return self.generations.active()
        except Exception as exc:
            raise index_error(exc) from exc

    def _points(self, rows: Sequence[Row[Chunk, Document]]) -> list[IndexPoint]:
        """Embed chunk rows (with their document) into index points. Every field a search
        filters on comes from Postgres, so a rebuild writes the same payload again."""
        began = time.perf_counter()
        texts = [embedding_text(c.heading_path, c.text) for c, _ in rows]
        vectors = self.embedder.embed_passages(texts)
        sparse = self.bm25.documents(texts)
        STEP_SECONDS.labels("embed").observe(time.perf_counter() - began)
        CHUNKS_EMBEDDED.labels(self.embedder.name).inc(len(rows))
        now = datetime.now(UTC).isoformat()
        return [
            IndexPoint(
                id=chunk.id,
                vector=vector,
                payload={
                    "tenant": chunk.tenant,
                    "document_id": str(chunk.document_id),
                    "version": chunk.version,
                    "ordinal": chunk.ordinal,
                    "source": document.source,
                    "title": document.title,
                    "heading_path": chunk.heading_path,
                    "text": chunk.text,
                    "ingested_at": now,
                    "created_at": document.created_at.isoformat(),
                    "updated_at": chunk.created_at.isoformat(),
                    "meta": dict(document.meta or {}),
                },
                sparse=terms,
            )
            for (chunk, document), vector, terms in zip(rows, vectors, sparse, strict=True)
        ]

    @activity.defn
    def index_documents(self, request: DocumentsInput) -> IndexDocumentsOutput:
        """Embed the staged chunks of these document versions and upsert them into the index.

        Works in slices and heartbeats the number of chunks done, so a retry after a crash resumes
        at the slice that was running. Point ids are the chunk ids: re-upserting never duplicates.
        """
        wanted = [(d.document_id, d.version) for d in request.documents]
        with self.sessions() as session:
            rows = session.execute(
                select(Chunk, Document)
                .join(Document, Document.id == Chunk.document_id)
                .where(
                    Chunk.tenant == request.tenant,
                    tuple_(Chunk.document_id, Chunk.version).in_(wanted),
                )
                .order_by(Chunk.document_id, Chunk.ordinal)
            ).all()

        details = activity.info().heartbeat_details
        done = int(details[0]) if details else 0
        embedded = 0
        step = self.embedder.passages_per_call
        for start in range(done, len(rows), step):
            window = rows[start : start + step]
            points = self._points(window)
            embedded += len(window)
            began = time.perf_counter()
            for index in self._writers():
                try:
                    failpoints.hit("index")
                    failpoints.hit("index_write")
                    index.upsert(points)
                except Exception as exc:
                    raise index_error(exc) from exc
            STEP_SECONDS.labels("upsert").observe(time.perf_counter() - began)
            activity.heartbeat(start + len(window))
        return IndexDocumentsOutput(points_upserted=len(rows) - done, passages_embedded=embedded)

    @activity.defn
    def purge_superseded(self, request: DocumentsInput) -> None:
        """Drop index points of every other version of these documents."""
        for index in self._writers():
            for doc in request.documents:
                try:
                    index.delete_other_versions(request.tenant, doc.document_id, doc.version)
                except Exception as exc:
                    raise index_error(exc) from exc

    @activity.defn
    def delete_document_points(self, request: DocumentRef) -> None:
        """Drop every index point of a deleted document (all versions)."""
        for index in self._writers():
            try:
                index.delete_other_versions(request.tenant, request.document_id, keep_version=-1)
            except Exception as exc:
                raise index_error(exc) from exc

    @activity.defn
    def delete_tenant_points(self, request: TenantRef) -> None:
        """Drop every index point of a deleted tenant, in every generation that takes writes."""
        for index in self._writers():
            try:
                index.delete_tenant(request.tenant)
            except Exception as exc:
                raise index_error(exc) from exc

    # --- compaction -----------------------------------------------------------------------------

    @activity.defn
    def index_stats(self, request: CompactionInput) -> IndexStats:
        try:
            return IndexStats(points=self._active().count())
        except Exception as exc:
            raise index_error(exc) from exc

    @activity.defn
    def sweep_index(self, request: CompactionInput) -> SweepIndexOutput:
        """Delete index points that no live chunk backs: left by a failed purge, a discarded
        ingest or a delete that stopped half-way. A point of a version being staged is live, so
        an ingest running meanwhile loses nothing (its chunk rows exist before its points)."""
        checked = removed = 0
        for index in self._writers():
            try:
                ids = index.point_ids()
            except Exception as exc:
                raise index_error(exc) from exc
            checked += len(ids)
            for start in range(0, len(ids), request.batch_size):
                window = ids[start : start + request.batch_size]
                with self.sessions() as session:
                    live = set(
                        session.scalars(
                            select(Chunk.id)
                            .join(Document, Document.id == Chunk.document_id)
                            .where(Chunk.id.in_(window), ~dead_chunk())
                        )
                    )
                dead = [i for i in window if i not in live]
                if dead:
                    try:
                        index.delete(dead)
                    except Exception as exc:
                        raise index_error(exc) from exc
                    removed += len(dead)
                activity.heartbeat(checked)
        return SweepIndexOutput(points_checked=checked, points_removed=removed)

    @activity.defn
    def optimize_index(self, request: CompactionInput) -> None:
        """Merge segments and drop deleted points' space (Qdrant Edge); the Qdrant server's
        optimizer does this by itself."""
        for index in self._writers():
            try:
                beating(index.optimize)
            except Exception as exc:
                raise index_error(exc) from exc

    # --- rebuild --------------------------------------------------------------------------------

    def _generation(self, session: Session, name: str) -> IndexGeneration:
        row = session.scalar(select(IndexGeneration).where(IndexGeneration.name == name))
        if row is None:
            raise ApplicationError(
                f"no index generation {name!r}", type=policies.NOT_FOUND, non_retryable=True
            )
        return row

    @activity.defn
    def begin_generation(self, request: RebuildInput) -> GenerationRef:
        """Record a new generation, `building`, and create its index: from now on every write
        reaches it too. A retry of the same rebuild finds the one it made."""
        workflow_id = activity.info().workflow_id or ""
        collection = self.generations.collection
        with self.sessions.begin() as session:
            building = session.scalars(
                select(IndexGeneration).where(
                    IndexGeneration.collection == collection,
                    IndexGeneration.status == GenerationStatus.BUILDING,
                )
            ).all()
            mine = [g for g in building if g.workflow_id == workflow_id]
            if building and not mine:
                raise ApplicationError(
                    f"generation {building[0].name!r} is being built by {building[0].workflow_id}",
                    type=REBUILD_RUNNING,
                    non_retryable=True,
                )
            active = self.generations.active_row()
            if mine:
                row = mine[0]
            else:
                row = IndexGeneration(
                    collection=collection,
                    name=f"{collection}-pending-{workflow_id[-40:]}",
                    status=GenerationStatus.BUILDING,
                    embedding_model=self.embedder.name,
                    dimension=self.embedder.dimension,
                    hnsw_m=request.hnsw_m,
                    hnsw_ef_construct=request.hnsw_ef_construct,
                    workflow_id=workflow_id,
                )
                session.add(row)
                session.flush()
                row.name = f"{collection}-g{row.id}"
        try:
            self.generations.handle(row)
        except Exception as exc:
            raise index_error(exc) from exc
        return GenerationRef(name=row.name, previous=active.name)

    @activity.defn
    def copy_chunks(self, request: CopyChunksInput) -> CopyChunksOutput:
        """Embed the next live chunks (by id) from Postgres, the source of truth, into the new
        generation: no re-parsing. Idempotent: point ids are chunk ids."""
        with self.sessions() as session:
            target = self._generation(session, request.name)
            if target.status != GenerationStatus.BUILDING:
                raise ApplicationError(
                    f"generation {request.name!r} is {target.status}, not building",
                    type=policies.INVALID_INPUT,
                    non_retryable=True,
                )
            query = (
                select(Chunk, Document)
                .join(Document, Document.id == Chunk.document_id)
                .where(~dead_chunk())
                .order_by(Chunk.id)
                .limit(request.batch_size)
            )
            if request.after is not None:
                query = query.where(Chunk.id > request.after)
            rows = session.execute(query).all()
        index = self.generations.handle(target)
        if rows:
            try:
                index.upsert(self._points(rows))
            except Exception as exc:
                raise index_error(exc) from exc
        return CopyChunksOutput(copied=len(rows), last=rows[-1][0].id if rows else request.after)

    @activity.defn
    def verify_generation(self, request: VerifyInput) -> VerifyOutput:
        """The new generation holds exactly the live chunks (what it lacks is embedded and added,
        what is no longer live is removed), and sample queries find results in it."""
        with self.sessions() as session:
            row = self._generation(session, request.name)
            live = set(
                session.scalars(
                    select(Chunk.id)
                    .join(Document, Document.id == Chunk.document_id)
                    .where(~dead_chunk())
                )
            )
        index = self.generations.handle(row)
        try:
            held = set(index.point_ids())
            extra = list(held - live)
            if extra:
                index.delete(extra)
            missing = sorted(live - held)
            for start in range(0, len(missing), self.embedder.passages_per_call):
                window = missing[start : start + self.embedder.passages_per_call]
                with self.sessions() as session:
                    rows = session.execute(
                        select(Chunk, Document)
                        .join(Document, Document.id == Chunk.document_id)
                        .where(Chunk.id.in_(window))
                    ).all()
                index.upsert(self._points(rows))
                activity.heartbeat(start)
            points_new = index.count()
            active = self.generations.active_row()
            points_active = (
                self.generations.handle(active).count()
                if self.generations.compatible(active)
                else -1
            )
        except Exception as exc:
            raise index_error(exc) from exc
        answered = 0
        with self.sessions() as session:
            samples = session.execute(
                select(Chunk.tenant, Chunk.text)
                .join(Document, Document.id == Chunk.document_id)
                .where(~dead_chunk())
                .order_by(Chunk.id)
                .limit(request.sample_queries)
            ).all()
        for tenant, sample in samples:
            vector = self.embedder.embed_query((sample or "")[:300])
            if index.search(vector, 3, IndexFilter(tenant=tenant)):
                answered += 1
        if points_new != len(live) or answered < len(samples):
            raise ApplicationError(
                f"generation {request.name!r} holds {points_new} points for {len(live)} live "
                f"chunks, and {answered} of {len(samples)} sample queries found results",
                type=REBUILD_UNVERIFIED,
                non_retryable=True,
            )
        return VerifyOutput(
            points_active=points_active,
            points_new=points_new,
            added=len(missing),
            removed=len(extra),
            sample_queries_answered=answered,
        )

    @activity.defn
    def activate_generation(self, request: GenerationNameInput) -> None:
        """Switch queries to this generation in one transaction; the previous one is retired."""
        now = datetime.now(UTC)
        with self.sessions.begin() as session:
            row = self._generation(session, request.name)
            if row.status == GenerationStatus.ACTIVE:
                return  # a retry after the commit
            for previous in session.scalars(
                select(IndexGeneration)
                .where(
                    IndexGeneration.collection == row.collection,
                    IndexGeneration.status == GenerationStatus.ACTIVE,
                )
                .with_for_update()
            ):
                previous.status, previous.retired_at = GenerationStatus.RETIRED, now
            session.flush()  # the one-active index holds between statements
            row.status, row.activated_at = GenerationStatus.ACTIVE, now
            row.points = self.generations.handle(row).count()
        self.generations.forget_serving()
        try:
            # For readers outside this project; ours follow the pointer committed above.
            self.generations.handle(row).publish_alias(f"{row.collection}-active")
        except Exception as exc:
            raise index_error(exc) from exc

    @activity.defn
    def drop_generation(self, request: GenerationNameInput) -> None:
        """Delete a retired generation, or an unfinished one, for good. Never the active one."""
        with self.sessions.begin() as session:
            row = self._generation(session, request.name)
            if row.status == GenerationStatus.ACTIVE:
                raise ApplicationError(
                    f"generation {row.name!r} is active: it cannot be dropped",
                    type=policies.INVALID_INPUT,
                    non_retryable=True,
                )
            if row.status == GenerationStatus.DROPPED:
                return
            # Readers elsewhere may still use the generation they looked up before it retired.
            time.sleep(drop_wait(row.retired_at, datetime.now(UTC)))
            try:
                self.generations.drop(row.name)
            except Exception as exc:
                raise index_error(exc) from exc
            row.status = (
                GenerationStatus.FAILED
                if row.status == GenerationStatus.BUILDING
                else GenerationStatus.DROPPED
            )

    @activity.defn
    def dense_search(self, request: DenseSearchInput) -> VectorSearchOutput:
        """Embed the query and search the index: one round trip, and no vector in history.
        (Runs started before live retrieval; new ones run RetrievalActivities.search_vectors.)"""
        where = IndexFilter.of(request.tenant, request.document_ids, request.filter)
        try:
            hits, embed_seconds = search_query(
                self.embedder, ActiveReader(self.generations), request.query, request.limit, where
            )
        except Exception as exc:
            raise index_error(exc) from exc
        return VectorSearchOutput(
            hits=[VectorHit(chunk_id=h.id, score=h.score) for h in hits],
            embed_seconds=embed_seconds,
        )
