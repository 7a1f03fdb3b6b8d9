"""Document activities: files and the Postgres record of documents and chunks."""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from sqlalchemy import ColumnElement, delete, func, insert, select, text
from sqlalchemy.exc import DataError, DBAPIError
from sqlalchemy.orm import Session, sessionmaker
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.heartbeat import beating
from ragkit import ids, parsing, policies, tracing
from ragkit.chunking import chunk_document
from ragkit.db import Chunk, Document, DocumentStatus, dead_chunk
from ragkit.metrics import DOCUMENTS_INGESTED, STEP_SECONDS
from ragkit.parsing.isolation import IsolatedParser, Parser
from ragkit.retrieval import keyword_query
from ragkit.sources import Source
from ragkit.store import uploads
from schemas.common import DocumentFailure, DocumentFilter, DocumentVersion
from schemas.documents import DocumentRef, PurgeDocumentOutput, TombstoneOutput
from schemas.ingest import (
    CommitOutput,
    DiscoverInput,
    DiscoverOutput,
    DocumentsInput,
    SkippedFiles,
    StageBatchInput,
    StageBatchOutput,
)
from schemas.maintenance import (
    ChunkStats,
    CompactionInput,
    PurgeChunksOutput,
    RewriteTablesOutput,
)
from schemas.search import (
    HydrateInput,
    HydrateOutput,
    KeywordSearchInput,
    Passage,
    VectorHit,
    VectorSearchOutput,
)

log = logging.getLogger(__name__)


def document_conditions(documents: DocumentFilter) -> list[ColumnElement[bool]]:
    """The filter as SQL on a join of chunks and their documents: the same bounds and pairs as
    the index payload's (`created_at` is the document's, `updated_at` its chunks' version)."""
    found: list[ColumnElement[bool]] = []
    if documents.created_after is not None:
        found.append(Document.created_at >= documents.created_after)
    if documents.created_before is not None:
        found.append(Document.created_at <= documents.created_before)
    if documents.updated_after is not None:
        found.append(Chunk.created_at >= documents.updated_after)
    if documents.updated_before is not None:
        found.append(Chunk.created_at <= documents.updated_before)
    if documents.metadata:
        found.append(Document.meta.contains(dict(documents.metadata)))
    return found


# Tables that hold tenant text (documents' text, questions, answers, prompts, feedback): what a
# compaction rewrites so deleted rows leave the files (rewrite_tables).
TEXT_TABLES = (
    "chunks",
    "documents",
    "uploads",
    "answer_cache",
    "conversations",
    "turns",
    "summaries",
    "transcripts",
    "answer_costs",
    "shadow_runs",
    "eval_reports",
    "feedback",
)


