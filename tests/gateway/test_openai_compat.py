"""The OpenAI request and response mapping, without services."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from gateway import openai_compat
from ragkit.settings import Settings
from schemas.answer import Sampling
from schemas.gateway import ChatCompletionBody


def body(*messages: tuple[str, str], **fields: object) -> ChatCompletionBody:
    return ChatCompletionBody.model_validate(
        {
            "model": "durable-rag",
            "messages": [{"role": r, "content": c} for r, c in messages],
            **fields,
        }
    )


def test_the_last_user_message_is_the_question_and_earlier_turns_are_history() -> None:
    request, history = openai_compat.to_ask(
        body(
            ("system", "You are a pirate."),
            ("user", "What is UTF-8?"),
            ("assistant", "An encoding [1]."),
            ("user", "  Who designed it?  "),
            max_tokens=40,
        ),
        "acme",
        None,
        history_tokens=600,
    )
    assert request.tenant == "acme" and request.question == "Who designed it?"
    assert request.max_answer_tokens == 40
    assert history is not None
    # The caller's system prompt is not passed on: grounding is the service's.
    assert [(t.role, t.content) for t in history.turns] == [
        ("user", "What is UTF-8?"),
        ("assistant", "An encoding [1]."),
    ]


def test_history_keeps_the_newest_turns_within_the_budget() -> None:
    old = "x " * 3_000
    _, history = openai_compat.to_ask(
        body(("user", old), ("assistant", "short"), ("user", "q")), "t", None, history_tokens=50
    )
    assert history is not None and [t.content for t in history.turns] == ["short"]


@pytest.mark.parametrize(
    ("messages", "word"),
    [
        ((("user", "q"), ("assistant", "a")), "last message"),
        ((("user", "   "),), "empty"),
    ],
)
def test_requests_without_a_question_are_rejected(
    messages: tuple[tuple[str, str], ...], word: str
) -> None:
    with pytest.raises(ValueError, match=word):
        openai_compat.to_ask(body(*messages), "t", None, 600)


def test_unknown_fields_and_several_choices_are_rejected() -> None:
    with pytest.raises(ValidationError):
        body(("user", "q"), n=2)
    with pytest.raises(ValidationError):
        body(("user", "q"), functions=[])
    with pytest.raises(ValidationError):
        body(("tool", "q"))


def test_models_resolve_to_served_ones() -> None:
    settings = Settings(llm_served_name="small", llm_fallback_model="big")
    assert openai_compat.resolve_model("durable-rag", settings) is None
    assert openai_compat.resolve_model("big", settings) == "big"
    with pytest.raises(LookupError, match="available: durable-rag, small, big"):
        openai_compat.resolve_model("gpt-4o", settings)
    listed = [m["id"] for m in openai_compat.model_list(settings)["data"]]
    assert listed == ["durable-rag", "small", "big"]


@pytest.mark.parametrize(
    ("sent", "final", "diverged", "rest"),
    [
        (" Ken Thompson [1].\n", "Ken Thompson [1].", False, ""),
        (" Ken", "Ken Thompson [1].", False, " Thompson [1]."),
        ("", "cached answer", False, "cached answer"),
        ("Half an ans", "Another answer", True, "\n\nAnother answer"),
    ],
)
def test_the_stream_ends_with_the_answer_of_record(
    sent: str, final: str, diverged: bool, rest: str
) -> None:
    assert openai_compat.remainder(sent, final, diverged) == rest


def test_error_chunks_have_openais_shape() -> None:
    assert json.loads(openai_compat.error(504, "slow"))["error"] == {
        "message": "slow",
        "type": "api_error",
        "code": 504,
    }
    assert json.loads(openai_compat.error(422, "bad"))["error"]["code"] == 400


def test_sampling_fields_reach_the_request_and_greedy_is_the_default() -> None:
    plain, _ = openai_compat.to_ask(body(("user", "q")), "t", None, 600)
    assert plain.sampling == Sampling() and plain.sampling.is_default
    assert plain.sampling.temperature == 0.0
    given, _ = openai_compat.to_ask(
        body(
            ("user", "q"),
            stop="\n\n",
            seed=7,
            temperature=0.7,
            top_p=0.9,
            presence_penalty=0.5,
            frequency_penalty=-0.5,
            logit_bias={"42": -100},
        ),
        "t",
        None,
        600,
    )
    assert given.sampling == Sampling(
        stop=["\n\n"],
        seed=7,
        temperature=0.7,
        top_p=0.9,
        presence_penalty=0.5,
        frequency_penalty=-0.5,
        logit_bias={42: -100.0},
    )
    assert not given.sampling.is_default
    several, _ = openai_compat.to_ask(body(("user", "q"), stop=["a", "b"]), "t", None, 600)
    assert several.sampling.stop == ["a", "b"]
    # One string is one stop sequence: the four-item cap is the list's, not a length.
    word, _ = openai_compat.to_ask(body(("user", "q"), stop="lighthouse"), "t", None, 600)
    assert word.sampling.stop == ["lighthouse"]


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"logprobs": True}, ["logprobs: not supported here", "accepted: model, messages"]),
        ({"tools": []}, ["tools: not supported here"]),
        ({"response_format": {"type": "json_object"}}, ["'json_object' is not supported"]),
        ({"stop": ["a", "b", "c", "d", "e"]}, ["stop"]),
        ({"stop": ""}, ["stop"]),
        ({"logit_bias": {"1": 101}}, ["logit_bias.1"]),
        ({"presence_penalty": 3}, ["presence_penalty"]),
    ],
)
def test_fields_not_honoured_are_refused_by_name(
    fields: dict[str, object], words: list[str]
) -> None:
    with pytest.raises(ValidationError) as caught:
        body(("user", "q"), **fields)
    message = openai_compat.invalid_message(list(caught.value.errors()))  # type: ignore[arg-type]
    for word in words:
        assert word in message, message
