"""Parsing in child processes: a parser that crashes, spins, hangs or allocates without end costs
that one document a parse_error, and the next document is parsed by a fresh child. Faults are
set through the `parser` failpoint (ragkit/failpoints.py), which the child reads."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ragkit import failpoints, parsing
from ragkit.parsing.isolation import IsolatedParser, ParseLimits
from tests.ragkit.parsing.samples import deck, docx_file, minimal_pdf, paragraph, workbook

GOOD = b"# Otters\n\nSea otters hold hands while they sleep.\n"


@pytest.fixture
def faults(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "failpoints.json"
    failpoints.write(path, {})
    yield path


@pytest.fixture
def parser(faults: Path) -> Iterator[IsolatedParser]:
    isolated = IsolatedParser(
        ParseLimits(cpu_seconds=2, memory_mb=768, timeout_seconds=6), failpoints_file=faults
    )
    yield isolated
    isolated.close()


@pytest.mark.parametrize(
    ("data", "content_type"),
    [
        (GOOD, "markdown"),
        (b"<h1>Herons</h1><table><tr><th>A</th></tr><tr><td>b</td></tr></table>", "html"),
        (minimal_pdf(["Kingfishers dive."]), "pdf"),
        (docx_file(paragraph("Egrets wade.")), "docx"),
        (deck([{"title": "Swifts", "bullets": ["They sleep in flight."]}]), "pptx"),
        (workbook({"Birds": [["Name"], ["Puffin"]]}), "xlsx"),
    ],
)
def test_a_child_parses_as_this_process_does(
    parser: IsolatedParser, data: bytes, content_type: str
) -> None:
    assert parser(data, content_type, "doc") == parsing.parse(data, content_type, "doc")


def test_a_refusal_in_the_child_is_the_same_refusal(parser: IsolatedParser) -> None:
    with pytest.raises(parsing.DocumentError) as info:
        parser("caf\xe9".encode("latin-1"), "text", "latin1")
    assert info.value.kind == parsing.INVALID_UTF8
    assert "at byte 3" in info.value.message


@pytest.mark.parametrize(
    ("fault", "says"),
    [
        ({"crash": "SIGSEGV"}, "the parser crashed on this document (SIGSEGV)"),
        ({"crash": "SIGABRT"}, "the parser crashed on this document (SIGABRT)"),
        ({"spin_seconds": 60}, "more than 2 s of CPU time"),
        ({"sleep_seconds": 60}, "took longer than 6 s"),
        ({"allocate_mb": 4096}, "needed more than 768 MB of memory"),
    ],
    ids=["segfault", "abort", "cpu-limit", "hang", "memory-limit"],
)
def test_a_parser_fault_costs_one_parse_error_and_the_next_document_is_read(
    parser: IsolatedParser, faults: Path, fault: dict[str, object], says: str
) -> None:
    failpoints.write(faults, {"parser": {**fault, "title": "hostile"}})
    started = time.monotonic()
    with pytest.raises(parsing.DocumentError) as info:
        parser(GOOD, "markdown", "hostile")
    assert info.value.kind == parsing.PARSE_ERROR
    assert says in info.value.message
    assert time.monotonic() - started < 30
    # The same fault is set, but not for this document: a child parses it.
    assert "Sea otters" in parser(GOOD, "markdown", "harmless").text


def test_documents_parse_side_by_side_in_children_of_their_own(parser: IsolatedParser) -> None:
    with ThreadPoolExecutor(3) as pool:
        docs = list(pool.map(lambda n: parser(GOOD, "markdown", f"doc-{n}"), range(6)))
    assert all(d.title == "Otters" for d in docs)
