"""Property tests of the file parsers and the chunker on arbitrary input.

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

import pypdf  # noqa: F401  (imported on first use by parse: not inside a timed example)
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ragkit import parsing
from ragkit.chunking import HEADING_SEPARATOR, chunk_document
from ragkit.parsing import DocumentError, ParsedDocument
from tests.ragkit.test_chunking import tokenizer as minilm_tokenizer

KINDS = {
    parsing.UNREADABLE,
    parsing.UNSUPPORTED_TYPE,
    parsing.EMPTY,
    parsing.TOO_LARGE,
    parsing.INVALID_UTF8,
    parsing.PARSE_ERROR,
}
CONTENT_TYPES = sorted({*parsing.CONTENT_TYPES.values(), "docx", ""})


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


# The ATX heading rule before it was made linear; kept as the oracle for short lines, where
# its backtracking is cheap.
_OLD_ATX = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")


@budget(300)
@given(line=st.text(alphabet=" \t#ab\u00a0\u3000é", max_size=30))
def test_heading_names_are_what_the_old_heading_rule_gave(line: str) -> None:
    assume("\n" not in line)
    old = _OLD_ATX.match(line)
    name = old.group(2).strip() if old else ""
    doc = parsing.parse(f"{line}\n\nBody text.\n".encode(), "markdown", "f")
    body = next(b for b in doc.blocks if doc.text[b.start : b.end] == "Body text.")
    assert body.heading_path == ((name,) if name else ())


@budget(200)
@given(source=st.text(max_size=40))
def test_content_type_for_any_name(source: str) -> None:
    try:
        kind = parsing.content_type_for(source)
    except DocumentError as exc:
        assert exc.kind == parsing.UNSUPPORTED_TYPE
        assert "supported:" in exc.message
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
    content_type=st.sampled_from(["markdown", "text", "html"]),
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
