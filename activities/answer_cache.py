"""Answer cache activities: the last good answer per question, the LLM fallback's last resort.

Entries are valid for one corpus version, a digest of the tenant's active documents (count,
versions, last change): an ingest or a delete changes it, so a cached answer is never served
from a corpus it was not answered from. The version is read when the answer is stored; an
ingest that lands during generation can leave an entry one version early, which only means a
miss later.
"""

from __future__ import annotations

import hashlib

from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session, sessionmaker
from temporalio import activity

from ragkit.db import CachedAnswer, Document, DocumentStatus
from ragkit.retrieval import normalize_question
from schemas.answer import CachedAnswerOutput, CacheKeyInput, Citation, StoreAnswerInput


def question_key(request: CacheKeyInput) -> str:
    scope = ",".join(sorted(str(d) for d in request.document_ids))
    if not request.filter.empty:  # a filtered question is another question (unfiltered: as before)
        scope += "\n" + request.filter.model_dump_json()
    return hashlib.sha256(f"{normalize_question(request.question)}\n{scope}".encode()).hexdigest()


def corpus_version(session: Session, tenant: str) -> str:
    count, versions, latest = session.execute(
        select(
            func.count(),
            func.coalesce(func.sum(Document.version), 0),
            func.max(Document.updated_at),
        ).where(Document.tenant == tenant, Document.status == DocumentStatus.ACTIVE)
    ).one()
    stamp = latest.isoformat() if latest else ""
    return hashlib.sha256(f"{count}:{versions}:{stamp}".encode()).hexdigest()[:32]


class AnswerCacheActivities:
    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions

    @activity.defn
    def lookup_cached_answer(self, request: CacheKeyInput) -> CachedAnswerOutput:
        with self.sessions() as session:
            row = session.scalar(
                select(CachedAnswer).where(
                    CachedAnswer.tenant == request.tenant,
                    CachedAnswer.question_key == question_key(request),
                )
            )
            if row is None or row.corpus_version != corpus_version(session, request.tenant):
                return CachedAnswerOutput(found=False)
            return CachedAnswerOutput(
                found=True,
                answer=row.answer,
                citations=[Citation.model_validate(c) for c in row.citations],
                model=row.model,
                trace_id=row.trace_id,
            )

    @activity.defn
    def store_answer(self, request: StoreAnswerInput) -> None:
        with self.sessions.begin() as session:
            values = {
                "tenant": request.tenant,
                "question_key": question_key(request),
                "question": request.question,
                "corpus_version": corpus_version(session, request.tenant),
                "answer": request.answer,
                "citations": [c.model_dump(mode="json") for c in request.citations],
                "model": request.model,
                "trace_id": request.trace_id,
            }
            statement = insert(CachedAnswer).values(**values)
            session.execute(
                statement.on_conflict_do_update(
                    constraint="uq_answer_cache_key",
                    set_={k: statement.excluded[k] for k in values if k != "question_key"}
                    | {"created_at": func.now()},
                )
            )
