"""Fuzz: malformed bodies to every endpoint that takes one get a 4xx, never a 5xx, and start
no workflow. Bodies that happen to be valid are skipped (they would start real answers)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from temporalio.client import Client

from durable_rag.client import RagClient
from gateway.app import create_app
from schemas.gateway import AskBody, ChatCompletionBody, DocumentBody, MessageBody
from tests.conftest import make_settings

pytestmark = pytest.mark.integration

QUEUE = f"fuzz-{uuid.uuid4().hex[:8]}"
FIELDS = ["question", "message", "message_id", "top_k", "max_answer_tokens", "model",
          "document_ids", "tenant", "messages", "stream", "max_tokens", "n", "name",
          "text"]  # fmt: skip
ENDPOINTS: list[tuple[str, type[Any]]] = [
    ("/v1/ask", AskBody),
    ("/v1/ask/stream", AskBody),
    ("/v1/conversations/fuzz-1/messages", MessageBody),
    ("/v1/conversations/fuzz-1/messages/stream", MessageBody),
    ("/v1/chat/completions", ChatCompletionBody),
    ("/v1/documents", DocumentBody),
]

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30)
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
bodies = st.one_of(
    values,
    st.dictionaries(st.sampled_from(FIELDS), values, max_size=4),
)


def is_valid(model: type[Any], body: object) -> bool:
    try:
        model.model_validate(body)
    except ValidationError:
        return False
    return True


_apps: dict[int, Any] = {}


async def post(client: Client, path: str, content: bytes) -> int:
    if id(client) not in _apps:  # one app for the module, as one gateway process serves all
        app_settings = make_settings(workflow_task_queue=QUEUE, gateway_auth=False)
        _apps[id(client)] = create_app(app_settings, RagClient(client, app_settings))
    app = _apps[id(client)]
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://gateway"
    ) as http:
        response = await http.post(
            path, content=content, headers={"content-type": "application/json"}
        )
    return response.status_code


@pytest.fixture(scope="module")
def loop_and_client(temporal_server: Any) -> Any:
    loop = asyncio.new_event_loop()
    from ragkit.temporal import connect

    client = loop.run_until_complete(
        connect(make_settings(temporal_address=temporal_server.address))
    )
    yield loop, client
    loop.close()


@pytest.mark.parametrize(("path", "model"), ENDPOINTS)
def test_malformed_bodies_get_4xx(loop_and_client: Any, path: str, model: type[Any]) -> None:
    loop, client = loop_and_client

    @settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
    @given(body=bodies)
    def check_json(body: object) -> None:
        assume(not is_valid(model, body))
        status = loop.run_until_complete(post(client, path, json.dumps(body).encode()))
        assert 400 <= status < 500, (body, status)

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(raw=st.binary(max_size=200))
    def check_bytes(raw: bytes) -> None:
        with contextlib.suppress(ValueError, UnicodeDecodeError):
            assume(not is_valid(model, json.loads(raw)))
        status = loop.run_until_complete(post(client, path, raw))
        assert 400 <= status < 500, (raw, status)

    check_json()
    check_bytes()


def test_no_fuzzed_request_started_a_workflow(loop_and_client: Any) -> None:
    loop, client = loop_and_client
    count = loop.run_until_complete(client.count_workflows(f"TaskQueue = '{QUEUE}'"))
    assert count.count == 0
