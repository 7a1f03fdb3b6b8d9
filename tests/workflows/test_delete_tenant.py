"""A tenant deleted whole (DeleteTenantWorkflow): a string planted in its documents, questions and
conversations is, once the deletion returns, found nowhere the project keeps text (no Postgres
text or JSON column, no Temporal history or visibility record, no index point), while another
tenant with the same kinds of data keeps all of it."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from temporalio.client import Client

from durable_rag.client import RagClient
from ragkit import ids
from ragkit.embedding import Embedder
from ragkit.llm.engine import LLMEngine
from ragkit.store import keys
from schemas.answer import AskRequest
from schemas.evaluation import EvalCase
from schemas.ingest import IngestResult
from tests.conftest import Database
from tests.workflows.test_answer import answering
from tests.workflows.test_forget import gone_from_temporal, in_postgres, in_temporal
from tests.workflows.test_ingest import save_history

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TENANT_TABLES = (
    "documents",
    "chunks",
    "uploads",
    "api_keys",
    "conversations",
    "answer_costs",
    "transcripts",
    "answer_cache",
    "eval_reports",
)


def corpus(root: Path, planted: str) -> Path:
    root.mkdir()
    (root / "lighthouse.txt").write_text(
        "The lighthouse keeper\n\n"
        f"The lighthouse keeper on Skerry Island keeps the codeword {planted} in a brass box. "
        "He lights the lamp at dusk and writes the weather in a log every evening.\n"
    )
    (root / "tides.md").write_text(
        "# Tides\n\nTides are the rise and fall of the sea, caused by the Moon's gravity.\n"
    )
    return root


async def use_tenant(rag: RagClient, database: Database, tenant: str, planted: str) -> None:
    """Everything a tenant does that keeps text: a key, an upload, a search, an answer, and a
    conversation of two turns (left open, as a live one would be)."""
    keys.create_key(database.sessions, tenant, "app")
    memo = f"Memo\n\nThe memo says that {planted} is filed in the archive.\n"
    accepted = await rag.ingest_document(tenant, "memo.txt", memo.encode())
    handle = rag.client.get_workflow_handle(accepted.workflow_id, result_type=IngestResult)
    ingested = await handle.result()
    assert ingested.totals.documents_ingested == 1, ingested
    await rag.search(f"codeword {planted}", tenant, top_k=2)
    await rag.ask(
        AskRequest(
            tenant=tenant,
            question=f"What does the keeper keep in a brass box? ({planted})",
            max_answer_tokens=8,
            top_k=2,
        )
    )
    for message in (f"Remember {planted}. Who lights the lamp?", "When?"):
        await rag.chat(f"talk-{planted}", message, tenant, max_answer_tokens=8, top_k=1)
    case = EvalCase(
        id="keeper",
        kind="functional",
        question=f"Where is {planted} kept?",
        relevant=["lighthouse.txt"],
        facts=["brass box"],
    )
    await rag.evaluate(f"tenant-{planted}", [case], tenant, max_answer_tokens=8)


def tenant_rows(database: Database, tenant: str) -> dict[str, int]:
    return {
        table: int(database.scalar(f'SELECT count(*) FROM "{table}" WHERE tenant = %s', tenant))
        for table in TENANT_TABLES
    }


async def test_a_deleted_tenant_is_nowhere_and_the_other_keeps_everything(
    client: Client,
    module_database: Database,
    embedder: Embedder,
    llm_engine: LLMEngine,
    tmp_path: Path,
) -> None:
    since = datetime.now(UTC).replace(microsecond=0)
    suffix = uuid.uuid4().hex[:8]
    # Adversarial names: one is a prefix of the other.
    gone, kept = f"acme-{suffix}", f"acme-{suffix}-corp"
    gone_text, kept_text = f"quokka{suffix}", f"wombat{suffix}"
    data_dir = tmp_path / "data"
    async with answering(client, module_database, embedder, llm_engine, data_dir) as (
        stack,
        rag,
        _,
    ):
        for tenant, planted in ((gone, gone_text), (kept, kept_text)):
            result = await rag.ingest([str(corpus(tmp_path / tenant, planted))], tenant=tenant)
            assert not result.failures
            await use_tenant(rag, module_database, tenant, planted)
        # The test can fail: the text is there to be found before the delete.
        before = in_postgres(module_database, gone_text)
        assert {"chunks.text", "turns.text", "transcripts.messages"} <= set(before), before
        assert await in_temporal(client, gone_text, since)
        assert stack.index.count(gone) > 0
        kept_before = tenant_rows(module_database, kept)

        report = await rag.delete_tenant(gone)
        await save_history(client, report.workflow_id, "delete-tenant")

        assert report.tenant == gone and report.keys_revoked == 1
        assert report.documents == 3  # two files and the upload
        removed = report.rows_removed
        assert removed["conversations"] == 1 and removed["turns"] == 4, removed
        assert removed["uploads"] == 1 and removed["api_keys"] == 1, removed
        assert removed["eval_reports"] == 1, removed
        # The ask, 2 turns and the evaluation's case (an answer too).
        assert removed["answer_costs"] == removed["transcripts"] == 4, removed
        # At least: 2 ingests, the search, the answer, the conversation and its 2 turn answers,
        # the evaluation and its case.
        assert report.runs_deleted >= 9, report
        assert in_postgres(module_database, gone_text) == []
        assert all(n == 0 for n in tenant_rows(module_database, gone).values())
        assert stack.index.count(gone) == 0
        await gone_from_temporal(client, gone_text, since)
        assert await rag.history(f"talk-{gone_text}", gone) is None

        # The other tenant, whose name starts with the deleted one's, keeps everything.
        assert tenant_rows(module_database, kept) == kept_before
        assert {"chunks.text", "turns.text"} <= set(in_postgres(module_database, kept_text))
        assert ids.conversation_workflow_id(kept, f"talk-{kept_text}") in await in_temporal(
            client, kept_text, since
        )
        found = await rag.search(f"codeword {kept_text}", kept, top_k=1)
        assert kept_text in found.passages[0].text

        # Deleting again finds nothing left, and the deletion's own run keeps no tenant text.
        again = await rag.delete_tenant(gone)
        assert set(again.rows_removed.values()) == {0} and again.keys_revoked == 0, again
        assert report.workflow_id not in await in_temporal(client, gone_text, since)
