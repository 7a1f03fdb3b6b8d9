"""Encrypted payloads against the real stack: with payload encryption on, a history fetched
straight from the Temporal server holds no question, passage or answer text; the gateway's codec
endpoint (admin key only) decodes it for operators; and after a key rotation an old run still
reads."""

from __future__ import annotations

import base64
import json
import os
import uuid
from pathlib import Path

import pytest
from google.protobuf import json_format
from temporalio.api.common.v1 import Payloads
from temporalio.client import Client

from ragkit.codec import ENCODING, payloads_in, ui_token
from ragkit.embedding import Embedder
from ragkit.llm.engine import LLMEngine
from ragkit.store import keys
from ragkit.temporal import data_converter
from schemas.answer import Answer
from tests.conftest import Database, make_settings
from tests.gateway.test_app import bearer, gateway
from tests.workflows.test_answer import ingest_sample

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ADMIN = f"admin-{uuid.uuid4().hex}"
PASSAGE = b"placemat in a New Jersey diner"  # in the chunk that answers the question


def key_entry(name: str) -> str:
    return f"{name}:{base64.b64encode(os.urandom(32)).decode()}"


def sealed_client(client: Client, **security: object) -> Client:
    """The session's connection, with the payload codec these settings make."""
    config = client.config()
    config["data_converter"] = data_converter(make_settings(**security))
    return Client(**config)


@pytest.fixture(scope="module")
async def codec_data(
    client: Client,
    module_database: Database,
    embedder: Embedder,
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    return await ingest_sample(client, module_database, embedder, tmp_path_factory)


async def test_histories_hold_only_ciphertext_and_operators_decode_them_with_the_admin_key(
    client: Client,
    module_database: Database,
    embedder: Embedder,
    llm_engine: LLMEngine,
    codec_data: Path,
) -> None:
    k1, k2 = key_entry("k1"), key_entry("k2")
    security = {
        "security_payload_encryption": True,
        "security_payload_keys": k1,
        "security_admin_key": ADMIN,
    }
    marker = f"zebracorn-{uuid.uuid4().hex[:8]}"
    question = f"Who designed the UTF-8 encoding? ({marker})"
    _, key = keys.create_key(module_database.sessions, "t")
    sealed = sealed_client(client, **security)
    async with gateway(sealed, module_database, embedder, llm_engine, codec_data, **security) as (
        http,
        _,
    ):
        asked = await http.post(
            "/v1/ask",
            json={"question": question, "max_answer_tokens": 16, "top_k": 3},
            headers=bearer(key),
        )
        assert asked.status_code == 200, asked.text
        answer = asked.json()
        # The passage was retrieved and put in the prompt (whether the tiny model cites it or
        # not): its text is in the run's hydrate result.
        assert any(c["source"].endswith("unicode-and-utf-8.md") for c in answer["context"])

        # Straight from the server, without the codec: no plaintext anywhere in the history.
        history = await client.get_workflow_handle(answer["trace_id"]).fetch_history()
        blob = b"".join(event.SerializeToString() for event in history.events)
        assert b"AnswerWorkflow" in blob, "the search below does see the history's bytes"
        secrets = [marker.encode(), PASSAGE]
        if len(answer["answer"].strip()) >= 12:  # a shorter one could occur in ciphertext
            secrets.append(answer["answer"].strip().encode())
        for secret in secrets:
            assert secret not in blob, secret
        sealed_payloads = [p for event in history.events for p in payloads_in(event) if p.metadata]
        user = [p for p in sealed_payloads if p.metadata.get("encoding") != b"json/plain"]
        assert user and all(p.metadata["encoding"] == ENCODING for p in user), {
            p.metadata.get("encoding") for p in user
        }

        # The codec endpoint decodes them, for the admin key only.
        body = json_format.MessageToJson(Payloads(payloads=sealed_payloads))
        assert (await http.post("/codec/decode", content=body)).status_code == 401
        wrong = await http.post("/codec/decode", content=body, headers=bearer(key))
        assert wrong.status_code == 401
        decoded = await http.post("/codec/decode", content=body, headers=bearer(ADMIN))
        assert decoded.status_code == 200, decoded.text
        plaintext = b"".join(
            base64.b64decode(p.get("data", "")) for p in decoded.json()["payloads"]
        )
        assert marker.encode() in plaintext and PASSAGE in plaintext
        # The UI's form: no header, the token derived from the admin key as the path.
        via_ui = await http.post(f"/codec/{ui_token(ADMIN)}/decode", content=body)
        assert via_ui.status_code == 200 and via_ui.json() == decoded.json()
        assert (await http.post(f"/codec/{'0' * 64}/decode", content=body)).status_code == 401
        preflight = await http.options(
            "/codec/decode",
            headers={
                "Origin": "http://127.0.0.1:8233",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "content-type,x-namespace",
            },
        )
        assert preflight.headers.get("access-control-allow-origin") == "http://127.0.0.1:8233"
        tampered = json.loads(body)
        tampered["payloads"][0]["data"] = base64.b64encode(b"\0" * 40).decode()
        refused = await http.post(
            "/codec/decode", content=json.dumps(tampered), headers=bearer(ADMIN)
        )
        assert refused.status_code == 400, refused.text

    # A rotation: k2 seals from now on, and the run sealed with k1 still reads.
    rotated = sealed_client(client, **{**security, "security_payload_keys": f"{k1},{k2}"})
    again = await rotated.get_workflow_handle(answer["trace_id"], result_type=Answer).result()
    assert again.answer == answer["answer"] and marker in again.question
    only_new = sealed_client(client, **{**security, "security_payload_keys": k2})
    with pytest.raises(Exception, match="k1"):
        await only_new.get_workflow_handle(answer["trace_id"], result_type=Answer).result()
