"""Postgres schema (SQLAlchemy 2 models) and session factory.

Postgres is the record of documents and chunks: the vector index can be rebuilt from the `chunks`
table. Alembic migrations (migrations/) are the only way this schema changes; a test checks that
these models and the migrations agree.

Versioning: a document has one *active* version. An ingest stages the next version's chunks
(`documents.pending_version`), the index receives them, and one transaction then makes them active
and deletes the previous version's rows. Reads join `chunks.version = documents.version`, so at every
moment exactly one version of a document is visible.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    ColumnElement,
    Computed,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    and_,
    create_engine,
    func,
    or_,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, TSVECTOR
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class DocumentStatus:
    PENDING = "pending"  # first version staged, never active yet: invisible
    ACTIVE = "active"
    FAILED = "failed"  # first version failed to index: invisible
    DELETED = "deleted"  # a tombstone: invisible at once; its chunks and points are removed


class Document(Base):
    __tablename__ = "documents"
    __table_args__ = (UniqueConstraint("tenant", "source", name="uq_documents_tenant_source"),)

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64), index=True)
    source: Mapped[str] = mapped_column(Text)
    title: Mapped[str] = mapped_column(Text, default="")
    content_type: Mapped[str] = mapped_column(String(32))
    byte_size: Mapped[int] = mapped_column(BigInteger, default=0)
    # The active version; 0 until one is committed.
    version: Mapped[int] = mapped_column(Integer, default=0)
    content_hash: Mapped[str | None] = mapped_column(String(64))
    chunk_count: Mapped[int] = mapped_column(Integer, default=0)
    pending_version: Mapped[int | None] = mapped_column(Integer)
    pending_hash: Mapped[str | None] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16), default=DocumentStatus.PENDING)
    error: Mapped[str | None] = mapped_column(Text)
    # Key/value pairs given at ingest; searches filter on them (R20). `metadata` is taken on a
    # declarative class, hence the attribute's name.
    meta: Mapped[dict[str, str]] = mapped_column(
        "metadata", JSONB, server_default=text("'{}'::jsonb"), default=dict
    )
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now(), onupdate=func.now()
    )


class Chunk(Base):
    __tablename__ = "chunks"
    __table_args__ = (
        UniqueConstraint(
            "document_id", "version", "ordinal", name="uq_chunks_document_version_ordinal"
        ),
        Index("ix_chunks_tsv", "tsv", postgresql_using="gin"),
    )

    # Deterministic: ids.chunk_id(document_id, version, ordinal). It is also the vector point id.
    id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    document_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("documents.id", ondelete="CASCADE"), index=True
    )
    tenant: Mapped[str] = mapped_column(String(64), index=True)
    version: Mapped[int] = mapped_column(Integer)
    ordinal: Mapped[int] = mapped_column(Integer)
    text: Mapped[str] = mapped_column(Text)
    token_count: Mapped[int] = mapped_column(Integer)
    heading_path: Mapped[str] = mapped_column(Text, default="")
    char_start: Mapped[int] = mapped_column(Integer)
    char_end: Mapped[int] = mapped_column(Integer)
    # Where a person finds it: "page 3", "slides 2", "rows 5-12" ("" where the format has none).
    location: Mapped[str] = mapped_column(Text, default="", server_default="")
    tsv: Mapped[str] = mapped_column(
        TSVECTOR,
        Computed("to_tsvector('english', heading_path || ' ' || text)", persisted=True),
        deferred=True,  # only keyword search reads it, inside Postgres
    )
    # When its version was staged: one transaction per version, so every chunk of a version has
    # the same time. It is the version's "updated" time that searches filter on, here and in the
    # index payload (written from this column, so a rebuild keeps it).
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class CachedAnswer(Base):
    """The last generated answer to a question, for the LLM fallback path (R9).

    Keyed by tenant, the normalized question and the retrieval scope (a hash of both), and valid
    only for the corpus version it was answered from: any ingest or delete changes the version
    and makes it unreachable. One row per key: storing a newer answer replaces the old one.
    """

    __tablename__ = "answer_cache"
    __table_args__ = (UniqueConstraint("tenant", "question_key", name="uq_answer_cache_key"),)

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    tenant: Mapped[str] = mapped_column(String(64))
    question_key: Mapped[str] = mapped_column(String(64))
    question: Mapped[str] = mapped_column(Text)
    corpus_version: Mapped[str] = mapped_column(String(64))
    answer: Mapped[str] = mapped_column(Text)
    citations: Mapped[list[dict[str, object]]] = mapped_column(JSONB)
    model: Mapped[str] = mapped_column(String(128))
    trace_id: Mapped[str] = mapped_column(String(256))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class Conversation(Base):
    """A conversation: the record of its turns and summaries (R16, R17). The conversation
    workflow only caches it; deleting the row deletes its turns and summaries."""

    __tablename__ = "conversations"
    __table_args__ = (
        UniqueConstraint("tenant", "external_id", name="uq_conversations_tenant_external_id"),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True)  # ids.conversation_id(tenant, ext)
    tenant: Mapped[str] = mapped_column(String(64), index=True)
    external_id: Mapped[str] = mapped_column(String(128))
    title: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now(), onupdate=func.now()
    )


class Turn(Base):
    __tablename__ = "turns"
    __table_args__ = (
        UniqueConstraint("conversation_id", "ordinal", name="uq_turns_conversation_ordinal"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    conversation_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), index=True
    )
    ordinal: Mapped[int] = mapped_column(Integer)
    role: Mapped[str] = mapped_column(String(16))  # user | assistant
    text: Mapped[str] = mapped_column(Text)
    message_id: Mapped[str] = mapped_column(String(128), default="")
    citations: Mapped[list[dict[str, object]]] = mapped_column(JSONB, default=list)
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    trace_id: Mapped[str] = mapped_column(String(256), default="", index=True)
    model: Mapped[str] = mapped_column(String(128), default="")
    degradations: Mapped[list[str]] = mapped_column(JSONB, default=list)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class Summary(Base):
    """A rolling summary: the text folds every turn up to `summarized_through`."""

    __tablename__ = "summaries"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    conversation_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), index=True
    )
    text: Mapped[str] = mapped_column(Text)
    # The user's own statements, verbatim (ragkit/memory.py): no model rewrites them.
    facts: Mapped[list[str]] = mapped_column(JSONB, default=list)
    summarized_through: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class ApiKey(Base):
    """A gateway API key. Only its SHA-256 is stored: the key itself is shown once, at creation.
    Keys are 32 random bytes, so a fast hash is enough (nothing to brute-force)."""

    __tablename__ = "api_keys"

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64), index=True)
    name: Mapped[str] = mapped_column(String(128), default="")
    prefix: Mapped[str] = mapped_column(String(16))  # shown in listings, to tell keys apart
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class Upload(Base):
    """The bytes of a document sent through the gateway: the source of the document
    `upload:<name>`, read by the ingest like a file. One per tenant and name (the latest)."""

    __tablename__ = "uploads"
    __table_args__ = (UniqueConstraint("tenant", "name", name="uq_uploads_tenant_name"),)

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(200))
    content: Mapped[bytes] = mapped_column(LargeBinary)
    sha256: Mapped[str] = mapped_column(String(64))
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now(), onupdate=func.now()
    )


class AnswerCostRow(Base):
    """What one answer cost, per step: engine seconds and tokens (R26). `costs top` reads it."""

    __tablename__ = "answer_costs"
    __table_args__ = (
        Index("ix_answer_costs_read_documents", "read_documents", postgresql_using="gin"),
    )

    trace_id: Mapped[str] = mapped_column(String(256), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64), index=True)
    model: Mapped[str] = mapped_column(String(128))
    route: Mapped[str] = mapped_column(String(32))
    prompt_tokens: Mapped[int] = mapped_column(Integer)
    completion_tokens: Mapped[int] = mapped_column(Integer)
    engine_seconds: Mapped[float] = mapped_column(Float)
    embed_seconds: Mapped[float] = mapped_column(Float)
    total_ms: Mapped[float] = mapped_column(Float)
    steps: Mapped[list[dict[str, object]]] = mapped_column(JSONB)
    cited_chunks: Mapped[list[str]] = mapped_column(JSONB, server_default=text("'[]'::jsonb"))
    # Every document whose passages the answer read (hydrated): its run, transcript and cache
    # entry carried their text, so deleting one of them finds the answer here.
    read_documents: Mapped[list[str]] = mapped_column(JSONB, server_default=text("'[]'::jsonb"))
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now(), index=True
    )


class ShadowRun(Base):
    """A candidate configuration's answer to a live request (R28), keyed by the live trace id;
    `durable-rag shadow report` compares it with the live answer's cost row and transcript."""

    __tablename__ = "shadow_runs"

    live_trace_id: Mapped[str] = mapped_column(String(256), primary_key=True)
    trace_id: Mapped[str] = mapped_column(String(256))
    tenant: Mapped[str] = mapped_column(String(64))
    model: Mapped[str] = mapped_column(String(128))
    prompt_id: Mapped[str] = mapped_column(String(64))
    retrieval: Mapped[str] = mapped_column(String(16))
    answer: Mapped[str] = mapped_column(Text)
    cited_chunks: Mapped[list[str]] = mapped_column(JSONB)
    total_ms: Mapped[float] = mapped_column(Float)
    engine_seconds: Mapped[float] = mapped_column(Float)
    route: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now(), index=True
    )


