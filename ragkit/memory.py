"""Conversation memory helpers (pure): the facts a user states, kept verbatim in the summary.

A small model rewriting a rolling summary drops details, often the ones stated first (a name, a
number). So the summary has two parts: the user's own statements, pinned word for word, and the
model's summary of the exchange. A statement is a user sentence that is not a question.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

_SENTENCE = re.compile(r"[^.!?\n]+[.!?]?")
MIN_WORDS = 3


def user_statements(text: str) -> list[str]:
    """The sentences of a user message that state something (questions are not kept)."""
    found = []
    for match in _SENTENCE.finditer(text):
        sentence = " ".join(match.group().split())
        if sentence.endswith("?") or len(sentence.split()) < MIN_WORDS:
            continue
        found.append(sentence)
    return found


def pin_facts(
    pinned: Sequence[str],
    new_user_messages: Sequence[str],
    budget_tokens: int,
    count_tokens: Callable[[str], int],
) -> list[str]:
    """Add the new messages' statements to the pinned ones, earliest first, within the budget.

    When the budget is full the newest statements are not pinned: the model's summary still
    covers them, and what a user says first (who they are, what they want) tends to matter most.
    """
    facts = list(pinned)
    used = sum(count_tokens(f) for f in facts)
    for message in new_user_messages:
        for statement in user_statements(message):
            cost = count_tokens(statement)
            if statement in facts or used + cost > budget_tokens:
                continue
            facts.append(statement)
            used += cost
    return facts


def render_summary(facts: Sequence[str], summary: str) -> str:
    """The summary as a prompt shows it."""
    parts = []
    if facts:
        parts.append("The user said: " + " ".join(facts))
    if summary:
        parts.append(summary)
    return "\n".join(parts)
