"""The labelled `lexers` set: Pygments lexer passages and questions that each name one of them.

Fast checks only: the set loads, is labelled against its own passages, and its passage file is
still exactly what evals/build_lexer_passages.py makes from the installed (pinned) Pygments.
"""

from __future__ import annotations

import json

from evals.build_lexer_passages import MAX_CHARS, OUT, passages
from evals.retrieval import SETS, load_questions


def committed() -> list[dict[str, str]]:
    lines = (SETS / "lexers-passages.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def test_the_set_is_labelled_against_its_own_passages() -> None:
    rows = committed()
    ids = [row["id"] for row in rows]
    questions = load_questions("lexers")
    assert len(rows) >= 300 and len(questions) >= 100
    assert len(set(ids)) == len(ids)
    assert len({q.id for q in questions}) == len(questions)
    assert all(len(q.relevant) == 1 and q.relevant <= set(ids) for q in questions)


def test_every_passage_is_a_titled_text_of_50_to_600_characters() -> None:
    for row in committed():
        assert set(row) == {"id", "title", "text"}
        assert row["title"].strip(), row["id"]
        assert 50 <= len(row["text"]) <= MAX_CHARS == 600, row["id"]


def test_the_passages_are_rebuilt_exactly_from_the_installed_pygments() -> None:
    assert OUT == SETS / "lexers-passages.jsonl"
    assert passages() == committed()
