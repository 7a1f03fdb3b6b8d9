"""A scripted engine behind `LLMEngine`, for tests whose point is not the engine.

It runs inside the real `InferenceActivities` on a real LLM worker: the workflow, the activity,
its heartbeats, streaming over Postgres NOTIFY and cancellation are all real; only the tokens are
scripted. It counts tokens with the packaged SmolLM2's own tokenizer and chat template, so prompt
budgets and token counts are those the real engine reports, and it raises the same errors for a
prompt that is too long or sampling the model cannot honour. `tests/ragkit/test_engine_contract.py`
holds it to `VllmEngine` with the same assertions.

What it replies is a function of the messages (`Script`). The default answers from the prompt's
first passage and cites it, which is what the workflow tests of citations, fallbacks and routing
need; a test that cares about the words passes its own script.
"""

from __future__ import annotations

import asyncio
import functools
import re
import time
from collections.abc import Callable
from typing import Any

from ragkit.llm.engine import (
    GREEDY,
    Generation,
    Messages,
    check_fits,
    check_logit_bias,
    count_tokens,
    render_chat,
)
from ragkit.llm.models import PACKAGED_SMOLLM2, resolve_generator
from ragkit.retrieval import REWRITE_PROMPT, SUMMARY_PROMPT
from ragkit.settings import Settings
from schemas.answer import Sampling

Script = Callable[[Messages], str]

_PASSAGE = re.compile(r"^\[(\d{1,3})\] (.+)$", re.M)
_QUESTION = re.compile(r"^Question: (.+)$", re.M)


def default_script(messages: Messages) -> str:
    """A plausible reply for each kind of prompt the flows send."""
    system = messages[0]["content"] if messages and messages[0]["role"] == "system" else ""
    last = messages[-1]["content"] if messages else ""
    if system.startswith(REWRITE_PROMPT[:40]):
        return last.strip().splitlines()[-1] if last.strip() else "query"
    if system.startswith(SUMMARY_PROMPT[:40]):
        # A faithful summarizer: what was summarized first stays first (the first fact is kept).
        merged = last.partition("Summary so far:")[2].rpartition("Updated summary:")[0]
        merged = merged.replace("(none)", " ").replace("New turns:", " ")
        return " ".join(merged.split()[:60]) or "Nothing yet."
    passage = _PASSAGE.search(last)
    if passage is None:
        return "I don't know."
    sentence = re.split(r"(?<=[.!?])\s", passage.group(2).strip(), maxsplit=1)[0]
    return f"{' '.join(sentence.split()[:40])} [{passage.group(1)}]"


@functools.cache
def smollm2_tokenizer() -> Any:
    from transformers import AutoTokenizer

    settings = Settings()
    return AutoTokenizer.from_pretrained(
        resolve_generator(PACKAGED_SMOLLM2, settings.data_dir.resolve())
    )


class ScriptedEngine:
    """`LLMEngine` with scripted text, streamed token by token at `seconds_per_token`."""

    def __init__(
        self,
        script: Script = default_script,
        *,
        model_name: str | None = None,
        max_model_len: int | None = None,
        seconds_per_token: float = 0.01,
    ) -> None:
        settings = Settings()
        self.model_name = model_name or settings.llm.name
        self.max_model_len = max_model_len or settings.llm.max_model_len
        self.script = script
        self.seconds_per_token = seconds_per_token
        self._tokenizer = smollm2_tokenizer()
        self._running: set[str] = set()
        self.requests: list[str] = []  # every request id, in the order they came
        self.aborted: list[str] = []  # those cancelled before they finished

    def count_prompt_tokens(self, messages: Messages) -> int:
        return count_tokens(self._tokenizer, render_chat(self._tokenizer, messages))

    async def generate(
        self,
        messages: Messages,
        max_tokens: int,
        request_id: str,
        on_tokens: Callable[[int, str], None] | None = None,
        sampling: Sampling = GREEDY,
    ) -> Generation:
        prompt_tokens = self.count_prompt_tokens(messages)
        check_fits(prompt_tokens, max_tokens, self.max_model_len)
        check_logit_bias(sampling, len(self._tokenizer))
        text = self.script(messages)
        for stop in sampling.stop:
            if stop and stop in text:
                text = text[: text.index(stop)]
        tokens = self._tokenizer.encode(text, add_special_tokens=False)
        finish = "length" if len(tokens) > max_tokens else "stop"
        tokens = tokens[:max_tokens]
        started = time.perf_counter()
        first = 0.0
        self.requests.append(request_id)
        self._running.add(request_id)
        try:
            for n in range(1, len(tokens) + 1):
                await asyncio.sleep(self.seconds_per_token)
                if n == 1:
                    first = time.perf_counter() - started
                if on_tokens is not None:
                    on_tokens(n, self._tokenizer.decode(tokens[:n]))
        except asyncio.CancelledError:
            self.aborted.append(request_id)
            raise
        finally:
            self._running.discard(request_id)
        return Generation(
            text=self._tokenizer.decode(tokens),
            prompt_tokens=prompt_tokens,
            completion_tokens=len(tokens),
            finish_reason=finish,
            model=self.model_name,
            seconds=time.perf_counter() - started,
            first_token_seconds=first,
        )

    def running_requests(self) -> int:
        return len(self._running)

    def close(self) -> None:
        self._running.clear()
