"""Hostile documents, one at a time through the parsers (and the chunker where they parse).

Each one either parses, in bounded time and memory, into a document whose text is what it says,
or is refused with DocumentError of a specific kind and a message that says why. The time bounds
are loose (CI cores are slow); what they catch is a return of blow-ups that took minutes: a
Markdown heading line of 4 KB of spaces, the hand-written HTML parser rescanning to the end of
the file for every unterminated `<a`, `</` or `<!--` (lxml, linear, reads those as a browser
does), and a FIFO that blocked the read forever. Office files are zip archives of XML: a zip
bomb, a lying size, the billion laughs, an external entity and an encrypted file are each
refused before any library unpacks or parses them. Time is measured in one run and memory in
a second, once the first has loaded whatever the parser loads: the second's peak is how far the
process's resident memory rose over what it held (Linux resets the high-water mark on request),
C libraries' allocations included. tracemalloc, which counted Python's alone, slowed these parses
ten times over (54 s of CPU of the 61 s these cases took).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import gzip
import io
import itertools
import os
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ragkit import parsing
from ragkit.chunking import MAX_CHUNK_CHARS, MAX_HEADING_CHARS, chunk_document
from ragkit.parsing import DocumentError, ParsedDocument
from tests.ragkit.parsing.samples import (
    W_NS,
    billion_laughs,
    docx_file,
    paragraph,
    workbook,
    zip_of,
)
from tests.ragkit.test_chunking import tokenizer as minilm_tokenizer

# A regression to the old behaviour is minutes: fail it, do not wait for the suite's 600 s.
pytestmark = pytest.mark.timeout(120)

MB = 1_000_000


@dataclass(frozen=True)
class Hostile:
    name: str
    content_type: str
    data: bytes
    kind: str | None  # None: it parses
    says: str  # in the error message; or, when it parses, in the document's text
    seconds: float = 10.0
    bytes_per_byte: int = 40  # peak memory per byte of input (markdown-it's tokens)


CLEAR_REFS = Path("/proc/self/clear_refs")


def nested_quotes(levels: int) -> bytes:
    return (">" * levels + " the bottom of the quote\n").encode()


def zip_named_markdown() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("notes.md", "# Notes\n\n" + "0" * 10 * MB)
    return buffer.getvalue()


def docx_bomb() -> bytes:
    """A Word file whose document part unpacks 50 MB from 50 KB."""
    document = f'<w:document xmlns:w="{W_NS}"><w:body>' + " " * 50 * MB + "</w:body></w:document>"
    return zip_of({"[Content_Types].xml": "<Types/>", "word/document.xml": document})


def lying_sizes() -> bytes:
    """A workbook whose zip directory claims a member of 4 GB (a bomb that hides its ratio)."""
    data = bytearray(workbook({"Sheet": [["a"]]}))
    at = data.find(b"PK\x01\x02")
    while at >= 0:
        data[at + 24 : at + 28] = (0xFFFFFFF0).to_bytes(4, "little")  # uncompressed size
        at = data.find(b"PK\x01\x02", at + 4)
    return bytes(data)


def with_part(data: bytes, name: str, body: bytes) -> bytes:
    """An Office file with one part replaced."""
    source = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for member in source.infolist():
            target.writestr(
                member.filename, body if member.filename == name else source.read(member)
            )
    return out.getvalue()


SHEET = workbook({"Sheet": [["Name", "Town"], ["Ann", "Lyon"]]})
XXE = (
    b'<?xml version="1.0"?><!DOCTYPE worksheet [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>'
    b'<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><sheetData>'
    b'<row r="1"><c r="A1" t="inlineStr"><is><t>&xxe;</t></is></c></row></sheetData></worksheet>'
)


def encrypted_member(data: bytes) -> bytes:
    """The archive with its members flagged as encrypted (in its central directory)."""
    out = bytearray(data)
    at = out.find(b"PK\x01\x02")
    while at >= 0:
        out[at + 8] |= 0x1
        at = out.find(b"PK\x01\x02", at + 4)
    return bytes(out)


LAUGHS = docx_file(paragraph("&lol9;"), prolog=billion_laughs("w:document"))
DTD_AFTER_LONG_COMMENT = docx_file(
    paragraph("x"), prolog="<!--" + "padding " * 10_000 + "-->" + billion_laughs("w:document")
)
NESTED_CONTROLS = docx_file(
    "<w:sdt><w:sdtContent>" * 100 + paragraph("deep") + "</w:sdtContent></w:sdt>" * 100
)


HOSTILE = [
    # HTML whose cost, not size, explodes.
    Hostile("200k-nested-divs", "html", b"<div>" * 200_000 + b"x" + b"</div>" * 200_000,
            parsing.PARSE_ERROR, "nested deeper than 256"),
    Hostile("200k-unclosed-bold", "html", b"<p>" + b"<b>" * 200_000 + b"text",
            parsing.PARSE_ERROR, "nested deeper than 256"),
    # What html.parser rescanned to the end of the input for: lxml reads it once, as a browser.
    Hostile("unterminated-start-tags", "html", b"<p>start</p>" + b"<a" * 200_000, None, "start"),
    Hostile("unterminated-end-tags", "html", b"<p>start</p>" + b"</" * 200_000, None, "start"),
    Hostile("unterminated-comments", "html", b"<p>start</p>" + b"<!--x>" * 70_000, None,
            "start"),
    Hostile("unterminated-processing", "html", b"<?x" * 130_000, parsing.EMPTY, "no text"),
    Hostile("unterminated-cdata", "html", b"<![CDATA[" * 45_000, parsing.EMPTY, "no text"),
    Hostile("unterminated-attribute-quotes", "html", b'<a b="' * 60_000, parsing.EMPTY,
            "no text"),
    Hostile("entity-flood-2mb", "html", b"<p>" + b"&amp;" * 400_000 + b"</p>", None, "&&&&"),
    Hostile("entity-flood-no-semicolons", "html", b"<p>" + b"&amp" * 400_000, None, "&&&&"),
    Hostile("out-of-range-char-refs", "html", b"<p>" + b"&#99999999999;" * 100_000, None,
            "\ufffd\ufffd"),
    Hostile("lone-angle-brackets", "html", b"<p>" + b"<" * 100_000, None, "<<<<"),
    Hostile("attribute-flood", "html", b"<p " + b'a="1" ' * 300_000 + b">text</p>", None,
            "text"),
    Hostile("bare-attribute-flood", "html", b"<p " + b"a/" * MB + b">text</p>", None, "text"),
    # Long values are not many attributes: pages saved whole inline their images.
    Hostile("3mb-data-uri-image", "html",
            b'<p>before</p><img src="data:image/png;base64,' + b"iVBORw0KGgo/" * 250_000
            + b'"><p>after</p>', None, "after"),
    Hostile("3mb-svg-path", "html",
            b'<p>before</p><svg><path d="' + b"M 0 0 L 1 1 " * 250_000 + b'"/></svg><p>after</p>',
            None, "after"),
    Hostile("gzip-bomb-named-html", "html", gzip.compress(b"<div>" * 4_000_000, 9),
            parsing.INVALID_UTF8, "at byte 1"),
    Hostile("zip-bomb-named-markdown", "markdown", zip_named_markdown(), parsing.INVALID_UTF8,
            "not valid UTF-8"),
    # Markdown: its parser is line based, so depth costs nothing; a long heading line did.
    Hostile("10k-nested-quotes", "markdown", nested_quotes(10_000), None,
            "the bottom of the quote"),
    Hostile("2k-lines-of-deepening-quotes", "markdown",
            b"".join(nested_quotes(i) for i in range(1, 2_001)), None, "the bottom"),
    Hostile("10k-nested-list", "markdown", ("- " * 10_000 + "leaf item\n").encode(), None,
            "leaf item"),
    Hostile("10k-lines-of-indented-list", "markdown",
            "".join("  " * (i % 400) + f"- item {i}\n" for i in range(10_000)).encode(), None,
            "item 9999", seconds=30.0),
    Hostile("heading-with-4kb-of-spaces", "markdown", b"# a" + b" " * 4_000 + b"b\n\nBody.\n",
            None, "Body.", seconds=2.0),
    Hostile("heading-with-1mb-of-spaces", "markdown", b"# a" + b" " * MB + b"b\n\nBody.\n",
            None, "Body."),
    Hostile("heading-of-1mb-hashes", "markdown", b"# " + b"#" * MB + b" x\n\nBody.\n", None,
            "Body."),
    # An outline's headings are its text, in one section (chunked as one run of text).
    Hostile("20k-headings-no-body", "markdown", b"# h\n## h2\n" * 10_000, None, "h2",
            bytes_per_byte=300),
    Hostile("100k-code-fences", "markdown", b"```\n" * 100_000, None, "```",
            bytes_per_byte=150),
    # One line, no newline at all.
    Hostile("5mb-line-text", "text", b"word " * MB, None, "word word"),
    Hostile("5mb-line-markdown", "markdown", b"word " * MB, None, "word word"),
    Hostile("5mb-line-html", "html", b"word " * MB, None, "word word"),
    Hostile("5mb-single-word", "text", b"a" * (5 * MB), None, "aaaa"),
    # Binary bytes where text was promised.
    Hostile("png-as-markdown", "markdown", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(64),
            parsing.INVALID_UTF8, "at byte 0"),
    Hostile("elf-header-as-text", "text", b"\x7fELF\x02\x01\x01" + bytes(9) + b"\x02\x00>\x00",
            parsing.INVALID_UTF8, "NUL"),
    Hostile("nul-bytes-in-text", "text", b"looks like text\x00\x00 until here",
            parsing.INVALID_UTF8, "NUL"),
    Hostile("utf16-as-markdown", "markdown", "# Title\n\nBody".encode("utf-16"),
            parsing.INVALID_UTF8, "at byte 0"),
    Hostile("latin1", "text", "caf\xe9 cr\xe8me".encode("latin-1"), parsing.INVALID_UTF8,
            "at byte 3"),
    Hostile("truncated-multibyte", "text", "Stra\xdfe".encode()[:5], parsing.INVALID_UTF8,
            "at byte 4"),
    Hostile("overlong-slash", "markdown", b"path \xc0\xaf etc", parsing.INVALID_UTF8,
            "at byte 5"),
    Hostile("encoded-surrogate", "html", b"<p>\xed\xa0\x80</p>", parsing.INVALID_UTF8,
            "at byte 3"),
    Hostile("zip-as-pdf", "pdf", b"PK\x03\x04" + bytes(100), parsing.PARSE_ERROR, "no %PDF"),
    Hostile("junk-after-pdf-header", "pdf", b"%PDF-1.7\n" + bytes(range(256)) * 40,
            parsing.PARSE_ERROR, "cannot read PDF"),
    # Office files: zip archives of XML, checked before any library opens them.
    Hostile("docx-zip-bomb", "docx", docx_bomb(), parsing.PARSE_ERROR, "a zip bomb?"),
    Hostile("xlsx-lying-sizes", "xlsx", lying_sizes(), parsing.TOO_LARGE, "a zip bomb?"),
    Hostile("docx-billion-laughs", "docx", LAUGHS, parsing.PARSE_ERROR, "declares a DTD"),
    Hostile("xlsx-external-entity", "xlsx", with_part(SHEET, "xl/worksheets/sheet1.xml", XXE),
            parsing.PARSE_ERROR, "declares a DTD"),
    Hostile("docx-dtd-after-a-long-comment", "docx", DTD_AFTER_LONG_COMMENT,
            parsing.PARSE_ERROR, "declares a DTD"),
    Hostile("pptx-utf16-dtd", "pptx",
            zip_of({"ppt/presentation.xml": ('<?xml version="1.0" encoding="UTF-16"?>'
                    + billion_laughs("p") + "<p/>").encode("utf-16")}),
            parsing.PARSE_ERROR, "declares a DTD"),
    Hostile("docx-encrypted", "docx", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(600),
            parsing.ENCRYPTED, "password-protected"),
    Hostile("docx-not-a-zip", "docx", b"PK\x03\x04 not a zip at all", parsing.PARSE_ERROR,
            "not a zip archive"),
    Hostile("xlsx-encrypted-member", "xlsx", encrypted_member(SHEET),
            parsing.ENCRYPTED, "is encrypted"),
    Hostile("docx-100-nested-content-controls", "docx", NESTED_CONTROLS, parsing.PARSE_ERROR,
            "nested deeper than 64"),
    Hostile("csv-field-of-9mb", "csv", b'a,b\n"' + b"x" * 9 * MB + b'",1\n',
            parsing.PARSE_ERROR, "field larger"),
]  # fmt: skip


def _status_bytes(field: str) -> int:
    """A `VmRSS`-like line of /proc/self/status, in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} in /proc/self/status")


