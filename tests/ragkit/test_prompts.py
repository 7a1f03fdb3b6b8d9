"""Versioned prompt templates (R16): id and hash of the exact file, checked when loaded."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from ragkit import prompts
from ragkit.retrieval import BUILTIN_USER_TEMPLATE, SYSTEM_PROMPT, build_prompt
from ragkit.settings import Settings


def test_the_shipped_template_is_hashed_from_its_bytes_and_matches_the_builtin_prompt() -> None:
    template = prompts.load("answer-v1")
    raw = (prompts.FOLDER / "answer-v1.toml").read_bytes()
    assert template.hash == hashlib.sha256(raw).hexdigest()[:16]
    # v1 is the prompt answers used before templates were versioned, byte for byte.
    assert (template.system, template.user) == (SYSTEM_PROMPT, BUILTIN_USER_TEMPLATE)
    assert "answer-v1" in prompts.available()


def test_braces_in_questions_and_passages_are_text_not_placeholders() -> None:
    prompt = build_prompt(
        "What is {question}?", [("a", "set {passages} here")], "", "{question}|{passages}"
    )
    assert prompt == "What is {question}?|[1] set {passages} here"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('id = "t-x"\nsystem = "s"\nuser = "{passages}"', "lacks question"),
        (
            'id = "t-x"\nsystem = "s"\nuser = "{passages} {question} {secret}"',
            "unknown placeholder",
        ),
        ('id = "other"\nsystem = "s"\nuser = "{passages} {question}"', "must be 't-x'"),
        ('id = "t-x"\nsystem = ""\nuser = "{passages} {question}"', "non-empty 'system'"),
        ("id = ", "not valid TOML"),
    ],
)
def test_a_broken_template_is_refused_with_the_reason(
    body: str, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "t-x.toml").write_text(body)
    monkeypatch.setattr(prompts, "FOLDER", tmp_path)
    prompts.load.cache_clear()
    try:
        with pytest.raises(ValueError, match=message):
            prompts.load("t-x")
    finally:
        prompts.load.cache_clear()


def test_an_unknown_template_fails_the_settings() -> None:
    with pytest.raises(ValueError, match="no prompt template 'answer-v9'"):
        Settings(answer_prompt="answer-v9")
    with pytest.raises(ValueError, match="answer_prompt"):
        Settings(answer_prompt="../etc/passwd")
