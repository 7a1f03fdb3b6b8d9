"""The answer cache against real Postgres: keyed by normalized question, scope and corpus."""

from __future__ import annotations

import uuid

import pytest

from activities.answer_cache import AnswerCacheActivities
from ragkit.db import Document, DocumentStatus
from schemas.answer import CacheKeyInput, Citation, StoreAnswerInput
from tests.conftest import Database

pytestmark = pytest.mark.integration


def add_document(db: Database, tenant: str, source: str) -> uuid.UUID:
    doc_id = uuid.uuid4()
    with db.sessions.begin() as session:
        session.add(
            Document(
                id=doc_id,
                tenant=tenant,
                source=source,
                content_type="text/plain",
                version=1,
                status=DocumentStatus.ACTIVE,
            )
        )
    return doc_id


def stored(tenant: str, question: str, answer: str, doc: uuid.UUID) -> StoreAnswerInput:
    citation = Citation(
        number=1,
        chunk_id=uuid.uuid4(),
        document_id=doc,
        source="a.txt",
        title="A",
        heading_path="A",
        char_start=0,
        char_end=10,
    )
    return StoreAnswerInput(
        tenant=tenant,
        question=question,
        trace_id=f"answer-{uuid.uuid4().hex}",
        answer=answer,
        citations=[citation],
        model="smol",
    )


def test_a_cached_answer_is_found_for_the_same_question_scope_and_corpus(
    database: Database,
) -> None:
    cache = AnswerCacheActivities(database.sessions)
    doc = add_document(database, "t", "a.txt")
    entry = stored("t", "Who designed UTF-8?", "Ken Thompson [1]", doc)
    cache.store_answer(entry)

    hit = cache.lookup_cached_answer(CacheKeyInput(tenant="t", question="  who DESIGNED utf-8 "))
    assert hit.found and hit.answer == "Ken Thompson [1]" and hit.trace_id == entry.trace_id
    assert hit.citations == entry.citations

    assert not cache.lookup_cached_answer(
        CacheKeyInput(tenant="u", question="Who designed UTF-8?")
    ).found
    scoped = CacheKeyInput(tenant="t", question="Who designed UTF-8?", document_ids=[doc])
    assert not cache.lookup_cached_answer(scoped).found

    # A newer answer replaces the old one: one row per key.
    cache.store_answer(stored("t", "who designed utf-8", "Thompson and Pike [1]", doc))
    hit = cache.lookup_cached_answer(CacheKeyInput(tenant="t", question="Who designed UTF-8?"))
    assert hit.answer == "Thompson and Pike [1]"
    assert database.scalar("SELECT count(*) FROM answer_cache") == 1


def test_a_corpus_change_makes_cached_answers_unreachable(database: Database) -> None:
    cache = AnswerCacheActivities(database.sessions)
    doc = add_document(database, "t", "a.txt")
    cache.store_answer(stored("t", "Who designed UTF-8?", "Ken Thompson [1]", doc))
    key = CacheKeyInput(tenant="t", question="Who designed UTF-8?")
    assert cache.lookup_cached_answer(key).found

    add_document(database, "other-tenant", "b.txt")  # another tenant's corpus: no effect
    assert cache.lookup_cached_answer(key).found

    add_document(database, "t", "b.txt")
    assert not cache.lookup_cached_answer(key).found

    database.execute("UPDATE documents SET version = 2 WHERE id = %s", doc)
    cache.store_answer(stored("t", "Who designed UTF-8?", "again [1]", doc))
    assert cache.lookup_cached_answer(key).found
    database.execute("UPDATE documents SET version = 3 WHERE id = %s", doc)
    assert not cache.lookup_cached_answer(key).found, "a new version of a document"