def measured(work: Callable[[], Any]) -> tuple[Any, float, int]:
    """Run `work`; its result or the exception it raised, wall seconds, and the peak of resident
    memory over what the process held before, in bytes."""
    gc.collect()
    # Freed heap memory still resident would hide new allocations from the peak: hand it back.
    ctypes.CDLL(None).malloc_trim(0)
    CLEAR_REFS.write_text("5")  # the high-water mark (VmHWM) starts again from VmRSS
    before = _status_bytes("VmRSS")
    started = time.perf_counter()
    try:
        outcome: Any = work()
    except Exception as exc:  # the assertions say which ones are allowed
        outcome = exc
    seconds = time.perf_counter() - started
    return outcome, seconds, _status_bytes("VmHWM") - before


@pytest.mark.parametrize("case", HOSTILE, ids=lambda case: case.name)
def test_hostile_document_is_refused_clearly_or_parsed_in_bounded_time(case: Hostile) -> None:
    started = time.perf_counter()
    with contextlib.suppress(DocumentError):
        parsing.parse(case.data, case.content_type, case.name)
    seconds = time.perf_counter() - started
    outcome, _, peak = measured(lambda: parsing.parse(case.data, case.content_type, case.name))
    if case.kind is None:
        assert isinstance(outcome, ParsedDocument), f"refused: {outcome!r}"
        assert case.says in outcome.text
        assert outcome.blocks
        assert all(0 <= b.start < b.end <= len(outcome.text) for b in outcome.blocks)
        # No expansion: at most the spaces put between pieces of HTML text.
        assert len(outcome.text) <= 2 * len(case.data)
    else:
        assert isinstance(outcome, DocumentError), f"not a DocumentError: {outcome!r}"
        assert outcome.kind == case.kind, outcome.message
        assert case.says in outcome.message
    assert seconds < case.seconds, f"took {seconds:.1f} s"
    # Linear in the input (tiny pieces cost a pointer and a list slot each), never a bomb's.
    assert peak < case.bytes_per_byte * len(case.data) + 10 * MB, f"peaked at {peak / MB:.0f} MB"


