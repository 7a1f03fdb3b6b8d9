"""What the `openai` engine backend sends for a request's sampling fields (no server needed; the
server-backed tests are tests/ragkit/test_openai_engine.py)."""

from __future__ import annotations

from ragkit.llm.engine import openai_sampling
from schemas.answer import Sampling


def test_only_the_sampling_fields_set_are_sent() -> None:
    assert openai_sampling(Sampling()) == {
        "temperature": 0.0,
        "top_p": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
    }
    sent = openai_sampling(Sampling(stop=["\n"], seed=3, logit_bias={7: -100}))
    assert sent["stop"] == ["\n"] and sent["seed"] == 3 and sent["logit_bias"] == {"7": -100.0}
