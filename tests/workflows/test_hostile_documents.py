"""Hostile documents through the real IngestWorkflow (Temporal dev server, Postgres, Qdrant Edge,
MiniLM): each one is a failure of its own, with a specific kind and message, or is ingested like
any document when it is in fact parseable; the good documents beside it are ingested, and a
corpus ingested before loses nothing.

The unit tests (tests/ragkit/parsing/test_hostile.py) bound each parser's time and memory;
this proves the flow keeps the damage to the one document, with every document parsed in the
worker's child processes (ragkit/parsing/isolation.py), where a parser that crashes or hangs
costs that document a parse_error and nothing else.
"""

from __future__ import annotations

import gzip
import os
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from ragkit import failpoints, ids
from ragkit.embedding import Embedder
from tests.conftest import Database, running_stack
from tests.ragkit.parsing.samples import (
    deck,
    docx_file,
    minimal_pdf,
    paragraph,
    pdf_file,
    workbook,
)
from tests.ragkit.parsing.test_hostile import LAUGHS, docx_bomb
from tests.workflows.test_ingest import active_chunk_ids, assert_index_matches_postgres

pytestmark = pytest.mark.integration

TENANT = "hostile"
MAX_BYTES = 3_000_000  # a 5 MB file is refused unread; a 2 MB one reaches the parser

GOOD = {
    "otters.md": b"# Otters\n\nSea otters hold hands while they sleep, not to drift apart.\n",
    "herons.txt": b"Herons\n\nGrey herons nest in colonies at the tops of tall trees near water.\n",
    "swifts.html": b"<html><head><title>Swifts</title></head><body><h1>Swifts</h1>"
    b"<p>Common swifts can stay airborne for ten months without landing.</p></body></html>",
    "moles.pdf": minimal_pdf(["Star-nosed moles find food faster than any other mammal."]),
    "voles.docx": docx_file(paragraph("Field voles dig runways through long grass.")),
    "shrews.pptx": deck([{"title": "Shrews", "bullets": ["Shrews eat their weight daily."]}]),
    "stoats.xlsx": workbook({"Coats": [["Animal", "Winter coat"], ["Stoat", "white"]]}),
}
MORE_GOOD = {
    "beavers.md": b"# Beavers\n\nBeavers build dams of branches, stones and mud across streams.\n",
    "puffins.txt": b"Puffins\n\nAtlantic puffins carry a dozen small fish in their beaks.\n",
}
# name: (content, kind, words the message must contain)
REFUSED: dict[str, tuple[bytes, str, str]] = {
    "nested.html": (b"<div>" * 200_000 + b"x" + b"</div>" * 200_000, "parse_error",
                    "nested deeper than 256"),
    "bomb.docx": (docx_bomb(), "parse_error", "a zip bomb?"),
    "laughs.docx": (LAUGHS, "parse_error", "declares a DTD"),
    "truncated.xlsx": (workbook({"S": [["a"]]})[:300], "parse_error", "not a zip archive"),
    "gzip-bomb.html": (gzip.compress(b"<div>" * 2_000_000), "invalid_utf8", "at byte 1"),
    "image.md": (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(64), "invalid_utf8", "at byte 0"),
    "program.txt": (b"\x7fELF\x02\x01\x01" + bytes(9) + b"\x02\x00>\x00", "invalid_utf8", "NUL"),
    "latin1.txt": ("caf\xe9 cr\xe8me".encode("latin-1"), "invalid_utf8", "at byte 3"),
    "huge-line.txt": (b"word " * 1_000_000, "too_large", "over the limit"),
    "only-script.html": (b"<script>track()</script>" * 10_000, "empty", "no text"),
    "fake.pdf": (b"%PDF-1.7\n" + bytes(range(256)) * 40, "parse_error", "cannot read PDF"),
}  # fmt: skip
# Left out of a folder walk, and said so.
SKIPPED = {"old.doc": b"\xd0\xcf\x11\xe0 a Word 97 file", "photo.png": b"\x89PNG"}
# Hostile-looking, but parseable: each is ingested like any document. (Nesting is 1000 deep,
# not the unit tests' 10000: every `>` is a token, and embedding 20 full chunks per document on
# two slow cores would be most of this test's time.)
PARSEABLE = {
    "deep-quote.md": b">" * 1_000 + b" Kingfishers dive from a perch to catch fish.\n",
    "deep-list.md": b"- " * 1_000 + b"Cormorants dry their wings in the sun.\n",
    # Its heading line took the Markdown parser minutes before.
    "spaced-heading.md": b"# Wren notes"
    + b" " * 4_000
    + b"end\n\nWrens sing loudly for their size.\n",
    # 300 <br> were "nested deeper than 256 elements" before.
    "poem.html": b"<p>The owl calls at dusk.<br>" + b"Hoot.<br>" * 300 + b"</p>",
    # html.parser rescanned the file for each unterminated `<a` (minutes); lxml reads it once.
    "unterminated.html": b"<p>Nightjars hunt moths at dusk.</p>" + b"<a" * 200_000,
    "attributes.html": b"<p " + b'a="1" ' * 100_000 + b">Dippers walk under water.</p>",
    "entities.html": b"<p>Ampersands: " + b"&amp; " * 500 + b"</p>",
    "one-long-word.txt": b"z" * 200_000,
    # An outline: its headings are its text (refused as empty before).
    "only-headings.md": b"# Gannets\n## Plunge diving\n" * 200,
    "one-line.txt": b"Fort James is a fort in Accra, Ghana.",
    # Its UTF-16 title ends in a NUL, which Postgres refuses: its whole batch failed before.
    "nul-title.pdf": pdf_file(
        [["Avocets sweep their bills through shallow water."]], title="Waders\x00"
    ),
    # 512 tokens of 2 KB words: its chunk's tsvector passed Postgres' 1 MB limit, and the insert
    # failed the whole batch as stage_failed.
    "long-words.md": b"# "
    + b" ".join(b"h%05d" % i + b"q" * 2_030 for i in range(300))
    + b"\n\n"
    + b" ".join(b"t%05d" % i + b"q" * 2_030 for i in range(256))
    + b"\n",
}


