"""Contracts between builds ignore a field they do not know; what callers send does not
(schemas/common.py)."""

from __future__ import annotations

import inspect

import pytest
from pydantic import ValidationError

import schemas.gateway as gateway
from schemas.answer import AskRequest
from schemas.common import Body, Contract, DocumentFilter
from schemas.evaluation import EvalCase


def test_a_contract_ignores_a_field_a_newer_build_added() -> None:
    ask = AskRequest.model_validate(
        {"tenant": "t", "question": "Why?", "added_by_a_newer_build": True}
    )
    assert ask.question == "Why?" and not hasattr(ask, "added_by_a_newer_build")


def test_what_callers_send_refuses_an_unknown_field() -> None:
    bodies = [
        c for _, c in inspect.getmembers(gateway, inspect.isclass) if c.__name__.endswith("Body")
    ]
    assert {c.__name__ for c in bodies} >= {"AskBody", "MessageBody", "ChatCompletionBody"}
    assert all(issubclass(c, Body) for c in bodies), bodies
    # Nested in the bodies, and eval set files: a misspelt key is an error, not a default.
    for body in (DocumentFilter, EvalCase):
        assert issubclass(body, Body)
    with pytest.raises(ValidationError, match="created_afterr"):
        DocumentFilter.model_validate({"created_afterr": "2026-01-01T00:00:00Z"})
    with pytest.raises(ValidationError, match="questoin"):
        gateway.AskBody.model_validate({"question": "Why?", "questoin": "typo"})
    assert not issubclass(gateway.Readiness, Body) and issubclass(gateway.Readiness, Contract)
