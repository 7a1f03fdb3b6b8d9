"""Uploads through the gateway, every format: a file we read is accepted and ingested; a format
we do not read is refused with 415 and what to convert it to, before anything is stored or
started (no engine: documents need none)."""

from __future__ import annotations

import httpx
import pytest
from temporalio.client import Client

from gateway.app import create_app
from ragkit.embedding import Embedder
from ragkit.store import keys
from tests.conftest import Database, running_stack
from tests.gateway.test_app import bearer
from tests.gateway.test_streaming import closed_status
from tests.ragkit.parsing.samples import deck, docx_file, paragraph, workbook

pytestmark = pytest.mark.integration


async def test_every_format_is_uploaded_and_a_format_we_do_not_read_is_refused(
    client: Client, database: Database, embedder: Embedder, tmp_path_factory: pytest.TempPathFactory
) -> None:
    _, key = keys.create_key(database.sessions, "uploads")
    async with running_stack(
        client, database, embedder, tmp_path_factory.mktemp("uploads")
    ) as stack:
        rag = await stack.rag()
        app = create_app(rag.settings, rag)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://gateway", timeout=60
        ) as http:
            uploads = {
                "minutes.docx": docx_file(paragraph("The ferret budget was approved in May.")),
                "pitch.pptx": deck([{"title": "Pitch", "bullets": ["Otters like our app."]}]),
                "ledger.xlsx": workbook({"Costs": [["Item", "Cost"], ["Kayak", 900]]}),
            }
            for name, data in uploads.items():
                sent = await http.post(
                    "/v1/documents/upload", files={"file": (name, data)}, headers=bearer(key)
                )
                assert sent.status_code == 202, sent.text
                assert await closed_status(client, sent.json()["workflow_id"], 60) == "COMPLETED"
            as_text = await http.post(
                "/v1/documents",
                json={"name": "towns.csv", "text": "town,river\nLyon,Rhone\n"},
                headers=bearer(key),
            )
            assert as_text.status_code == 202, as_text.text
            assert await closed_status(client, as_text.json()["workflow_id"], 60) == "COMPLETED"

            stored = database.scalar("SELECT count(*) FROM uploads WHERE tenant = 'uploads'")
            for request, says in [
                ({"files": {"file": ("memo.doc", b"\xd0\xcf\x11\xe0")}}, "convert to .docx"),
                ({"files": {"file": ("photo.png", b"\x89PNG")}}, "unsupported file type '.png'"),
                (
                    {"json": {"name": "pitch.pptx", "text": "x"}},
                    "send the file to POST /v1/documents/upload",
                ),
                ({"json": {"name": "evil.exe", "text": "x"}}, "unsupported file type '.exe'"),
            ]:
                path = "/v1/documents/upload" if "files" in request else "/v1/documents"
                refused = await http.post(path, headers=bearer(key), **request)  # type: ignore[arg-type]
                assert refused.status_code == 415, refused.text
                assert says in refused.text
            after = database.scalar("SELECT count(*) FROM uploads WHERE tenant = 'uploads'")
            assert after == stored, "a refused upload was stored"

        for question, name, location in [
            ("When was the ferret budget approved?", "minutes.docx", ""),
            ("What do otters like?", "pitch.pptx", "slide 1"),
            ("How much does the kayak cost?", "ledger.xlsx", "rows 1-2"),
            ("Which river runs through Lyon?", "towns.csv", "rows 1-2"),
        ]:
            found = await rag.search(question, tenant="uploads", top_k=1)
            assert (found.passages[0].source, found.passages[0].location) == (
                f"upload:{name}",
                location,
            )
