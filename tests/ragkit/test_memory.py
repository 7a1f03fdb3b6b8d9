"""Pinned user statements: the part of a conversation summary no model rewrites."""

from __future__ import annotations

from ragkit.memory import pin_facts, render_summary, user_statements


def words(text: str) -> int:
    return len(text.split())


def test_statements_are_kept_and_questions_are_not() -> None:
    text = "My name is Ada Lovelace. Who designed UTF-8? I live in Paris!  ok."
    assert user_statements(text) == ["My name is Ada Lovelace.", "I live in Paris!"]


def test_pinned_facts_keep_the_earliest_within_budget_without_duplicates() -> None:
    facts = pin_facts([], ["My name is Ada Lovelace."], budget_tokens=8, count_tokens=words)
    facts = pin_facts(
        facts,
        ["My name is Ada Lovelace. I like long walks on the beach."],
        budget_tokens=8,
        count_tokens=words,
    )
    assert facts == ["My name is Ada Lovelace."]
    assert render_summary(facts, "They asked about UTF-8.") == (
        "The user said: My name is Ada Lovelace.\nThey asked about UTF-8."
    )
    assert render_summary([], "") == ""