def test_html_with_unterminated_markup_at_its_end_still_parses() -> None:
    """A stray `<` or an unclosed comment near the end of a long page costs only itself; one
    left open at the top hides the page, as it does in a browser (an empty document, refused
    as such)."""
    body = b"<html><body>" + b"<p>A paragraph of ordinary text.</p>" * 10_000
    for tail in (b"<a", b"<!-- never closed", b"</", b'<img src="x', b"<![CDATA[x"):
        doc = parsing.parse(body + tail, "html", "f")
        assert len(doc.blocks) >= 10_000
    with pytest.raises(DocumentError) as info:
        parsing.parse(b"<!-- unclosed at the top" + body, "html", "f")
    assert info.value.kind == parsing.EMPTY


@pytest.mark.parametrize(
    ("html", "blocks"),
    [
        (b"<p>" + b"line<br>" * 5_000 + b"</p>", 5_000),
        (b"<ul>" + b"<li>item" * 5_000 + b"</ul>", 5_000),
        (b"<body>" + b"<p>para" * 5_000, 5_000),
        (b"<table>" + b"<tr><td>cell" * 5_000 + b"</table>", 5_000),
        (b"<p>" + b'<img src="x.png">' * 5_000 + b"caption</p>", 1),
        (b"<div>" + b"<div><b>unclosed bold</div>" * 5_000 + b"</div>", 5_000),
    ],
    ids=["br", "unclosed-li", "unclosed-p", "unclosed-tr-td", "img", "unclosed-inline"],
)
def test_flat_html_is_not_mistaken_for_deep_nesting(html: bytes, blocks: int) -> None:
    """Void elements and elements whose end tag HTML makes optional do not nest: before, 257
    `<br>` in a page were "nested deeper than 256 elements"."""
    doc = parsing.parse(html, "html", "f")
    assert len(doc.blocks) == blocks


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return minilm_tokenizer()  # loaded once for every chunking test of the session


