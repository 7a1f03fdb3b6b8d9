from pathlib import Path

import pytest

from ragkit import parsing
from ragkit.parsing import DocumentError


def blocks_text(doc: parsing.ParsedDocument) -> list[tuple[tuple[str, ...], str]]:
    return [(b.heading_path, doc.text[b.start : b.end]) for b in doc.blocks]


def test_markdown_headings_become_paths_and_code_fences_are_not_headings() -> None:
    text = (
        "# Guide\n\nIntro paragraph.\n\n## Install\n\nRun it.\n\n```\n# not a heading\n```\n\n"
        "### Linux\n\nUse apt.\n\n## Usage\n\nCall it.\n"
    )
    doc = parsing.parse(text.encode(), "markdown", "fallback")
    assert doc.title == "Guide"
    got = blocks_text(doc)
    assert got[0] == (("Guide",), "Intro paragraph.")
    assert (("Guide", "Install"), "Run it.") in got
    assert (("Guide", "Install"), "```\n# not a heading\n```") in got
    assert (("Guide", "Install", "Linux"), "Use apt.") in got
    assert (("Guide", "Usage"), "Call it.") in got


def test_setext_headings() -> None:
    doc = parsing.parse(b"Title\n=====\n\nBody one.\n\nPart\n----\n\nBody two.\n", "markdown", "f")
    assert blocks_text(doc) == [(("Title",), "Body one."), (("Title", "Part"), "Body two.")]


def test_block_offsets_point_into_the_original_text() -> None:
    text = "# A\n\nfirst para\nstill first\n\nsecond\n"
    doc = parsing.parse(text.encode(), "markdown", "f")
    for block in doc.blocks:
        assert text[block.start : block.end] in ("first para\nstill first", "second")


def test_plain_text_title_line() -> None:
    doc = parsing.parse(b"My Title\n\nPara one.\n\nPara two.\n", "text", "f")
    assert doc.title == "My Title"
    assert blocks_text(doc) == [(("My Title",), "Para one."), (("My Title",), "Para two.")]


def test_html_skips_scripts_and_keeps_headings() -> None:
    html = (
        b"<html><head><title>Doc T</title><style>p{}</style></head><body>"
        b"<h1>Top</h1><p>Hello <b>bold</b> world.</p><script>evil()</script>"
        b"<h2>Sub</h2><p>Second&nbsp;para.</p></body></html>"
    )
    doc = parsing.parse(html, "html", "f")
    assert doc.title == "Doc T"
    got = blocks_text(doc)
    assert got[0] == (("Top",), "Hello bold world.")
    assert got[1][0] == ("Top", "Sub")
    assert "evil" not in doc.text


def test_pdf_is_parsed_with_page_headings(tmp_path: Path) -> None:
    from pypdf import PdfWriter

    writer = PdfWriter()
    writer.add_blank_page(width=200, height=200)
    out = tmp_path / "blank.pdf"
    with out.open("wb") as handle:
        writer.write(handle)
    # A PDF without text is empty, and says so.
    with pytest.raises(DocumentError) as info:
        parsing.parse(out.read_bytes(), "pdf", "f")
    assert info.value.kind == parsing.EMPTY


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


def test_not_a_pdf() -> None:
    with pytest.raises(DocumentError) as info:
        parsing.parse(b"hello", "pdf", "f")
    assert info.value.kind == parsing.PARSE_ERROR


def test_unsupported_type() -> None:
    with pytest.raises(DocumentError) as info:
        parsing.content_type_for("sheet.xlsx")
    assert info.value.kind == parsing.UNSUPPORTED_TYPE
    assert ".xlsx" in info.value.message


def test_read_source_refuses_large_and_missing_files(tmp_path: Path) -> None:
    big = tmp_path / "big.txt"
    big.write_bytes(b"x" * 5000)
    with pytest.raises(DocumentError) as info:
        parsing.read_source(big, max_bytes=1000)
    assert info.value.kind == parsing.TOO_LARGE
    with pytest.raises(DocumentError) as info:
        parsing.read_source(tmp_path / "missing.txt", max_bytes=1000)
    assert info.value.kind == parsing.UNREADABLE


def test_deeply_nested_html_is_refused() -> None:
    html = ("<div>" * 1000 + "x" + "</div>" * 1000).encode()
    with pytest.raises(DocumentError) as info:
        parsing.parse(html, "html", "f")
    assert info.value.kind == parsing.PARSE_ERROR


def minimal_pdf(lines: list[str]) -> bytes:
    """A one-page PDF with real text, written by hand (no PDF writer ships text support)."""
    text = " ".join(f"({line}) Tj 0 -16 Td" for line in lines)
    stream = f"BT /F1 12 Tf 72 720 Td {text} ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


def test_pdf_text_is_extracted_under_page_headings() -> None:
    data = minimal_pdf(["Sea otters hold hands while they sleep.", "They use rocks as tools."])
    doc = parsing.parse(data, "pdf", "otters")
    assert doc.title == "otters"
    assert "Sea otters hold hands" in doc.text
    assert all(b.heading_path == ("page 1",) for b in doc.blocks)


# Nothing a user writes is dropped (issue 18): a file whose title is all it says is its own body.
SHORT_FILES = [
    ("text", b"Fort James is a fort in Accra, Ghana.", "Fort James is a fort in Accra, Ghana."),
    ("text", b"otters\n", "otters"),
    ("text", b"\n\nA title only\n\n\n", "A title only"),
    ("markdown", b"Fort James is a fort in Accra, Ghana.", "Fort James is a fort in Accra, Ghana."),
    ("markdown", b"otters", "otters"),
    ("markdown", b"# A title only\n", "A title only"),
    ("markdown", b"A title only\n============\n", "A title only"),
    (
        "html",
        b"<p>Fort James is a fort in Accra, Ghana.</p>",
        "Fort James is a fort in Accra, Ghana.",
    ),
    ("html", b"otters", "otters"),
    ("html", b"<html><head><title>A title only</title></head><body></body></html>", "A title only"),
    ("html", b"<h1>A title only</h1>", "A title only"),
    (
        "pdf",
        minimal_pdf(["Fort James is a fort in Accra, Ghana."]),
        "Fort James is a fort in Accra",
    ),
    ("pdf", minimal_pdf(["otters"]), "otters"),
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
    html = parsing.parse(b"<title>T</title><h1>Ghana</h1><h2>Forts</h2>", "html", "f")
    assert html.title == "T"
    assert blocks_text(html) == [((), "Ghana"), ((), "Forts")]


def test_a_title_line_over_a_body_still_leaves_the_body() -> None:
    doc = parsing.parse(b"Fort James\n\nA fort in Accra.\n", "text", "f")
    assert doc.title == "Fort James"
    assert blocks_text(doc) == [(("Fort James",), "A fort in Accra.")]
