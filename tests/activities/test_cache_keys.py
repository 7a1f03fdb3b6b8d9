"""The answer cache's keys (activities/answer_cache.py), computed without a database."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

from schemas.common import DocumentFilter


def test_a_filtered_question_is_cached_apart() -> None:
    """The answer cache's key holds the filter: a filtered question never gets the unfiltered
    one's answer (the LLM fallback path serves cached answers); unfiltered keys are as before."""
    from activities.answer_cache import question_key
    from ragkit.retrieval import normalize_question
    from schemas.answer import CacheKeyInput

    plain = CacheKeyInput(tenant="t", question="Where do herons live?")
    narrowed = plain.model_copy(
        update={"filter": DocumentFilter(updated_after=datetime(2026, 1, 1, tzinfo=UTC))}
    )
    assert question_key(plain) != question_key(narrowed)
    # Unfiltered, the key is what it was before filters existed: cached answers stay found.
    before = hashlib.sha256(f"{normalize_question(plain.question)}\n".encode()).hexdigest()
    assert question_key(plain) == before