def write(folder: Path, files: dict[str, bytes]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)


def document_versions(db: Database) -> dict[str, int]:
    rows = db.rows(
        "SELECT source, version FROM documents WHERE tenant = %s AND status = 'active'", TENANT
    )
    return {Path(source).name: version for source, version in rows}


async def test_hostile_documents_fail_alone_and_nothing_else_is_lost(
    client: Client, database: Database, embedder: Embedder, tmp_path: Path
) -> None:
    first, batch = tmp_path / "first", tmp_path / "batch"
    write(first, GOOD)
    write(batch, {**MORE_GOOD, **PARSEABLE, **{n: c for n, (c, _, _) in REFUSED.items()}})
    write(batch, SKIPPED)
    # A FIFO is skipped in a folder walk (not a regular file); named, it used to block the read.
    pipe = batch / "pipe.md"
    os.mkfifo(pipe)

    async with running_stack(
        client, database, embedder, tmp_path / "data", max_document_bytes=MAX_BYTES
    ) as stack:
        rag = await stack.rag()
        before = await rag.ingest([str(first)], tenant=TENANT)
        assert before.failures == []
        assert before.totals.documents_ingested == len(GOOD)
        first_chunks = active_chunk_ids(stack.database, TENANT)
        first_versions = document_versions(stack.database)
        assert set(first_versions) == set(GOOD)

        result = await rag.ingest([str(batch), str(pipe)], tenant=TENANT)

        failures = {Path(f.source).name: f for f in result.failures}
        expected = {**{n: (k, w) for n, (_, k, w) in REFUSED.items()},
                    "pipe.md": ("unreadable", "not a regular file")}  # fmt: skip
        assert set(failures) == set(expected), sorted(failures)
        for name, (kind, words) in expected.items():
            assert failures[name].kind == kind, (name, failures[name])
            assert words in failures[name].message, (name, failures[name].message)
        assert result.totals.documents_failed == len(expected)
        assert result.totals.documents_ingested == len(MORE_GOOD) + len(PARSEABLE)
        assert result.degradations == []
        skipped = {(s.extension, s.kind, s.reason, s.count) for s in result.skipped}
        assert skipped == {
            (".doc", "unsupported_type", "convert to .docx", 1),
            (".png", "unsupported_type", "", 1),
            (".md", "unreadable", "not a regular file", 1),
        }
        assert "skipped 3 files: " in result.summary

        # Everything ingested before is still there, untouched; the new ones sit beside it.
        versions = document_versions(stack.database)
        assert set(versions) == set(GOOD) | set(MORE_GOOD) | set(PARSEABLE)
        assert {n: versions[n] for n in GOOD} == first_versions
        assert first_chunks <= active_chunk_ids(stack.database, TENANT)
        assert_index_matches_postgres(stack, TENANT)
        for name in [*MORE_GOOD, *PARSEABLE]:
            doc = ids.document_id(TENANT, str((batch / name).resolve()))
            chunks = stack.database.scalar(
                "SELECT count(*) FROM chunks WHERE document_id = %s", doc
            )
            assert chunks > 0, f"{name} has no chunks"
        for refused in expected:
            doc = ids.document_id(TENANT, str(batch / refused))
            assert stack.database.scalar("SELECT count(*) FROM documents WHERE id = %s", doc) == 0

        for question, source in [
            ("Which animal holds hands while sleeping?", "otters.md"),
            ("How long do swifts stay airborne?", "swifts.html"),
            ("How do kingfishers catch fish?", "deep-quote.md"),
            ("Which bird sings loudly for its size?", "spaced-heading.md"),
        ]:
            found = await rag.search(question, tenant=TENANT, top_k=3)
            assert Path(found.passages[0].source).name == source, (question, found.passages)