class EvalReportRow(Base):
    """One evaluation run of a case set: its metrics and every case's outcome (R25)."""

    __tablename__ = "eval_reports"

    workflow_id: Mapped[str] = mapped_column(String(256), primary_key=True)
    set_name: Mapped[str] = mapped_column(String(64), index=True)
    # Whose documents the cases were asked over ("" for runs stored before it was kept).
    tenant: Mapped[str] = mapped_column(String(64), index=True, server_default="")
    metrics: Mapped[dict[str, object]] = mapped_column(JSONB)
    outcomes: Mapped[list[dict[str, object]]] = mapped_column(JSONB)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class FeedbackRow(Base):
    """A user's thumbs up or down on one answer (the latest vote counts)."""

    __tablename__ = "feedback"
    __table_args__ = (CheckConstraint("rating IN ('up', 'down')", name="rating"),)

    trace_id: Mapped[str] = mapped_column(
        String(256), ForeignKey("answer_costs.trace_id", ondelete="CASCADE"), primary_key=True
    )
    tenant: Mapped[str] = mapped_column(String(64), index=True)
    rating: Mapped[str] = mapped_column(String(8))
    comment: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class TranscriptRow(Base):
    """The exact prompt and output of one answer, kept apart from the logs (which never carry
    them at INFO) and deleted by compaction after `transcript_retention_days`."""

    __tablename__ = "transcripts"

    trace_id: Mapped[str] = mapped_column(String(256), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64))
    model: Mapped[str] = mapped_column(String(128))
    messages: Mapped[list[dict[str, object]]] = mapped_column(JSONB)
    output: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now(), index=True
    )


