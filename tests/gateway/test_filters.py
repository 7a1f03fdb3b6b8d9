"""Search and answers narrowed by time range and metadata (issue 18, R20), on the real stack:
the gateway's `/v1/ask` and `/v1/documents`, the client, and the CLI, against Temporal, Postgres,
Qdrant Edge, MiniLM and vLLM. Both retrievers honour the filter (dense alone, keyword alone), and
new metadata makes a new version whose points carry it.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from typer.testing import CliRunner, Result

from cli import app
from durable_rag.client import RagClient
from ragkit.embedding import Embedder
from ragkit.llm.engine import LLMEngine
from ragkit.store import keys
from schemas.common import DocumentFilter
from tests.conftest import Database
from tests.gateway.test_app import bearer, gateway
from tests.workflows.test_ingest import save_history

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TENANT = "filters"


async def sources(rag: RagClient, query: str, **filters: Any) -> set[str]:
    mode = filters.pop("mode", None)
    found = await rag.search(
        query, TENANT, top_k=10, mode=mode, documents=DocumentFilter(**filters)
    )
    return {p.source.rsplit("/", 1)[-1].removeprefix("upload:") for p in found.passages}


async def cli(rag: RagClient, monkeypatch: pytest.MonkeyPatch, *args: str) -> Result:
    """The CLI against this test's stack (its own event loop: a thread of its own)."""
    s = rag.settings
    for name, value in {
        # The test's dev server (the stack's workers share the test's client, not this setting).
        "TEMPORAL_ADDRESS": rag.client.service_client.config.target_host,
        "WORKFLOW_TASK_QUEUE": s.temporal.workflow_task_queue,
        "LIVE_TASK_QUEUE": s.temporal.live_task_queue,
        "INDEX_TASK_QUEUE": s.temporal.index_task_queue,
        "DATABASE_URL": s.postgres.url,
        "DATA_DIR": str(s.data_dir),
    }.items():
        monkeypatch.setenv(f"DURABLE_RAG_{name}", value)
    return await asyncio.to_thread(CliRunner().invoke, app, list(args))


