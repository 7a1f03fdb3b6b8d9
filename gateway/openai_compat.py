"""OpenAI's chat completions shape over the answer flow, so existing OpenAI clients work.

The last message is the question; earlier user and assistant messages are the conversation so
far (newest kept first, within the history budget). System and developer messages are not
passed on: the grounding prompt is the service's. The sampling fields vLLM's OpenAI server
accepts (temperature, top_p, seed, stop, presence and frequency penalties, logit_bias) reach the
engine; without them the answer is greedy. Every other field, and a `response_format` other than
text, is refused with a 400 naming it, as OpenAI's own API does. The answer's citations ride
along as an extra `citations` field.
"""

from __future__ import annotations

import json
import time
from typing import Any

from ragkit.retrieval import estimate_tokens
from ragkit.settings import Settings
from schemas.answer import Answer, AskRequest, ChatMessage, ConversationWindow, Sampling
from schemas.gateway import ChatCompletionBody

PATHS = ("/v1/chat/completions", "/v1/models")
# The name that means "whatever this deployment answers with".
SERVICE_MODEL = "durable-rag"
DEFAULT_MAX_TOKENS = 256


def served_models(settings: Settings) -> list[str]:
    return [m for m in (SERVICE_MODEL, settings.llm.name, settings.llm.fallback_model) if m]


def resolve_model(requested: str, settings: Settings) -> str | None:
    """The served model to prefer, None for the service's choice. LookupError: not served."""
    if requested == SERVICE_MODEL:
        return None
    if requested in served_models(settings):
        return requested
    raise LookupError(
        f"model {requested!r} is not served here; available: " + ", ".join(served_models(settings))
    )


def model_list(settings: Settings) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [
            {"id": m, "object": "model", "created": 0, "owned_by": "durable-rag"}
            for m in served_models(settings)
        ],
    }


def to_ask(
    body: ChatCompletionBody, tenant: str, model: str | None, history_tokens: int
) -> tuple[AskRequest, ConversationWindow | None]:
    """ValueError (a 422) for a request that has no question to answer."""
    last = body.messages[-1]
    if last.role != "user":
        raise ValueError(f"the last message must be the user's question, not {last.role!r}")
    question = last.text.strip()
    if not question:
        raise ValueError("the last user message is empty")
    earlier = [
        ChatMessage(role=m.role, content=m.text)
        for m in body.messages[:-1]
        if m.role in ("user", "assistant") and m.text.strip()
    ]
    kept: list[ChatMessage] = []
    left = history_tokens
    for message in reversed(earlier):
        left -= estimate_tokens(message.content)
        if left < 0:
            break
        kept.insert(0, message)
    request = AskRequest(
        tenant=tenant,
        question=question,
        max_answer_tokens=body.max_completion_tokens or body.max_tokens or DEFAULT_MAX_TOKENS,
        model=model,
        sampling=sampling(body),
    )
    return request, ConversationWindow(turns=kept) if kept else None


def sampling(body: ChatCompletionBody) -> Sampling:
    """The request's sampling fields; those it leaves out keep the greedy default."""
    given: dict[str, Any] = {
        "temperature": body.temperature,
        "top_p": body.top_p,
        "seed": body.seed,
        "stop": [body.stop] if isinstance(body.stop, str) else body.stop,
        "presence_penalty": body.presence_penalty,
        "frequency_penalty": body.frequency_penalty,
        "logit_bias": body.logit_bias,
    }
    return Sampling(**{k: v for k, v in given.items() if v is not None})


def invalid_message(errors: list[dict[str, Any]]) -> str:
    """A 400's message: each refused field by name, an unknown one with what is accepted."""
    parts = []
    for e in errors:
        loc = list(e["loc"])
        loc = loc[1:] if loc[:1] == ["body"] else loc  # FastAPI's, before the field's own
        where = ".".join(str(part) for part in loc) or "body"
        if e["type"] == "extra_forbidden" and len(loc) == 1:
            accepted = ", ".join(ChatCompletionBody.model_fields)
            parts.append(f"{where}: not supported here (accepted: {accepted})")
        else:
            parts.append(f"{where}: {e['msg']}")
    return "; ".join(parts)


def _usage(answer: Answer) -> dict[str, int]:
    return {
        "prompt_tokens": answer.tokens.prompt,
        "completion_tokens": answer.tokens.completion,
        "total_tokens": answer.tokens.prompt + answer.tokens.completion,
    }


def _extras(answer: Answer) -> dict[str, Any]:
    return {
        "citations": [c.model_dump(mode="json") for c in answer.citations],
        "trace_id": answer.trace_id,
        "route": answer.route,
        "degradations": answer.degradations,
    }


def completion(answer: Answer, requested_model: str) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{answer.trace_id}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": answer.model or requested_model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": answer.answer},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": _usage(answer),
        **_extras(answer),
    }


class Chunker:
    """`chat.completion.chunk` events for one streamed answer."""

    def __init__(self, trace_id: str, model: str) -> None:
        self.id = f"chatcmpl-{trace_id}"
        self.model = model
        self.created = int(time.time())
        self.sent = ""
        self.diverged = False

    def _chunk(self, delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
        return json.dumps(
            {
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                **extra,
            }
        )

    def first(self) -> str:
        return self._chunk({"role": "assistant", "content": ""})

    def text(self, text: str) -> str:
        self.sent += text
        return self._chunk({"content": text})

    def reset(self) -> None:
        # Sent text cannot be taken back in this protocol; the final chunk makes up the gap.
        self.diverged = True

    def finish(self, answer: Answer, include_usage: bool) -> list[str]:
        out: list[str] = []
        rest = remainder(self.sent, answer.answer, self.diverged)
        if rest:
            out.append(self.text(rest))
        out.append(self._chunk({}, "stop", **_extras(answer)))
        if include_usage:
            out.append(
                json.dumps(
                    {
                        "id": self.id,
                        "object": "chat.completion.chunk",
                        "created": self.created,
                        "model": self.model,
                        "choices": [],
                        "usage": _usage(answer),
                    }
                )
            )
        return out


def remainder(sent: str, final: str, diverged: bool = False) -> str:
    """What to send after `sent` so the client ends with `final` (the answer of record, which is
    stripped). When the sent text is not a prefix (a retried generation, a cached answer),
    the answer follows in full after a blank line."""
    head = sent.lstrip()
    if not diverged and final.startswith(head):
        return final[len(head) :]
    if not diverged and head.strip() == final:
        return ""
    if not sent:
        return final
    return "\n\n" + final


def status_for(status: int) -> int:
    """OpenAI's API calls every invalid request 400, where the rest of the gateway says 422."""
    return 400 if status == 422 else status


def error(status: int, message: str) -> str:
    status = status_for(status)
    kind = "invalid_request_error" if 400 <= status < 500 else "api_error"
    return json.dumps({"error": {"message": message, "type": kind, "code": status}})
