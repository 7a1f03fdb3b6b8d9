"""Requests are validated before anything starts: what the client, the gateway and the
conversation accept, checked on the contracts themselves."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from durable_rag.client import RagClient
from ragkit.settings import Settings
from schemas.answer import AskRequest
from schemas.conversation import ChatRequest


def test_requests_are_validated_before_anything_starts() -> None:
    with pytest.raises(ValueError):
        AskRequest(question="")
    with pytest.raises(ValueError):
        AskRequest(question="x", top_k=0)
    with pytest.raises(ValueError):
        AskRequest(question="x", model="Not A Valid Name!")
    rag = RagClient(None, Settings(llm_max_answer_tokens=100))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="over the limit"):
        rag.answer_plan(max_answer_tokens=200, top_k=5)


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"conversation_id": "has spaces"}, "conversation_id"),
        ({"conversation_id": ""}, "conversation_id"),
        ({"message": ""}, "message"),
        ({"message": "x" * 8_001}, "message"),
        ({"message_id": "bad id"}, "message_id"),
    ],
)
def test_bad_messages_are_refused_before_anything_starts(
    fields: dict[str, str], where: str
) -> None:
    values = {"conversation_id": "ok", "message": "hello"} | fields
    with pytest.raises(ValidationError) as info:
        ChatRequest(**values)  # type: ignore[arg-type]
    assert info.value.errors()[0]["loc"][0] == where


def test_an_uploads_metadata_must_be_an_object_of_strings() -> None:
    """The multipart form's `metadata` is JSON; what is not an object of strings is a 422 at the
    gateway, before anything is stored (checked on the body model the router validates with)."""
    from schemas.gateway import DocumentBody

    for bad in ([1], {"k": 1}, {"": "v"}, {f"k{i}": "v" for i in range(40)}):
        with pytest.raises(ValueError):
            DocumentBody.model_validate({"name": "a.md", "text": "-", "metadata": bad})
    assert DocumentBody.model_validate(
        {"name": "a.md", "text": "-", "metadata": {"team": "red"}}
    ).metadata == {"team": "red"}