async def test_time_range_and_metadata_narrow_search_and_answers(
    client: Client,
    database: Database,
    embedder: Embedder,
    llm_engine: LLMEngine,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    word = f"zorbex{uuid.uuid4().hex[:6]}"
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "heron.md").write_text(f"# Herons\n\nThe {word} heron wades in shallow rivers.\n")
    _, key = keys.create_key(database.sessions, TENANT)
    async with gateway(client, database, embedder, llm_engine, tmp_path / "data") as (http, rag):
        # The falcon, uploaded through the API with its pairs; then, later, the heron by path.
        posted = await http.post(
            "/v1/documents",
            json={
                "name": "falcon.md",
                "text": f"# Falcons\n\nThe {word} falcon nests on high cliffs.\n",
                "metadata": {"team": "red", "lang": "en"},
            },
            headers=bearer(key),
        )
        assert posted.status_code == 202, posted.text
        await rag.client.get_workflow_handle(posted.json()["workflow_id"]).result()
        between = database.scalar("SELECT now()")  # Postgres' clock stamps the versions
        await asyncio.sleep(0.05)
        ingested = await rag.ingest([str(folder)], TENANT, metadata={"team": "blue"})
        assert not ingested.failures

        both = {"falcon.md", "heron.md"}
        assert await sources(rag, word) == both
        for mode in ("dense", "keyword", "hybrid"):  # each retriever filters on its own
            assert await sources(rag, word, mode=mode, updated_after=between) == {"heron.md"}
            assert await sources(rag, word, mode=mode, updated_before=between) == {"falcon.md"}
            assert await sources(rag, word, mode=mode, metadata={"team": "red"}) == {"falcon.md"}
        assert await sources(rag, word, created_after=between, metadata={"team": "blue"}) == {
            "heron.md"
        }
        assert await sources(rag, word, metadata={"team": "red", "lang": "fr"}) == set()
        assert await sources(rag, word, created_before=between - timedelta(days=1)) == set()

        # /v1/ask: the answer reads only what the filter lets through, and says so in citations.
        asked = await http.post(
            "/v1/ask",
            json={
                "question": f"Where does the {word} bird live?",
                "max_answer_tokens": 8,
                "filter": {"metadata": {"team": "blue"}},
            },
            headers=bearer(key),
        )
        assert asked.status_code == 200, asked.text
        await save_history(client, asked.json()["trace_id"], "answer-bm25-filtered")
        cited = {c["source"].rsplit("/", 1)[-1] for c in asked.json()["citations"]}
        assert cited <= {"heron.md"}, cited
        for bad, says in [
            (
                {
                    "updated_after": "2026-12-02T10:00:00+00:00",
                    "updated_before": "2026-12-01T00:00:00Z",
                },
                "later",
            ),
            ({"created_after": "2026-12-02T10:00:00"}, "timezone"),
            ({"metadata": {"bad key": "x"}}, "metadata"),
            ({"since": "2026-01-01T00:00:00Z"}, "since"),
        ]:
            refused = await http.post(
                "/v1/ask",
                json={"question": "q", "filter": bad},
                headers=bearer(key),
            )
            assert refused.status_code == 422 and says in refused.text, (bad, refused.text)

        # The CLI: the same filters as options, and bad ones exit 2 before anything starts.
        shown = await cli(
            rag, monkeypatch, "search", word, "--tenant", TENANT, "--updated-after",
            between.isoformat(),
        )  # fmt: skip
        assert shown.exit_code == 0, shown.output
        assert "heron.md" in shown.output and "falcon.md" not in shown.output
        shown = await cli(
            rag, monkeypatch, "search", word, "--tenant", TENANT, "--meta", "team=red"
        )
        assert shown.exit_code == 0, shown.output
        assert "falcon.md" in shown.output and "heron.md" not in shown.output
        naive = between.astimezone(UTC).replace(tzinfo=None).isoformat()  # no zone: UTC
        shown = await cli(
            rag, monkeypatch, "search", word, "--tenant", TENANT, "--updated-before", naive
        )
        assert "falcon.md" in shown.output and "heron.md" not in shown.output
        for args, says in [
            (["--updated-after", "yesterday"], "ISO 8601"),
            (["--meta", "team"], "KEY=VALUE"),
            (["--created-after", "2026-12-02", "--created-before", "2026-12-01"], "later"),
        ]:
            refused = await cli(rag, monkeypatch, "search", word, "--tenant", TENANT, *args)
            assert refused.exit_code == 2 and says in refused.output, (args, refused.output)
        shown = await cli(
            rag, monkeypatch, "ask", f"Where does the {word} falcon nest?", "--tenant", TENANT,
            "--meta", "team=red", "--max-tokens", "8",
        )  # fmt: skip
        assert shown.exit_code == 0, shown.output
        assert "falcon.md" in shown.output and "heron.md" not in shown.output

        # New pairs for the same bytes: a new version, whose points carry them.
        again = await http.post(
            "/v1/documents",
            json={
                "name": "falcon.md",
                "text": f"# Falcons\n\nThe {word} falcon nests on high cliffs.\n",
                "metadata": {"team": "green"},
            },
            headers=bearer(key),
        )
        result = await rag.client.get_workflow_handle(again.json()["workflow_id"]).result()
        assert result["totals"]["documents_ingested"] == 1, result
        assert await sources(rag, word, metadata={"team": "red"}) == set()
        assert await sources(rag, word, metadata={"team": "green"}) == {"falcon.md"}
        assert database.rows(
            "SELECT version, metadata FROM documents WHERE tenant = %s AND source LIKE %s",
            TENANT,
            "%falcon.md",
        ) == [(2, {"team": "green"})]
