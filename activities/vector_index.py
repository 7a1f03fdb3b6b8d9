"""Vector index activities: the only code that touches the index.

In the embedded profile the in-process index allows one opener, so these run in the index worker,
which also holds the embedding model: vectors go from the model to the index inside one activity
and never pass through workflow history (chunk vectors on ingest, the query vector on search).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from sqlalchemy import select, tuple_
from sqlalchemy.orm import Session, sessionmaker
from temporalio import activity

from activities.errors import index_error
from durable_rag.db import Chunk, Document
from durable_rag.embedding import Embedder
from durable_rag.index import IndexFilter, IndexPoint, VectorIndex
from durable_rag.metrics import CHUNKS_EMBEDDED, STEP_SECONDS
from schemas.documents import DocumentRef
from schemas.ingest import DocumentsInput, IndexDocumentsOutput
from schemas.search import DenseSearchInput, VectorHit, VectorSearchOutput


def embedding_text(heading_path: str, text: str) -> str:
    """What the encoder sees for a chunk: its heading path gives context the body often lacks."""
    return f"{heading_path}\n\n{text}" if heading_path else text


class VectorIndexActivities:
    def __init__(
        self, index: VectorIndex, embedder: Embedder, sessions: sessionmaker[Session]
    ) -> None:
        self.index = index
        self.embedder = embedder
        self.sessions = sessions

    @activity.defn
    def index_documents(self, request: DocumentsInput) -> IndexDocumentsOutput:
        """Embed the staged chunks of these document versions and upsert them into the index.

        Works in slices and heartbeats the number of chunks done, so a retry after a crash resumes
        at the slice that was running. Point ids are the chunk ids: re-upserting never duplicates.
        """
        wanted = [(d.document_id, d.version) for d in request.documents]
        with self.sessions() as session:
            rows = session.execute(
                select(Chunk, Document.source, Document.title)
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
        now = datetime.now(UTC).isoformat()
        for start in range(done, len(rows), step):
            window = rows[start : start + step]
            began = time.perf_counter()
            vectors = self.embedder.embed_passages(
                [embedding_text(c.heading_path, c.text) for c, _, _ in window]
            )
            STEP_SECONDS.labels("embed").observe(time.perf_counter() - began)
            CHUNKS_EMBEDDED.labels(self.embedder.name).inc(len(window))
            embedded += len(window)
            points = [
                IndexPoint(
                    id=chunk.id,
                    vector=vector,
                    payload={
                        "tenant": chunk.tenant,
                        "document_id": str(chunk.document_id),
                        "version": chunk.version,
                        "ordinal": chunk.ordinal,
                        "source": source,
                        "title": title,
                        "heading_path": chunk.heading_path,
                        "text": chunk.text,
                        "ingested_at": now,
                    },
                )
                for (chunk, source, title), vector in zip(window, vectors, strict=True)
            ]
            began = time.perf_counter()
            try:
                self.index.upsert(points)
            except Exception as exc:
                raise index_error(exc) from exc
            STEP_SECONDS.labels("upsert").observe(time.perf_counter() - began)
            activity.heartbeat(start + len(window))
        return IndexDocumentsOutput(points_upserted=len(rows) - done, passages_embedded=embedded)

    @activity.defn
    def purge_superseded(self, request: DocumentsInput) -> None:
        """Drop index points of every other version of these documents."""
        for doc in request.documents:
            try:
                self.index.delete_other_versions(request.tenant, doc.document_id, doc.version)
            except Exception as exc:
                raise index_error(exc) from exc

    @activity.defn
    def delete_document_points(self, request: DocumentRef) -> None:
        """Drop every index point of a deleted document (all versions)."""
        try:
            self.index.delete_other_versions(request.tenant, request.document_id, keep_version=-1)
        except Exception as exc:
            raise index_error(exc) from exc

    @activity.defn
    def dense_search(self, request: DenseSearchInput) -> VectorSearchOutput:
        """Embed the query and search the index: one round trip, and no vector in history."""
        began = time.perf_counter()
        vector = self.embedder.embed_query(request.query)
        STEP_SECONDS.labels("embed_query").observe(time.perf_counter() - began)
        where = IndexFilter(tenant=request.tenant, document_ids=tuple(request.document_ids))
        try:
            hits = self.index.search(vector, request.limit, where)
        except Exception as exc:
            raise index_error(exc) from exc
        return VectorSearchOutput(hits=[VectorHit(chunk_id=h.id, score=h.score) for h in hits])