@pytest.mark.parametrize(
    "data",
    [b"word " * 200_000, b"a" * MB, b"Hi. " * 20_000, b"x\n\n" * 20_000],
    ids=["1mb-line", "1mb-word", "20k-sentences", "20k-paragraphs"],
)
def test_hostile_text_chunks_within_budget(tokenizer: Any, data: bytes) -> None:
    doc = parsing.parse(data, "text", "f")
    started = time.perf_counter()
    chunks = chunk_document(doc, tokenizer, 512, 0.15)
    assert time.perf_counter() - started < 30
    assert chunks and all(c.token_count <= 512 for c in chunks)
    assert all(c.text == doc.text[c.char_start : c.char_end] for c in chunks)
    assert chunks[0].char_start == doc.blocks[0].start
    assert chunks[-1].char_end == doc.blocks[-1].end


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    pipe = tmp_path / "notes.md"
    os.mkfifo(pipe)
    with pytest.raises(DocumentError) as info:
        parsing.read_source(pipe, max_bytes=1_000)
    assert info.value.kind == parsing.UNREADABLE
    assert "not a regular file" in info.value.message


def test_a_device_behind_a_document_name_is_refused_unread(tmp_path: Path) -> None:
    zero = tmp_path / "zero.txt"
    zero.symlink_to("/dev/zero")
    with pytest.raises(DocumentError) as info:
        parsing.read_source(zero, max_bytes=1_000_000_000)
    assert info.value.kind == parsing.UNREADABLE
    assert "not a regular file" in info.value.message


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda p: p.mkdir(), "is a directory"),
        (lambda p: p.symlink_to(p.parent / "missing.md"), "cannot read file"),
        (lambda p: p.symlink_to(p), "cannot read file"),
        (lambda p: None, "cannot read file"),
    ],
    ids=["directory", "dangling-link", "link-loop", "missing"],
)
def test_unreadable_paths_get_a_reason(
    tmp_path: Path, make: Callable[[Path], object], says: str
) -> None:
    path = tmp_path / "doc.md"
    make(path)
    with pytest.raises(DocumentError) as info:
        parsing.read_source(path, max_bytes=1_000)
    assert info.value.kind == parsing.UNREADABLE
    assert says in info.value.message


