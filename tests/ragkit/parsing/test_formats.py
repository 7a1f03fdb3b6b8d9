"""What every format shares: the suffixes read, the refusals by kind, reading a file safely, and
the rule that a file whose title is all it says keeps it as its body."""

from pathlib import Path

import pytest

from ragkit import parsing
from ragkit.parsing import DocumentError
from tests.ragkit.parsing.samples import deck, docx_file, minimal_pdf, paragraph, workbook


def blocks_text(doc: parsing.ParsedDocument) -> list[tuple[tuple[str, ...], str]]:
    return [(b.heading_path, doc.text[b.start : b.end]) for b in doc.blocks]


@pytest.mark.parametrize(
    ("name", "content_type"),
    [
        ("notes.md", "markdown"),
        ("notes.TXT", "text"),
        ("page.htm", "html"),
        ("paper.pdf", "pdf"),
        ("report.docx", "docx"),
        ("deck.pptx", "pptx"),
        ("budget.xlsx", "xlsx"),
        ("macros.xlsm", "xlsx"),
        ("export.csv", "csv"),
        ("export.tsv", "tsv"),
    ],
)
def test_each_supported_suffix_names_its_content_type(name: str, content_type: str) -> None:
    assert parsing.content_type_for(name) == content_type


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("memo.doc", "convert to .docx"),
        ("talk.ppt", "convert to .pptx"),
        ("ledger.xls", "convert to .xlsx"),
        ("letter.odt", "convert to .docx"),
        ("photo.png", "unsupported file type '.png'"),
        ("Makefile", "unsupported file type '(none)'"),
    ],
)
def test_a_format_we_do_not_read_is_refused_with_what_to_do(name: str, says: str) -> None:
    with pytest.raises(DocumentError) as info:
        parsing.content_type_for(name)
    assert info.value.kind == parsing.UNSUPPORTED_TYPE
    assert says in info.value.message


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (b"", parsing.EMPTY),
        (b"   \n\n  ", parsing.EMPTY),
        (b"\xff\xfe\xfa bad", parsing.INVALID_UTF8),
        (b"text with \x00 nul", parsing.INVALID_UTF8),
    ],
)
def test_bad_bytes_get_specific_errors(data: bytes, kind: str) -> None:
    with pytest.raises(DocumentError) as info:
        parsing.parse(data, "text", "f")
    assert info.value.kind == kind


def test_plain_text_title_line() -> None:
    doc = parsing.parse(b"My Title\n\nPara one.\n\nPara two.\n", "text", "f")
    assert doc.title == "My Title"
    assert blocks_text(doc) == [(("My Title",), "Para one."), (("My Title",), "Para two.")]


def test_a_title_line_over_a_body_still_leaves_the_body() -> None:
    doc = parsing.parse(b"Fort James\n\nA fort in Accra.\n", "text", "f")
    assert doc.title == "Fort James"
    assert blocks_text(doc) == [(("Fort James",), "A fort in Accra.")]


def test_read_source_refuses_large_and_missing_files(tmp_path: Path) -> None:
    big = tmp_path / "big.txt"
    big.write_bytes(b"x" * 5000)
    with pytest.raises(DocumentError) as info:
        parsing.read_source(big, max_bytes=1000)
    assert info.value.kind == parsing.TOO_LARGE
    with pytest.raises(DocumentError) as info:
        parsing.read_source(tmp_path / "missing.txt", max_bytes=1000)
    assert info.value.kind == parsing.UNREADABLE


# Nothing a user writes is dropped (issue 18): a file whose title is all it says is its own body.
SHORT_FILES = [
    ("text", b"Fort James is a fort in Accra, Ghana.", "Fort James is a fort in Accra, Ghana."),
    ("text", b"otters\n", "otters"),
    ("text", b"\n\nA title only\n\n\n", "A title only"),
    ("markdown", b"Fort James is a fort in Accra, Ghana.", "Fort James is a fort in Accra, Ghana."),
    ("markdown", b"otters", "otters"),
    ("markdown", b"# A title only\n", "A title only"),
    ("markdown", b"A title only\n============\n", "A title only"),
    ("html", b"<p>Fort James is a fort in Accra, Ghana.</p>", "Fort James is a fort in Accra"),
    ("html", b"otters", "otters"),
    ("html", b"<html><head><title>A title only</title></head><body></body></html>", "A title only"),
    ("html", b"<h1>A title only</h1>", "A title only"),
    ("pdf", minimal_pdf(["Fort James is a fort in Accra, Ghana."]), "Fort James is a fort"),
    ("pdf", minimal_pdf(["otters"]), "otters"),
    ("docx", docx_file(paragraph("A title only", "Title")), "A title only"),
    ("pptx", deck([{"title": "A title only"}]), "A title only"),
    ("xlsx", workbook({"Sheet1": [["otters"]]}), "otters"),
    ("csv", b"otters\n", "otters"),
]


@pytest.mark.parametrize(("content_type", "data", "said"), SHORT_FILES)
def test_a_file_that_says_one_thing_keeps_it_as_body(
    content_type: str, data: bytes, said: str
) -> None:
    doc = parsing.parse(data, content_type, "fallback")
    body = [doc.text[b.start : b.end] for b in doc.blocks]
    assert any(said in text for text in body), (doc.title, body)
    # The one block is not filed under itself as a heading: its chunk would say it twice.
    assert all(said not in " ".join(b.heading_path) for b in doc.blocks), blocks_text(doc)


def test_headings_only_are_the_body_in_one_section() -> None:
    """An outline is its headings; one section, so 20,000 of them pack into few chunks."""
    doc = parsing.parse(b"# Ghana\n\n## Forts\n\n### Fort James\n", "markdown", "f")
    assert doc.title == "Ghana"
    assert blocks_text(doc) == [((), "Ghana"), ((), "Forts"), ((), "Fort James")]
    assert doc.headings == ["Ghana", "Forts", "Fort James"]
    html = parsing.parse(b"<title>T</title><h1>Ghana</h1><h2>Forts</h2>", "html", "f")
    assert html.title == "T"
    assert blocks_text(html) == [((), "Ghana"), ((), "Forts")]
