"""IngestWorkflow end to end on real services: Temporal dev server, Postgres, Qdrant Edge, MiniLM.

Acceptance checks 1, 2, 3 and 7 of the ingestion issue.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from temporalio.client import Client

from ragkit import ids, parsing
from ragkit.codec import open_in_place
from ragkit.ids import ingest_workflow_id
from tests.conftest import CORPUS, Database, Stack, copy_documents, running_stack

pytestmark = pytest.mark.integration

HISTORIES = Path(__file__).parent / "histories"


def build_corpus(target: Path, minimum: int = 50) -> list[Path]:
    """The bundled corpus, topped up to `minimum` documents with short notes. (Not the project's
    own README and ARCHITECTURE: they grow with every change, and so would this test's time.)"""
    shutil.copytree(CORPUS, target)
    files = sorted(p for p in target.rglob("*") if p.is_file())
    extra = 0
    while len(files) < minimum:
        note = target / f"field-note-{extra:02d}.md"
        note.write_text(
            f"# Field note {extra}\n\n## Observation\n\nOn expedition day {extra * 7 + 3}, the survey "
            f"team counted {extra * 13 + 41} grey herons nesting beside lake number {extra + 5}. "
            "The weather was calm and the water level had dropped since spring.\n"
        )
        files.append(note)
        extra += 1
    return sorted(files)


def longest_sentence(path: Path) -> str:
    """The document's longest sentence of prose, as its parser reads it (Office files too)."""
    doc = parsing.parse(path.read_bytes(), parsing.content_type_for(path.name), path.stem)
    text = "\n\n".join(doc.text[b.start : b.end] for b in doc.blocks)
    candidates = [
        " ".join(s.split())
        for s in re.split(r"(?<=[.!?])\s+|\n\s*\n", text)
        if not s.lstrip().startswith(("#", "|", "-", "*", "`", ">"))
    ]
    return max(candidates, key=len)


def active_chunk_ids(db: Database, tenant: str) -> set[str]:
    rows = db.rows(
        "SELECT c.id::text FROM chunks c JOIN documents d ON d.id = c.document_id "
        "WHERE c.tenant = %s AND c.version = d.version AND d.status = 'active'",
        tenant,
    )
    return {r[0] for r in rows}


def assert_index_matches_postgres(stack: Stack, tenant: str) -> int:
    in_postgres = active_chunk_ids(stack.database, tenant)
    in_index = [str(i) for i in stack.index.point_ids(tenant)]
    assert len(in_index) == len(set(in_index)), "a point is in the index twice"
    assert set(in_index) == in_postgres, "index and Postgres disagree"
    all_rows = stack.database.scalar("SELECT count(*) FROM chunks WHERE tenant = %s", tenant)
    assert all_rows == len(in_postgres), "Postgres holds chunks of inactive versions"
    return len(in_postgres)


async def save_history(
    client: Client, workflow_id: str, name: str, run_id: str | None = None
) -> None:
    """With DURABLE_RAG_RECORD_HISTORIES=1, keep the history (of the latest run, or `run_id`)
    for the replay test, its payloads opened: a recording replays without the tests' keyring."""
    if os.environ.get("DURABLE_RAG_RECORD_HISTORIES") != "1":
        return
    history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
    open_in_place(history.events, client.data_converter.payload_codec)
    HISTORIES.mkdir(exist_ok=True)
    # The workflow id too: a flow that names children after itself replays only under its own id.
    recorded = {"workflowId": workflow_id, **json.loads(history.to_json())}
    (HISTORIES / f"{name}.json").write_text(json.dumps(recorded, indent=1))


async def test_ingest_corpus_is_complete_idempotent_and_versioned(
    stack: Stack, tmp_path: Path
) -> None:
    rag = await stack.rag()
    corpus = tmp_path / "corpus"
    files = build_corpus(corpus)
    assert len(files) >= 50

    # 1. Every chunk in Postgres and in the index exactly once; a sentence finds its document.
    first = await rag.ingest([str(corpus)], tenant="acme")
    assert first.failures == []
    assert first.totals.documents_ingested == len(files)
    assert first.totals.batches_done == first.totals.batches_total > 1
    chunks = assert_index_matches_postgres(stack, "acme")
    assert chunks == first.totals.chunks_indexed == first.totals.passages_embedded
    documents = stack.database.scalar(
        "SELECT count(*) FROM documents WHERE tenant = 'acme' AND status = 'active'"
    )
    assert documents == len(files)

    probes = files[:: max(1, len(files) // 6)][:6]
    for path in probes:
        sentence = longest_sentence(path)
        found = await rag.search(sentence, tenant="acme", top_k=3)
        assert found.passages, f"nothing found for {sentence!r}"
        assert found.passages[0].source == str(path.resolve()), (
            f"{sentence!r} found {found.passages[0].source} first, not {path}"
        )
        assert set(found.timings_ms) == {"retrieve", "hydrate"}
        assert found.retrieval == "hybrid" and not found.degradations
    await save_history(stack.client, found.trace_id, "search")

    # Another tenant sees nothing of it.
    other = await rag.search(longest_sentence(probes[0]), tenant="someone-else")
    assert other.passages == []

    # 2. The same corpus again: nothing is re-embedded.
    encoded_before = stack.embedder.passages_encoded
    second = await rag.ingest([str(corpus)], tenant="acme")
    assert second.totals.documents_unchanged == len(files)
    assert second.totals.passages_embedded == 0
    assert stack.embedder.passages_encoded == encoded_before
    assert assert_index_matches_postgres(stack, "acme") == chunks

    # 3. Change one document: only its chunks change; the old version is no longer returned.
    target = next(p for p in files if p.name == "honeybees.md")
    old_sentence = longest_sentence(target)
    doc_id = ids.document_id("acme", str(target.resolve()))
    before = active_chunk_ids(stack.database, "acme")
    old_ids = {
        r[0]
        for r in stack.database.rows("SELECT id::text FROM chunks WHERE document_id = %s", doc_id)
    }
    new_sentence = (
        "Beekeeper Ottilie Marchbanks counted exactly 4,317 drones in hive number 88 in 1888."
    )
    pattern = r"\s+".join(re.escape(word) for word in old_sentence.split())
    changed, replaced = re.subn(pattern, new_sentence, target.read_text())
    assert replaced == 1
    target.write_text(changed)
    encoded_before = stack.embedder.passages_encoded
    third = await rag.ingest([str(corpus)], tenant="acme")
    assert third.totals.documents_ingested == 1
    assert third.totals.documents_unchanged == len(files) - 1
    new_ids = {
        r[0]
        for r in stack.database.rows("SELECT id::text FROM chunks WHERE document_id = %s", doc_id)
    }
    assert third.totals.passages_embedded == len(new_ids)
    assert stack.embedder.passages_encoded - encoded_before == len(new_ids)
    after = active_chunk_ids(stack.database, "acme")
    assert before - old_ids == after - new_ids, "chunks of other documents changed"
    assert old_ids.isdisjoint(new_ids)
    assert stack.database.scalar("SELECT version FROM documents WHERE id = %s", doc_id) == 2
    assert_index_matches_postgres(stack, "acme")

    found = await rag.search(new_sentence, tenant="acme", top_k=3)
    assert found.passages[0].source == str(target.resolve())
    assert found.passages[0].version == 2
    found = await rag.search(old_sentence, tenant="acme", top_k=10)
    assert all(old_sentence not in p.text for p in found.passages)
    assert all(p.version == 2 for p in found.passages if p.document_id == doc_id)

    # The run that replaced a document: stage, index, commit and purge.
    workflow_id = ingest_workflow_id(rag.ingest_request([str(corpus)], "acme"))
    await save_history(stack.client, workflow_id, "ingest-changed-document")


async def test_bad_documents_get_specific_errors_and_the_rest_is_ingested(
    client: Client, database: Database, embedder, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    folder = tmp_path / "mixed"
    folder.mkdir()
    good = []
    for i in range(3):
        path = folder / f"good-{i}.md"
        path.write_text(f"# Good {i}\n\nA perfectly fine document number {i} about river otters.\n")
        good.append(path)
    (folder / "empty.md").write_text("  \n\n")
    (folder / "latin1.txt").write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
    (folder / "huge.txt").write_text("big words " * 2000)
    (folder / "sheet.xlsx").write_bytes(b"PK\x03\x04 not a workbook at all")
    (folder / "memo.doc").write_bytes(b"\xd0\xcf\x11\xe0 a Word 97 file")
    (folder / "dangling.md").symlink_to(folder / "does-not-exist.md")
    explicit = [str(folder / n) for n in ("memo.doc", "dangling.md")]

    async with running_stack(
        client, database, embedder, tmp_path / "data", max_document_bytes=4096
    ) as stack:
        rag = await stack.rag()
        result = await rag.ingest([str(folder), *explicit], tenant="t")

        kinds = {Path(f.source).name: f.kind for f in result.failures}
        assert kinds == {
            "empty.md": "empty",
            "latin1.txt": "invalid_utf8",
            "huge.txt": "too_large",
            "sheet.xlsx": "parse_error",
            "memo.doc": "unsupported_type",
            "dangling.md": "unreadable",
        }
        for failure in result.failures:
            assert failure.message, failure
        memo = next(f for f in result.failures if f.source.endswith("memo.doc"))
        assert "convert to .docx" in memo.message
        assert result.totals.documents_ingested == len(good)
        assert result.totals.documents_failed == 6
        assert result.totals.documents_total == result.totals.documents_done == 9
        # Named, a .doc and a dangling link fail; met in the folder walk, they are skipped, and
        # the result says so.
        skipped = {(s.extension, s.kind, s.reason, s.count) for s in result.skipped}
        assert skipped == {
            (".doc", "unsupported_type", "convert to .docx", 1),
            (".md", "unreadable", "not a regular file", 1),
        }
        assert_index_matches_postgres(stack, "t")
        found = await rag.search("river otters document number 2", tenant="t", top_k=1)
        assert found.passages[0].source == str(good[2].resolve())


async def test_a_folder_of_every_format_is_ingested_and_cited_where_a_person_finds_it(
    stack: Stack, tmp_path: Path
) -> None:
    """Markdown, text, HTML, PDF, Word, PowerPoint, Excel, CSV and TSV side by side: each one is
    ingested, a passage says its page, slide or rows, and every file the folder walk leaves out
    is named, by reason and extension, in the result and in the run's details in the UI."""
    from temporalio.api.sdk.v1 import WorkflowMetadata

    from tests.ragkit.parsing.samples import deck, docx_file, heading_styles, paragraph, pdf_file
    from tests.ragkit.parsing.samples import workbook as xlsx

    folder = tmp_path / "shared-drive"
    (folder / "archive" / ".git").mkdir(parents=True)
    files = {
        "notes.md": b"# Notes\n\nThe kettle in room 4 is descaled on Fridays.\n",
        "readme.txt": b"Readme\n\nThe printer on floor two jams on thick card.\n",
        "page.html": b"<h1>Menu</h1><table><tr><th>Day</th><th>Soup</th></tr>"
        b"<tr><td>Monday</td><td>lentil and smoked paprika</td></tr></table>",
        "paper.pdf": pdf_file(
            [["Abstract of the paper."], ["Methods", "Zebra finches learn songs from tutors."]],
            outline=[("Methods", 1)],
        ),
        "report.docx": docx_file(
            paragraph("Findings", "Heading1") + paragraph("Heron colonies doubled since 2019."),
            styles=heading_styles(1),
        ),
        "deck.pptx": deck(
            [
                {"title": "Roadmap", "bullets": ["Q1: ship the importer."]},
                {"title": "Risks", "bullets": ["The quokka mascot licence expires in March."]},
            ]
        ),
        "budget.xlsx": xlsx({"Trips": [["Country", "Budget"], ["Peru", 4200], ["Iceland", 3900]]}),
        "export.csv": b"city,landmark\nSydney,Opera House with sail-shaped shells\n",
        "export.tsv": b"river\tlength\nDanube\t2850 km through ten countries\n",
    }
    for name, data in files.items():
        (folder / "archive" / name).write_bytes(data)
    (folder / "photo.png").write_bytes(b"\x89PNG")
    (folder / "archive" / "talk.ppt").write_bytes(b"\xd0\xcf\x11\xe0")
    (folder / "archive" / ".git" / "config").write_text("[core]\n")

    rag = await stack.rag()
    result = await rag.ingest([str(folder)], tenant="drive")
    assert result.failures == []
    assert result.totals.documents_ingested == len(files)
    said = {(s.kind, s.extension, s.reason, s.count) for s in result.skipped}
    assert said == {
        ("unsupported_type", ".png", "", 1),
        ("unsupported_type", ".ppt", "convert to .pptx", 1),
        ("hidden", "", "", 1),
    }
    assert result.summary.endswith(
        "skipped 3 files: 1 (hidden), 1 .png (unsupported_type), "
        "1 .ppt (unsupported_type: convert to .pptx)"
    )
    run = stack.client.get_workflow_handle(
        ids.ingest_workflow_id(rag.ingest_request([str(folder)], "drive"))
    )
    details = await run.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    assert details.current_details == f"done: {result.summary}"

    for question, name, location, heading in [
        ("When does the quokka mascot licence expire?", "deck.pptx", "slide 2", "Risks"),
        ("What is the trip budget for Peru?", "budget.xlsx", "rows 1-3", "Trips"),
        ("How do zebra finches learn songs?", "paper.pdf", "page 2", "Methods"),
        ("How much have heron colonies grown?", "report.docx", "", "Findings"),
        ("Which soup is served on Monday?", "page.html", "", "Menu"),
        ("Where is the Opera House?", "export.csv", "rows 1-2", ""),
    ]:
        found = await rag.search(question, tenant="drive", top_k=3)
        top = found.passages[0]
        assert (Path(top.source).name, top.location, top.heading_path) == (
            name,
            location,
            heading,
        ), question
    sheet = await rag.search("Peru budget", tenant="drive", top_k=1)
    assert "Country: Peru | Budget: 4200" in sheet.passages[0].text


def remote_commands(events: list) -> list[str]:  # type: ignore[type-arg]
    """A run's command shape (bench/floor.py) without its workflow tasks: how the two-stage
    pipeline's activities group into tasks depends on which finishes first, their order does not."""
    from bench.floor import command_shape

    return [step for step in command_shape(events) if step != "task"]


async def test_the_stand_ins_ask_temporal_for_what_a_real_ingest_asks(
    stack: Stack, tmp_path: Path
) -> None:
    """The workflow tier's IngestWorkflow tests (test_ingest_fallbacks.py) run on stand-ins: six
    files in batches of two, every document new (version 1) or every one changed (version 2).
    A real ingest of six files in batches of two, first new and then all changed, must issue the
    same commands in the same order, or those tests prove a path no real ingest takes."""
    from tests.workflows.test_answer import DOCUMENTS
    from tests.workflows.test_ingest_fallbacks import FILES, Script, run_stand_in_ingest

    assert len(DOCUMENTS) == len(FILES)
    rag = await stack.rag()
    corpus = copy_documents(DOCUMENTS, tmp_path / "six")
    request = rag.ingest_request([str(corpus)], "shape").model_copy(update={"batch_documents": 2})
    real = []
    for version in (1, 2):
        if version == 2:
            for path in corpus.iterdir():
                path.write_text(path.read_text() + "\n\nA line added for the second version.\n")
        handle = await rag.start_ingest(request)
        result = await handle.result()
        assert not result.failures and result.totals.documents_ingested == len(FILES)
        real.append(remote_commands((await handle.fetch_history()).events))

    for version, shape in zip((1, 2), real, strict=True):
        _, workflow_id = await run_stand_in_ingest(stack.client, Script(version=version))
        history = await stack.client.get_workflow_handle(workflow_id).fetch_history()
        assert remote_commands(history.events) == shape, (version, shape)
    assert real[1].count("remote:purge_superseded") == 3  # the changed run drops old versions
    assert "remote:purge_superseded" not in real[0]