class _Skips:
    """What a folder walk left out, grouped by (kind, extension), with a few examples each."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str, str], int] = {}
        self.examples: dict[tuple[str, str, str], list[str]] = {}

    def add(self, path: Path, kind: str, extension: str = "", reason: str = "") -> None:
        key = (kind, extension, reason)
        self.counts[key] = self.counts.get(key, 0) + 1
        examples = self.examples.setdefault(key, [])
        if len(examples) < 3:
            examples.append(os.fsencode(path).decode("utf-8", "backslashreplace"))

    def walk(self, folder: Path) -> list[Path]:
        """The supported files under `folder`, sorted; every other file is counted here."""
        found = []
        for path in folder.rglob("*"):
            parts = path.relative_to(folder).parts
            if any(part.startswith(".") for part in parts):
                if not path.is_dir():
                    self.add(path, "hidden")
                continue
            if path.is_dir():
                continue
            suffix = path.suffix.lower()
            if not path.is_file():  # a FIFO, a socket, a device, a dangling link
                self.add(path, parsing.UNREADABLE, suffix or "(none)", "not a regular file")
            elif suffix in parsing.CONTENT_TYPES:
                found.append(path)
            else:
                reason = parsing.unsupported_reason(suffix)
                self.add(path, parsing.UNSUPPORTED_TYPE, suffix or "(none)", reason)
        return sorted(found)

    def report(self) -> list[SkippedFiles]:
        return [
            SkippedFiles(
                kind=kind, extension=extension, reason=reason, count=n, examples=self.examples[key]
            )
            for key, n in sorted(self.counts.items(), key=lambda item: (-item[1], item[0]))
            for kind, extension, reason in [key]
        ]


class DocumentActivities:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        tokenizer: Any,
        chunk_tokens: int,
        chunk_overlap: float,
        max_document_bytes: int,
        parser: Parser | None = None,
    ) -> None:
        self.sessions = sessions
        self.tokenizer = tokenizer
        self.chunk_tokens = chunk_tokens
        self.chunk_overlap = chunk_overlap
        self.max_document_bytes = max_document_bytes
        # Documents are parsed in child processes with limits: a hostile one costs a parse_error.
        self.parser: Parser = parser or IsolatedParser()
        # Fast tokenizers refuse concurrent use from several threads ("Already borrowed").
        self._tokenizer_lock = threading.Lock()

    # --- ingest ---------------------------------------------------------------------------------

    @activity.defn
    def discover_files(self, request: DiscoverInput) -> DiscoverOutput:
        """Expand folders into the supported files under them, in a stable order."""
        files: list[str] = []
        failures: list[DocumentFailure] = []
        skips = _Skips()
        seen: set[str] = set()
        for raw in request.paths:
            if Source.parse(raw).is_upload:
                if raw not in seen:  # read, and reported if missing, when staged
                    seen.add(raw)
                    files.append(raw)
                continue
            # abspath, not resolve: a symlink keeps its own name as the document's source.
            path = Path(os.path.abspath(Path(raw).expanduser()))
            if path.is_dir():
                candidates = [str(p) for p in skips.walk(path)]
            elif path.exists():
                candidates = [str(path)]
            else:
                failures.append(
                    DocumentFailure(
                        source=str(path),
                        kind=parsing.UNREADABLE,
                        message="no such file or directory",
                    )
                )
                continue
            for candidate in candidates:
                if not _utf8(candidate):
                    # A name that is not UTF-8 on disk cannot travel in a payload or key a
                    # document: this one file is unreadable, the others go on.
                    failures.append(
                        DocumentFailure(
                            source=os.fsencode(candidate).decode("utf-8", "backslashreplace"),
                            kind=parsing.UNREADABLE,
                            message="the file name is not valid UTF-8: rename the file",
                        )
                    )
                    continue
                if candidate not in seen:
                    seen.add(candidate)
                    files.append(candidate)
        return DiscoverOutput(files=files, failures=failures, skipped=skips.report())

    @activity.defn
    def stage_batch(self, request: StageBatchInput) -> StageBatchOutput:
        """Parse, chunk and diff each file; stage changed ones as a pending version.

        A pending version is invisible to readers until `commit_batch`. Staging again (a retry)
        replaces the same pending rows, with the same deterministic ids.
        """
        staged: list[DocumentVersion] = []
        unchanged: list[str] = []
        failures: list[DocumentFailure] = []
        notes: list[DocumentFailure] = []
        for source in request.files:
            try:
                # Heartbeats while a file is parsed: a crashed worker is noticed in seconds,
                # not at the end of the start-to-close timeout (bench/faults.py worker_sigkill).
                outcome = beating(
                    functools.partial(self._stage_one, request.tenant, source, request.metadata)
                )
            except parsing.DocumentError as exc:
                failures.append(DocumentFailure(source=source, kind=exc.kind, message=exc.message))
                DOCUMENTS_INGESTED.labels("failed").inc()
                continue
            except DataError as exc:
                # What this one document holds cannot be stored (Postgres refused a value): it
                # fails alone; a retry would meet the same refusal, and its batch goes on.
                message = f"the database refused its text: {exc.orig or exc}"[:1_000]
                failures.append(
                    DocumentFailure(source=source, kind=parsing.PARSE_ERROR, message=message)
                )
                DOCUMENTS_INGESTED.labels("failed").inc()
                continue
            if outcome is None:
                unchanged.append(source)
                DOCUMENTS_INGESTED.labels("unchanged").inc()
            else:
                version, said = outcome
                staged.append(version)
                notes.extend(
                    DocumentFailure(source=source, kind=kind, message=message)
                    for kind, message in said
                )
        return StageBatchOutput(staged=staged, unchanged=unchanged, failures=failures, notes=notes)

    def _stage_one(
        self, tenant: str, source: str, metadata: dict[str, str]
    ) -> tuple[DocumentVersion, list[tuple[str, str]]] | None:
        started = time.perf_counter()
        content_type = parsing.content_type_for(source)
        data = self._read(tenant, Source.parse(source))
        # The metadata is part of what a version is: new pairs make a new version, whose points
        # carry them, so the index's payload never disagrees with Postgres for long.
        digest = ids.content_hash(data, metadata)
        doc_id = ids.document_id(tenant, source)

        with self.sessions() as session:
            current = session.get(Document, doc_id)
            if (
                current
                and current.status == DocumentStatus.ACTIVE
                and current.content_hash == digest
            ):
                return None

        parsed = self.parser(data, content_type, Source.parse(source).stem)
        with self._tokenizer_lock:
            drafts = chunk_document(parsed, self.tokenizer, self.chunk_tokens, self.chunk_overlap)
        STEP_SECONDS.labels("parse_chunk").observe(time.perf_counter() - started)

        with self.sessions.begin() as session:
            doc = session.get(Document, doc_id, with_for_update=True)
            if doc is None:
                doc = Document(
                    id=doc_id,
                    tenant=tenant,
                    source=source,
                    version=0,
                    chunk_count=0,
                    status=DocumentStatus.PENDING,
                    content_type=content_type,
                )
                session.add(doc)
            elif doc.status == DocumentStatus.ACTIVE and doc.content_hash == digest:
                return None  # a concurrent ingest got here first
            version = doc.version + 1
            doc.title = parsed.title
            doc.meta = dict(metadata)
            doc.content_type = content_type
            doc.byte_size = len(data)
            doc.pending_version = version
            doc.pending_hash = digest
            doc.error = None
            session.flush()
            session.execute(
                delete(Chunk).where(Chunk.document_id == doc_id, Chunk.version == version)
            )
            session.execute(
                insert(Chunk),
                [
                    {
                        "id": ids.chunk_id(doc_id, version, d.ordinal),
                        "document_id": doc_id,
                        "tenant": tenant,
                        "version": version,
                        "ordinal": d.ordinal,
                        "text": d.text,
                        "token_count": d.token_count,
                        "heading_path": d.heading_path,
                        "char_start": d.char_start,
                        "char_end": d.char_end,
                        "location": d.location,
                    }
                    for d in drafts
                ],
            )
        return DocumentVersion(document_id=doc_id, version=version, source=source), parsed.notes

    def _read(self, tenant: str, source: Source) -> bytes:
        if not source.is_upload:
            return parsing.read_source(Path(source.location), self.max_document_bytes)
        with self.sessions() as session:
            data = uploads.read(session, tenant, source.location)
        if data is None:
            raise parsing.DocumentError(parsing.UNREADABLE, "no such upload")
        if len(data) > self.max_document_bytes:
            raise parsing.DocumentError(
                parsing.TOO_LARGE,
                f"{len(data)} bytes is over the limit of {self.max_document_bytes} bytes",
            )
        return data

    # --- delete -------------------------------------------------------------------------------

    @activity.defn
    def tombstone_document(self, request: DocumentRef) -> TombstoneOutput:
        """Mark a document deleted: every retrieval path reads active documents only, so it is
        invisible from this commit on. A staged version in flight is dropped with it."""
        with self.sessions.begin() as session:
            doc = session.get(Document, request.document_id, with_for_update=True)
            if doc is None or doc.tenant != request.tenant:
                raise ApplicationError(
                    f"no document {request.document_id} for tenant {request.tenant}",
                    type=policies.NOT_FOUND,
                    non_retryable=True,
                )
            if doc.status == DocumentStatus.DELETED:
                return TombstoneOutput(source=doc.source, already_deleted=True)
            doc.status = DocumentStatus.DELETED
            doc.pending_version = None
            doc.pending_hash = None
            return TombstoneOutput(source=doc.source, already_deleted=False)

    @activity.defn
    def purge_document(self, request: DocumentRef) -> PurgeDocumentOutput:
        """Remove a tombstoned document's chunks (and its upload); the tombstone row stays, so
        deleting again is harmless and a new ingest of the source starts a new version."""
        with self.sessions.begin() as session:
            doc = session.get(Document, request.document_id, with_for_update=True)
            if doc is None or doc.tenant != request.tenant or doc.status != DocumentStatus.DELETED:
                return PurgeDocumentOutput(chunks_removed=0)  # re-ingested meanwhile: keep it
            removed = session.execute(
                delete(Chunk).where(Chunk.document_id == doc.id).returning(Chunk.id)
            ).all()
            doc.chunk_count = 0
            source = Source.parse(doc.source)
            if source.is_upload:
                uploads.delete(session, doc.tenant, source.location)
        return PurgeDocumentOutput(chunks_removed=len(removed))

    @activity.defn
    def commit_batch(self, request: DocumentsInput) -> CommitOutput:
        """Make staged versions active and drop the rows of the versions they replace.

        One transaction: readers see either the old version or the new one, never both or none.
        Idempotent: a version that is already active counts as committed.
        """
        committed: list[DocumentVersion] = []
        with self.sessions.begin() as session:
            for item in request.documents:
                doc = session.get(Document, item.document_id, with_for_update=True)
                if doc is None or doc.tenant != request.tenant:
                    continue
                if doc.version == item.version and doc.pending_version is None:
                    committed.append(item)
                    continue
                if doc.pending_version != item.version:
                    log.warning(
                        "document %s: version %d was superseded before commit",
                        doc.source,
                        item.version,
                    )
                    continue
                session.execute(
                    delete(Chunk).where(Chunk.document_id == doc.id, Chunk.version != item.version)
                )
                doc.version = item.version
                doc.content_hash = doc.pending_hash
                doc.pending_version = None
                doc.pending_hash = None
                doc.status = DocumentStatus.ACTIVE
                doc.chunk_count = (
                    session.scalar(
                        select(func.count())
                        .select_from(Chunk)
                        .where(Chunk.document_id == doc.id, Chunk.version == item.version)
                    )
                    or 0
                )
                committed.append(item)
            total = session.scalar(
                select(func.count())
                .select_from(Chunk)
                .join(Document, Document.id == Chunk.document_id)
                .where(
                    Chunk.document_id.in_([c.document_id for c in committed]),
                    Chunk.version == Document.version,
                )
            )
        DOCUMENTS_INGESTED.labels("ingested").inc(len(committed))
        return CommitOutput(committed=committed, chunks_active=total or 0)

    @activity.defn
    def discard_pending(self, request: DocumentsInput) -> None:
        """Drop staged versions that could not be indexed; the active version stays as it was."""
        with self.sessions.begin() as session:
            for item in request.documents:
                doc = session.get(Document, item.document_id, with_for_update=True)
                if (
                    doc is None
                    or doc.tenant != request.tenant
                    or doc.pending_version != item.version
                ):
                    continue
                session.execute(
                    delete(Chunk).where(Chunk.document_id == doc.id, Chunk.version == item.version)
                )
                doc.pending_version = None
                doc.pending_hash = None
                if doc.version == 0:
                    doc.status = DocumentStatus.FAILED
        DOCUMENTS_INGESTED.labels("failed").inc(len(request.documents))

    # --- compaction -----------------------------------------------------------------------------

    @activity.defn
    def purge_dead_chunks(self, request: CompactionInput) -> PurgeChunksOutput:
        """Delete up to `batch_size` dead chunk rows: those of tombstoned documents and of
        versions that are neither active nor staged. Readers never see them; this reclaims them."""
        with self.sessions.begin() as session:
            dead = (
                select(Chunk.id)
                .join(Document, Document.id == Chunk.document_id)
                .where(dead_chunk())
                .limit(request.batch_size)
            )
            removed = session.execute(
                delete(Chunk).where(Chunk.id.in_(dead)).returning(Chunk.id)
            ).all()
        return PurgeChunksOutput(removed=len(removed))

    @activity.defn
    def chunk_stats(self, request: CompactionInput) -> ChunkStats:
        with self.sessions() as session:
            total = session.scalar(select(func.count()).select_from(Chunk)) or 0
            live = (
                session.scalar(
                    select(func.count())
                    .select_from(Chunk)
                    .join(Document, Document.id == Chunk.document_id)
                    .where(~dead_chunk())
                )
                or 0
            )
            tombstones = (
                session.scalar(
                    select(func.count())
                    .select_from(Document)
                    .where(Document.status == DocumentStatus.DELETED)
                )
                or 0
            )
        return ChunkStats(chunks=total, live_chunks=live, tombstoned_documents=tombstones)

    @activity.defn
    def vacuum_chunks(self, request: CompactionInput) -> None:
        """VACUUM (ANALYZE) the tables compaction deleted from: the space is reused and the
        planner's statistics are fresh."""
        engine = self.sessions.kw["bind"]

        def vacuum() -> None:
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.execute(text("VACUUM (ANALYZE) chunks, documents, uploads"))

        beating(vacuum)

    @activity.defn
    def rewrite_tables(self, request: CompactionInput) -> RewriteTablesOutput:
        """Rewrite (VACUUM FULL) every table that holds tenant text, then the planner's samples
        of it, then start a new WAL segment and checkpoint so the old ones are removed: a row
        deleted before this holds no byte in the database's files after it. VACUUM alone only
        marks the space free; the deleted text stays in the page until something overwrites it."""
        engine = self.sessions.kw["bind"]
        if request.rewrite_max_mb == 0:
            return RewriteTablesOutput(rewritten=[])
        limit = request.rewrite_max_mb * 1024 * 1024
        rewritten: list[str] = []
        skipped: dict[str, str] = {}

        def rewrite(conn: Any, table: str, statement: str) -> None:
            try:
                conn.execute(text(statement))
                rewritten.append(table)
            except DBAPIError as exc:
                skipped[table] = str(exc.orig).strip().splitlines()[0]

        def rewrite_all() -> bool:
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                # Behind a long transaction the rewrite's lock would queue every reader too: it
                # gives up instead, and the next compaction tries again.
                conn.execute(text("SET lock_timeout = '5s'"))
                sizes = dict(
                    conn.execute(
                        text(
                            "SELECT relname, pg_total_relation_size(oid) FROM pg_class "
                            "WHERE relnamespace = current_schema()::regnamespace "
                            "AND relname = ANY(:names)"
                        ),
                        {"names": list(TEXT_TABLES)},
                    ).all()
                )
                for table in TEXT_TABLES:
                    size = sizes.get(table)
                    if size is None:
                        continue
                    if size > limit:
                        skipped[table] = (
                            f"{size / 2**20:.0f} MB, over rewrite_max_mb ({request.rewrite_max_mb})"
                        )
                        continue
                    rewrite(conn, table, f"VACUUM (FULL, ANALYZE) {table}")
                # ANALYZE keeps sample values of text columns in the catalog: its old rows
                # (samples of deleted rows) were left dead by the ANALYZE above.
                rewrite(conn, "pg_statistic", "VACUUM FULL pg_catalog.pg_statistic")
                if conn.execute(text("SHOW wal_recycle")).scalar() == "on":
                    skipped["wal"] = (
                        "wal_recycle is on: a recycled segment keeps old WAL bytes; set "
                        "wal_recycle=off"
                    )
                    return False
                try:
                    conn.execute(text("CHECKPOINT"))
                    conn.execute(text("SELECT pg_switch_wal()"))
                    conn.execute(text("CHECKPOINT"))
                except DBAPIError as exc:
                    skipped["wal"] = str(exc.orig).strip().splitlines()[0]
                    return False
                return True

        switched = beating(rewrite_all)
        return RewriteTablesOutput(rewritten=rewritten, skipped=skipped, wal_switched=switched)

    # --- retrieval ------------------------------------------------------------------------------

    @activity.defn
    def keyword_search(self, request: KeywordSearchInput) -> VectorSearchOutput:
        """Postgres full-text search over active chunks: websearch_to_tsquery + ts_rank.

        The query matches any of the question's words (see retrieval.keyword_query); ts_rank
        orders by how many and how often.
        """
        query = func.websearch_to_tsquery("english", keyword_query(request.query))
        rank = func.ts_rank(Chunk.tsv, query)
        statement = (
            select(Chunk.id, rank.label("rank"))
            .join(Document, Document.id == Chunk.document_id)
            .where(
                Chunk.tenant == request.tenant,
                Document.tenant == request.tenant,
                Document.status == DocumentStatus.ACTIVE,
                Chunk.version == Document.version,
                Chunk.tsv.op("@@")(query),
            )
            .order_by(rank.desc(), Chunk.id)
            .limit(request.limit)
        )
        if request.document_ids:
            statement = statement.where(Chunk.document_id.in_(request.document_ids))
        statement = statement.where(*document_conditions(request.filter))
        with (
            tracing.step(
                "keyword_search", tracing.RETRIEVER, tracing.content(tracing.INPUT, request.query)
            ),
            self.sessions() as session,
        ):
            rows = session.execute(statement).all()
            hits = [VectorHit(chunk_id=r.id, score=float(r.rank)) for r in rows]
            found = [(str(h.chunk_id), h.score, None) for h in hits]
            tracing.annotate(tracing.documents(tracing.RETRIEVED, found))
        return VectorSearchOutput(hits=hits)

    @activity.defn
    def hydrate_hits(self, request: HydrateInput) -> HydrateOutput:
        """Resolve index hits against Postgres, keeping only chunks of active versions.

        This is what makes a version switch atomic for vector search too: points of a staged or
        superseded version may sit in the index for a while, but they never reach a reader.
        """
        with tracing.step("hydrate", tracing.RETRIEVER) as span:
            output = self._hydrate(request)
            if span is not None:
                span.set_attributes(
                    {
                        **tracing.documents(
                            tracing.RETRIEVED,
                            [(str(p.chunk_id), p.score, p.text) for p in output.passages],
                        ),
                        "durable_rag.stale_hits": output.stale_hits,
                    }
                )
            return output

    def _hydrate(self, request: HydrateInput) -> HydrateOutput:
        if not request.hits:
            return HydrateOutput(passages=[], stale_hits=0)
        scores = {h.chunk_id: h.score for h in request.hits}
        with self.sessions() as session:
            rows = session.execute(
                select(Chunk, Document)
                .join(Document, Document.id == Chunk.document_id)
                .where(
                    Chunk.id.in_(list(scores)),
                    Chunk.tenant == request.tenant,
                    Document.tenant == request.tenant,
                    Document.status == DocumentStatus.ACTIVE,
                    Chunk.version == Document.version,
                )
            ).all()
        passages = [
            Passage(
                chunk_id=chunk.id,
                document_id=doc.id,
                version=chunk.version,
                ordinal=chunk.ordinal,
                source=doc.source,
                title=doc.title,
                heading_path=chunk.heading_path,
                text=chunk.text,
                score=scores[chunk.id],
                char_start=chunk.char_start,
                char_end=chunk.char_end,
                location=chunk.location,
            )
            for chunk, doc in rows
        ]
        passages.sort(key=lambda p: p.score, reverse=True)
        return HydrateOutput(
            passages=passages[: request.limit], stale_hits=len(request.hits) - len(passages)
        )


def _utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
