"""Property tests of the file parsers and the chunker on arbitrary input, every format included.

For any bytes and every content type, `parse` either returns a document whose blocks are ordered,
trimmed, non-empty slices of its text, or raises DocumentError with one of the stable kinds and a
message: no other exception, and no example may run past its deadline (a hang or a blow-up fails
it). What parses also chunks: every chunk is an exact slice of the text, within the token budget
and its section. `content_type_for` and `read_source` refuse only with DocumentError.

Every test has a fixed budget (max_examples, deadline) and is derandomized, so CI runs the same
examples each time in a few seconds.
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Any

# Imported on first use by parse: not inside a timed example.
import docx  # noqa: F401
import openpyxl  # noqa: F401
import pptx  # noqa: F401
import pypdfium2  # noqa: F401
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ragkit import parsing
from ragkit.chunking import HEADING_SEPARATOR, chunk_document
from ragkit.parsing import DocumentError, ParsedDocument
from tests.ragkit.parsing.samples import deck, docx_file, heading_styles, paragraph, workbook
from tests.ragkit.test_chunking import tokenizer as minilm_tokenizer

KINDS = parsing.KINDS
CONTENT_TYPES = sorted({*parsing.CONTENT_TYPES.values(), "rtf", ""})


def budget(examples: int, deadline_ms: int = 5_000) -> Any:
    # No example database: the runs are derandomized, and the working tree stays clean.
    return settings(
        max_examples=examples,
        deadline=timedelta(milliseconds=deadline_ms),
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


# Pieces of every syntax the parsers read, so random input reaches the interesting branches
# (headings, fences, tags, comments, entities, BOMs, line endings) and not only "not UTF-8".
MARKUP = [
    "# ", "## ", "###### ", "####### ", " #", "\n", "\n\n", "\r\n", "\r", " ", "\t", "  ", "===",
    "---", "```", "~~~", "> ", ">>>>", "- ", "* ", "1. ", "<", ">", "</", "<div>", "</div>",
    "<p>", "</p>", "<br>", "<h1>", "</h1>", "<h3>", "</h3>", "<title>", "</title>", "<script>",
    "</script>", "<style>", "<head>", "<svg>", "<!--", "-->", "<![CDATA[", "]]>", "<!DOCTYPE",
    "<?xml", "?>", "<a href='", "\"", "'", "=", "&amp;", "&", "&#", "&#x", ";", "&#0;",
    "&#1114112;", "\ufeff", "\u00a0", "\u2028", "\u200b", "\x0b", "\x1c", "é", "中文", "😀",
    ".", "!", "?", "…", "word", "Title", "%PDF-1.4\n",
]  # fmt: skip
markup = st.lists(st.sampled_from(MARKUP) | st.text(max_size=12), max_size=60).map("".join)
documents = st.one_of(
    st.binary(max_size=600),
    markup.map(str.encode),
    st.text(max_size=400).map(str.encode),
)


def check_document(doc: ParsedDocument, content_type: str, data: bytes) -> None:
    assert doc.content_type == content_type
    assert doc.title, "a document always has a title (its fallback at least)"
    assert doc.blocks, "a document with no blocks must be refused as empty"
    previous_end = 0
    for block in doc.blocks:
        assert previous_end <= block.start < block.end <= len(doc.text), (block, len(doc.text))
        body = doc.text[block.start : block.end]
        assert body.strip() == body, f"block {block} is not trimmed: {body!r}"
        previous_end = block.end
        assert all(name and name == name.strip() for name in block.heading_path), block
        if content_type in ("markdown", "html"):
            assert len(block.heading_path) <= 6, block
    if content_type in ("markdown", "text"):
        # Offsets point into the file's own text: what a citation shows is what the file says.
        decoded = data.decode("utf-8-sig").replace("\r\n", "\n").replace("\r", "\n")
        assert doc.text == decoded


def parse_or_refuse(data: bytes, content_type: str) -> ParsedDocument | None:
    try:
        doc = parsing.parse(data, content_type, "fallback")
    except DocumentError as exc:
        assert exc.kind in KINDS, exc.kind
        assert exc.message and str(exc) == exc.message
        if content_type not in parsing.CONTENT_TYPES.values():
            assert exc.kind in (parsing.UNSUPPORTED_TYPE, parsing.EMPTY, parsing.INVALID_UTF8)
        return None
    assert content_type in parsing.CONTENT_TYPES.values(), "an unknown type must be refused"
    check_document(doc, content_type, data)
    return doc


@budget(1_000)
@given(data=documents, content_type=st.sampled_from(CONTENT_TYPES))
def test_parse_returns_a_consistent_document_or_a_stable_error(
    data: bytes, content_type: str
) -> None:
    parse_or_refuse(data, content_type)


@budget(150)
@given(body=st.binary(max_size=400), header=st.sampled_from([b"%PDF-1.4\n", b"%PDF-", b"%PDF"]))
def test_pdf_parser_survives_anything_after_a_pdf_header(body: bytes, header: bytes) -> None:
    parse_or_refuse(header + body, "pdf")


@pytest.mark.parametrize("content_type", ["markdown", "text", "html"])
@budget(150)
@given(
    text=st.text(
        alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), min_size=1
    )
)
def test_any_utf8_text_without_nul_is_never_an_encoding_error(content_type: str, text: str) -> None:
    try:
        doc = parsing.parse(text.encode(), content_type, "f")
    except DocumentError as exc:
        assert exc.kind in (parsing.EMPTY, parsing.PARSE_ERROR), exc.message
    else:
        check_document(doc, content_type, text.encode())


@budget(150)
@given(prefix=st.binary(max_size=40), bad=st.sampled_from([b"\xff", b"\xc0\xaf", b"\xed\xa0\x80"]))
def test_invalid_utf8_names_the_byte(prefix: bytes, bad: bytes) -> None:
    data = prefix + bad + b" and more text"
    try:
        data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        with pytest.raises(DocumentError) as info:
            parsing.parse(data, "text", "f")
        assert info.value.kind == parsing.INVALID_UTF8
        assert f"at byte {exc.start}" in info.value.message


@budget(200)
@given(source=st.text(max_size=40))
def test_content_type_for_any_name(source: str) -> None:
    try:
        kind = parsing.content_type_for(source)
    except DocumentError as exc:
        assert exc.kind == parsing.UNSUPPORTED_TYPE
        assert "supported:" in exc.message or "convert to ." in exc.message
        return
    assert kind in parsing.CONTENT_TYPES.values()
    assert parsing.CONTENT_TYPES[Path(source).suffix.lower()] == kind


@budget(150)
@given(
    # No "/": every name stays inside the test's folder, whatever ".." it holds.
    name=st.text(alphabet=st.characters(exclude_characters="/"), min_size=1, max_size=300),
    size=st.integers(min_value=0, max_value=3_000),
    make=st.booleans(),
)
def test_read_source_returns_the_bytes_or_a_stable_error(
    tmp_path_factory: pytest.TempPathFactory, name: str, size: int, make: bool
) -> None:
    folder = tmp_path_factory.getbasetemp() / "read-source"
    folder.mkdir(exist_ok=True)
    path = folder / name
    written: bytes | None = None
    if make:
        try:
            path.write_bytes(b"x" * size)
            written = b"x" * size
        except (OSError, ValueError):
            pass  # a name the file system refuses: read_source must refuse it too
    try:
        data = parsing.read_source(path, max_bytes=2_000)
    except DocumentError as exc:
        assert exc.kind in (parsing.UNREADABLE, parsing.TOO_LARGE), exc.kind
        assert exc.message
        if written is not None and path.is_file():
            assert exc.kind == parsing.TOO_LARGE and size > 2_000
    else:
        assert written is not None and path.is_file() and data == written and size <= 2_000
    finally:
        if written is not None:
            path.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    # Loaded before the examples run: its few seconds would blow the first one's deadline.
    return minilm_tokenizer()  # the one every chunking test of the session shares


CHUNK_TOKENS = 128  # the smallest budget settings allow: small inputs still split


@budget(200, deadline_ms=10_000)
@given(
    data=st.one_of(
        markup.map(str.encode),
        st.lists(st.sampled_from([*MARKUP[:20], "Sentence one. ", "x" * 150, "word " * 80]))
        .map("".join)
        .map(str.encode),
    ),
    content_type=st.sampled_from(["markdown", "text", "html", "csv", "tsv"]),
    overlap=st.sampled_from([0.0, 0.1, 0.15, 0.49]),
)
def test_chunks_of_any_parsed_document_are_exact_slices_within_budget(
    tokenizer: Any, data: bytes, content_type: str, overlap: float
) -> None:
    doc = parse_or_refuse(data, content_type)
    assume(doc is not None)
    assert doc is not None
    chunks = chunk_document(doc, tokenizer, CHUNK_TOKENS, overlap)
    assert chunks, "a parsed document has text, so it has chunks"
    assert [c.ordinal for c in chunks] == list(range(len(chunks)))
    starts = [c.char_start for c in chunks]
    assert starts == sorted(set(starts)), "chunks move forward"
    headings = {HEADING_SEPARATOR.join(b.heading_path) for b in doc.blocks}
    for chunk in chunks:
        assert 0 <= chunk.char_start < chunk.char_end <= len(doc.text)
        assert chunk.text == doc.text[chunk.char_start : chunk.char_end]
        assert 0 <= chunk.token_count <= CHUNK_TOKENS
        assert chunk.heading_path in headings
        # A chunk never crosses a heading: all of it lies within blocks of its own section.
        inside = [b for b in doc.blocks if b.start < chunk.char_end and chunk.char_start < b.end]
        assert inside
        assert {HEADING_SEPARATOR.join(b.heading_path) for b in inside} == {chunk.heading_path}
    for block in doc.blocks:
        assert any(c.char_start < block.end and block.start < c.char_end for c in chunks), (
            f"block {block} is in no chunk"
        )


@pytest.mark.parametrize("content_type", ["markdown", "text"])
@budget(200)
@given(
    text=st.text(
        alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), min_size=1
    )
)
def test_a_file_with_any_visible_character_is_never_refused_as_empty(
    content_type: str, text: str
) -> None:
    """Text and Markdown say everything they hold: whatever is written, a heading included,
    lands in some block (HTML may hold only a script, a PDF only images)."""
    decoded = text.replace("\r\n", "\n").replace("\r", "\n").lstrip("\ufeff")
    if not decoded.strip():
        return
    doc = parsing.parse(text.encode(), content_type, "f")
    body = "".join(doc.text[b.start : b.end] for b in doc.blocks)
    assert body.strip(), (text, blocks_text_of(doc))


def blocks_text_of(doc: ParsedDocument) -> list[tuple[tuple[str, ...], str]]:
    return [(b.heading_path, doc.text[b.start : b.end]) for b in doc.blocks]


# --- Office formats ------------------------------------------------------------------------
# Words of any script, with the characters XML and CSV quote; never a control character (XML
# 1.0 cannot hold most of them, so no Office file does).
WORDS = (
    st.text(
        alphabet=st.characters(
            categories=["L", "N", "P", "S", "Zs"], exclude_characters="\x00\u2028\u2029"
        ),
        min_size=1,
        max_size=30,
    )
    .map(str.strip)
    .filter(bool)
)


def words_of(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def xml_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


@budget(100)
@given(
    paragraphs=st.lists(
        st.tuples(WORDS, st.sampled_from(["", "Heading1", "Heading2", "Title"])),
        min_size=1,
        max_size=8,
    ),
    cells=st.lists(st.lists(WORDS, min_size=1, max_size=3), max_size=3),
)
def test_every_word_of_any_word_document_is_kept(
    paragraphs: list[tuple[str, str]], cells: list[list[str]]
) -> None:
    body = "".join(paragraph(xml_escape(text), style) for text, style in paragraphs)
    if cells:
        width = max(len(row) for row in cells)
        rows = "".join(
            "<w:tr>"
            + "".join(
                f"<w:tc>{paragraph(xml_escape(c))}</w:tc>" for c in row + [""] * (width - len(row))
            )
            + "</w:tr>"
            for row in cells
        )
        body += f"<w:tbl>{rows}</w:tbl>"
    styles = heading_styles(1, 2) + (
        '<w:style w:type="paragraph" w:styleId="Title"><w:name w:val="Title"/></w:style>'
    )
    data = docx_file(body, styles=styles)
    doc = parse_or_refuse(data, "docx")
    assert doc is not None
    said = " ".join([doc.text, *doc.headings])
    wanted = words_of(" ".join([t for t, _ in paragraphs] + [c for row in cells for c in row]))
    assert wanted <= words_of(said)


@budget(60, deadline_ms=10_000)
@given(
    sheets=st.dictionaries(
        st.text(alphabet="abcdefgh XYZ", min_size=1, max_size=12).map(str.strip).filter(bool),
        st.lists(
            # Not "=...": openpyxl would write a formula without its value, which Excel computes
            # and saves, and a file that only a library wrote lacks.
            st.lists(
                st.one_of(
                    WORDS.filter(lambda w: not w.startswith("=")),
                    st.integers(-(10**9), 10**9),
                    st.none(),
                ),
                max_size=4,
            ),
            max_size=6,
        ),
        min_size=1,
        max_size=3,
    )
)
def test_every_cell_of_any_workbook_is_kept_beside_its_row(
    sheets: dict[str, list[list[object]]],
) -> None:
    data = workbook(sheets)
    doc = parse_or_refuse(data, "xlsx")
    cells = [str(c) for rows in sheets.values() for row in rows for c in row if c is not None]
    if doc is None:  # nothing in any cell: refused as empty, and it was
        assert not cells
        return
    assert words_of(" ".join(cells)) <= words_of(doc.text)
    assert all(b.row >= 1 for b in doc.blocks)


@budget(30, deadline_ms=10_000)
@given(
    slides=st.lists(
        st.fixed_dictionaries(
            {"title": st.one_of(st.none(), WORDS), "bullets": st.lists(WORDS, max_size=3)},
            optional={"notes": WORDS},
        ),
        min_size=1,
        max_size=4,
    )
)
def test_every_word_of_any_deck_is_kept_on_its_slide(slides: list[dict[str, Any]]) -> None:
    data = deck(slides)
    doc = parse_or_refuse(data, "pptx")
    said = [
        *[s["title"] for s in slides if s["title"]],
        *[b for s in slides for b in s["bullets"]],
        *[s["notes"] for s in slides if s.get("notes")],
    ]
    if doc is None:
        assert not words_of(" ".join(said))
        return
    assert words_of(" ".join(said)) <= words_of(" ".join([doc.text, *doc.headings]))
    assert {b.page for b in doc.blocks} <= set(range(1, len(slides) + 1))


@budget(150)
@given(
    content_type=st.sampled_from(["docx", "xlsx", "pptx"]),
    flips=st.lists(st.tuples(st.floats(0, 1), st.integers(0, 255)), min_size=1, max_size=6),
)
def test_a_damaged_office_file_parses_or_is_refused_with_a_stable_kind(
    content_type: str, flips: list[tuple[float, int]]
) -> None:
    data = bytearray(SAMPLES[content_type])
    for at, value in flips:
        data[int(at * (len(data) - 1))] = value
    parse_or_refuse(bytes(data), content_type)


SAMPLES = {
    "docx": docx_file(paragraph("Herons wade in shallow water.", "Heading1")),
    "xlsx": workbook({"Birds": [["Name", "Wingspan"], ["Heron", 1.8]]}),
    "pptx": deck([{"title": "Swifts", "bullets": ["They sleep in flight."]}]),
}