async def test_a_document_that_crashes_or_hangs_the_parser_costs_one_parse_error(
    client: Client, database: Database, embedder: Embedder, tmp_path: Path
) -> None:
    """The parser's child process dies on one document (a failpoint sends it SIGSEGV) and spins
    on another past its CPU limit: those two fail as parse_error, the rest of their batch and
    the batches after them are ingested, and the worker goes on."""
    folder = tmp_path / "crash"
    write(folder, {**MORE_GOOD, "crasher.md": b"# Crash\n\nBoom.\n", "spinner.md": b"Spin.\n"})
    faults = tmp_path / "failpoints.json"
    failpoints.write(faults, {"parser": {"crash": "SIGSEGV", "title": "crasher"}})
    tenant = f"crash-{uuid.uuid4().hex[:6]}"
    async with running_stack(
        client,
        database,
        embedder,
        tmp_path / "data",
        failpoints_file=faults,
        ingest_parse_cpu_seconds=2,
        ingest_batch_documents=2,
    ) as stack:
        rag = await stack.rag()
        result = await rag.ingest([str(folder)], tenant=tenant)
        assert {Path(f.source).name: f.kind for f in result.failures} == {
            "crasher.md": "parse_error"
        }
        assert "crashed on this document (SIGSEGV)" in result.failures[0].message
        assert result.totals.documents_ingested == len(MORE_GOOD) + 1

        failpoints.write(faults, {"parser": {"spin_seconds": 60, "title": "spinner"}})
        (folder / "spinner.md").write_bytes(b"Spin again.\n")
        again = await rag.ingest([str(folder)], tenant=tenant)
        # The crash is gone (the failpoint moved on): the crasher is read now.
        assert {Path(f.source).name: f.kind for f in again.failures} == {
            "spinner.md": "parse_error"
        }
        assert "more than 2 s of CPU time" in again.failures[0].message
        assert again.totals.documents_unchanged == len(MORE_GOOD)
        assert again.totals.documents_ingested == 1
        assert_index_matches_postgres(stack, tenant)


async def test_a_file_name_that_is_not_utf8_fails_alone(
    client: Client, database: Database, embedder: Embedder, tmp_path: Path
) -> None:
    folder = tmp_path / "names"
    write(folder, MORE_GOOD)
    (folder / os.fsdecode(b"caf\xe9.md")).write_bytes(b"# Cafe\n\nA perfectly good text.\n")
    async with running_stack(
        client, database, embedder, tmp_path / "data", max_document_bytes=MAX_BYTES
    ) as stack:
        rag = await stack.rag()
        result = await rag.ingest([str(folder)], tenant=TENANT)
        assert result.totals.documents_ingested == len(MORE_GOOD)
        assert [f.kind for f in result.failures] == ["unreadable"]