class ModelAlias(Base):
    """The served model an alias (`default`) stands for. Clients read it for every request, so a
    swap switches all new answers at once (durable_rag/model_swap.py)."""

    __tablename__ = "model_aliases"

    alias: Mapped[str] = mapped_column(String(64), primary_key=True)
    model: Mapped[str] = mapped_column(String(64))
    previous: Mapped[str] = mapped_column(String(64))
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now(), onupdate=func.now()
    )


class ServedModel(Base):
    """What each LLM worker serves, announced at its start: the context length gateways budget
    prompts from, per model (ragkit/store/served_models.py)."""

    __tablename__ = "served_models"

    model: Mapped[str] = mapped_column(String(64), primary_key=True)
    max_model_len: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now(), onupdate=func.now()
    )


class GatewayRow(Base):
    """A live gateway: each records itself every heartbeat, so each knows how many share the
    admission bound (ragkit/store/gateways.py)."""

    __tablename__ = "gateways"

    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class GenerationStatus:
    BUILDING = "building"  # receives every write and the rebuild's copy; serves no query
    ACTIVE = "active"  # serves queries; one per collection
    RETIRED = "retired"  # replaced; kept for the grace period, then dropped
    DROPPED = "dropped"
    FAILED = "failed"  # a rebuild that did not verify; dropped


class IndexGeneration(Base):
    """One physical vector index (an Edge folder or a Qdrant collection) of a collection. A
    rebuild builds a new generation beside the active one and switches this pointer."""

    __tablename__ = "index_generations"
    __table_args__ = (
        Index(
            "uq_index_generations_one_active",
            "collection",
            unique=True,
            postgresql_where=text("status = 'active'"),
        ),
    )

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    collection: Mapped[str] = mapped_column(String(64), index=True)
    name: Mapped[str] = mapped_column(String(96), unique=True)
    status: Mapped[str] = mapped_column(String(16))
    embedding_model: Mapped[str] = mapped_column(Text)
    dimension: Mapped[int] = mapped_column(Integer)
    hnsw_m: Mapped[int] = mapped_column(Integer)
    hnsw_ef_construct: Mapped[int] = mapped_column(Integer)
    workflow_id: Mapped[str | None] = mapped_column(String(256))
    points: Mapped[int | None] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    activated_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    retired_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


def dead_chunk() -> ColumnElement[bool]:
    """A chunk row no reader can see (joined with its document): its document is tombstoned, or
    its version is neither the active one nor the one being staged."""
    return or_(
        Document.status == DocumentStatus.DELETED,
        and_(
            Chunk.version != Document.version,
            or_(Document.pending_version.is_(None), Chunk.version != Document.pending_version),
        ),
    )


def make_engine(url: str) -> Engine:
    return create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=5)


def make_sessionmaker(url: str) -> sessionmaker[Session]:
    return sessionmaker(make_engine(url), expire_on_commit=False)