def test_a_name_the_os_cannot_take_is_unreadable_not_a_crash() -> None:
    for name in ("bad\x00name.md", "bad\ud800name.md"):
        with pytest.raises(DocumentError) as info:
            parsing.read_source(Path(name), max_bytes=1_000)
        assert info.value.kind == parsing.UNREADABLE


def test_every_chunk_fits_a_postgres_tsvector(tokenizer: Any) -> None:
    # Words over 100 characters are one [UNK] token each, so 512 tokens were a megabyte, and
    # Postgres refused the chunk's tsvector ("string is too long for tsvector"): the insert
    # failed, and with it every document of the batch.
    def words(count: int, tag: str) -> str:
        return " ".join(f"{tag}{i:05d}" + "q" * 2_030 for i in range(count))

    data = f"# {words(300, 'h')}\n\n{words(256, 't')}\n".encode()  # 1.1 MB
    doc = parsing.parse(data, "markdown", "f")
    chunks = chunk_document(doc, tokenizer, 512, 0.15)
    assert all(len(c.text) <= MAX_CHUNK_CHARS for c in chunks)
    assert all(len(c.heading_path) <= MAX_HEADING_CHARS for c in chunks)
    assert chunks[0].heading_path.startswith("h00000q") and chunks[0].heading_path.endswith("…")
    # Nothing is dropped: the chunks cover the body, and each new chunk brings new text.
    assert chunks[0].char_start == doc.blocks[0].start
    assert chunks[-1].char_end == doc.blocks[-1].end
    assert all(b.char_end > a.char_end for a, b in itertools.pairwise(chunks))


@pytest.mark.parametrize(
    "data",
    [
        b"a" * (3 * MAX_CHUNK_CHARS + 5),
        b"Short. " + b"b" * (2 * MAX_CHUNK_CHARS) + b" tail words here.",
        b"one two" + b" " * (3 * MAX_CHUNK_CHARS) + b"three four.",
        ("\u00e9" * 150 + " ").encode() * 2_000,
    ],
    ids=["one-word", "word-between-words", "spaces-between-words", "long-accented-words"],
)
def test_chunks_are_bounded_in_characters(tokenizer: Any, data: bytes) -> None:
    doc = parsing.parse(data, "text", "f")
    chunks = chunk_document(doc, tokenizer, 512, 0.15)
    assert chunks and all(0 < len(c.text) <= MAX_CHUNK_CHARS for c in chunks)
    assert all(c.text == doc.text[c.char_start : c.char_end] for c in chunks)
    assert all(c.token_count <= 512 for c in chunks)
    covered = "".join(doc.text[a.char_start : b.char_start] for a, b in itertools.pairwise(chunks))
    assert "".join((covered + chunks[-1].text).split()) == "".join(doc.text.split())
