"""The model router's rules (R27): each class of question goes to the expected model."""

from __future__ import annotations

import pytest

from ragkit.routing import choose_model
from ragkit.settings import Settings
from schemas.answer import RoutingPlan

PLAN = RoutingPlan(small_model="small", large_model="large", max_simple_words=12)


@pytest.mark.parametrize(
    ("question", "similarity", "model", "rule"),
    [
        ("Who designed UTF-8?", 0.62, "small", "simple"),
        ("When was the Gettysburg Address delivered?", 0.55, "small", "simple"),
        ("Who designed UTF-8?", None, "small", "simple"),  # keyword-only: no confidence rule
        ("Why did UTF-8 replace UCS-2 in most protocols?", 0.7, "large", "hard_question"),
        ("Compare TCP and UDP.", 0.7, "large", "hard_question"),
        ("How does a lighthouse lens focus light?", 0.7, "large", "hard_question"),
        ("What is the difference between a virus and a worm?", 0.7, "large", "hard_question"),
        ("Explain   the Great Fire of London", 0.7, "large", "hard_question"),
        (
            "I was reading about the history of text encodings last night and wondered who "
            "actually designed UTF-8 in the end?",
            0.9,
            "large",
            "long_question",
        ),
        ("Who won the 1987 curling final?", 0.12, "large", "low_confidence"),
    ],
)
def test_each_class_of_question_goes_to_its_model(
    question: str, similarity: float | None, model: str, rule: str
) -> None:
    choice = choose_model(question, similarity, PLAN)
    assert (choice.model, choice.rule) == (model, rule), choice.reason
    assert choice.reason


def test_cues_match_whole_words_only() -> None:
    # "whyte" and "explained-ish" names are not cues; "vs" inside a word is not either.
    assert choose_model("Who is Whyte?", 0.8, PLAN).rule == "simple"
    assert choose_model("What is canvs?", 0.8, PLAN).rule == "simple"
    assert choose_model("Python vs Ruby?", 0.8, PLAN).rule == "hard_question"


def test_the_rules_are_tunable_in_settings() -> None:
    plan = RoutingPlan(
        small_model="s", large_model="l", max_simple_words=3, hard_words=["how"], min_confidence=0.9
    )
    assert choose_model("Who designed it first?", 0.95, plan).rule == "long_question"
    assert choose_model("How so?", 0.95, plan).rule == "hard_question"
    assert choose_model("Who?", 0.5, plan).rule == "low_confidence"
    with pytest.raises(ValueError, match="both"):
        Settings(router_small_model="small")
    with pytest.raises(ValueError, match="min_confidence"):
        Settings(router_small_model="s", router_large_model="l", router_min_confidence=2)
