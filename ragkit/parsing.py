"""Turn a file's bytes into text plus its structure (headings and paragraphs).

Pure functions, no I/O apart from `read_source`. Every refusal is a `DocumentError` with a stable
`kind`, so the ingest result can say exactly why a document was not ingested.
"""

from __future__ import annotations

import io
import itertools
import re
import stat
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import ClassVar

# Stable error kinds, reported per document in the ingest result.
UNREADABLE = "unreadable"
UNSUPPORTED_TYPE = "unsupported_type"
EMPTY = "empty"
TOO_LARGE = "too_large"
INVALID_UTF8 = "invalid_utf8"
PARSE_ERROR = "parse_error"

CONTENT_TYPES = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".txt": "text",
    ".text": "text",
    ".html": "html",
    ".htm": "html",
    ".pdf": "pdf",
}


class DocumentError(Exception):
    """A document that cannot be ingested, with a stable kind and a message for the user."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass(frozen=True, slots=True)  # slots: a file of tiny paragraphs makes millions of them
class Block:
    """A run of body text under one heading path: `text[start:end]` of the parsed document."""

    heading_path: tuple[str, ...]
    start: int
    end: int


@dataclass
class ParsedDocument:
    title: str
    content_type: str
    text: str
    blocks: list[Block] = field(default_factory=list)


def content_type_for(source: str) -> str:
    suffix = Path(source).suffix.lower()
    try:
        return CONTENT_TYPES[suffix]
    except KeyError:
        supported = ", ".join(sorted(CONTENT_TYPES))
        raise DocumentError(
            UNSUPPORTED_TYPE,
            f"unsupported file type {suffix or '(none)'!r}; supported: {supported}",
        ) from None


def read_source(path: Path, max_bytes: int) -> bytes:
    """Read a file, refusing one over `max_bytes` before reading it whole."""
    try:
        info = path.stat()
        if stat.S_ISDIR(info.st_mode):
            raise DocumentError(UNREADABLE, "is a directory, not a file")
        if not stat.S_ISREG(info.st_mode):
            # Opening a FIFO blocks until someone writes to it; a device may never end.
            raise DocumentError(UNREADABLE, "not a regular file (a pipe, socket or device)")
        size = info.st_size
        if size > max_bytes:
            raise DocumentError(TOO_LARGE, f"{size} bytes is over the limit of {max_bytes} bytes")
        with path.open("rb") as handle:
            data = handle.read(max_bytes + 1)
    except DocumentError:
        raise
    except IsADirectoryError:
        raise DocumentError(UNREADABLE, "is a directory, not a file") from None
    except OSError as exc:
        raise DocumentError(UNREADABLE, f"cannot read file: {exc.strerror or exc}") from None
    except ValueError as exc:  # a NUL or an unencodable character in the name
        raise DocumentError(UNREADABLE, f"invalid file name: {exc}") from None
    if len(data) > max_bytes:
        raise DocumentError(TOO_LARGE, f"over the limit of {max_bytes} bytes")
    return data


def parse(data: bytes, content_type: str, fallback_title: str) -> ParsedDocument:
    """Parse bytes of a known content type. Raises DocumentError."""
    if content_type == "pdf":
        doc = _parse_pdf(data, fallback_title)
    else:
        text = _decode(data)
        if content_type == "markdown":
            doc = _parse_markdown(text, fallback_title)
        elif content_type == "html":
            doc = _parse_html(text, fallback_title)
        elif content_type == "text":
            doc = _parse_text(text, fallback_title)
        else:
            raise DocumentError(UNSUPPORTED_TYPE, f"unsupported content type {content_type!r}")
    if not doc.blocks or not any(doc.text[b.start : b.end].strip() for b in doc.blocks):
        raise DocumentError(EMPTY, "document has no text")
    return doc


def _decode(data: bytes) -> str:
    if not data.strip():
        raise DocumentError(EMPTY, "document is empty")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DocumentError(
            INVALID_UTF8,
            f"not valid UTF-8 at byte {exc.start}: {data[exc.start : exc.start + 4]!r}",
        ) from None
    if "\x00" in text:
        raise DocumentError(INVALID_UTF8, "contains NUL bytes: binary data, not text")
    return text.replace("\r\n", "\n").replace("\r", "\n")


_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n+")


def _paragraph_blocks(text: str, start: int, end: int, path: tuple[str, ...]) -> list[Block]:
    """Split text[start:end] on blank lines into blocks, trimming whitespace."""
    blocks = []
    pos = start
    for match in itertools.chain(_PARAGRAPH_BREAK.finditer(text, start, end), [None]):
        stop = match.start() if match else end
        segment = text[pos:stop]
        stripped = segment.strip()
        if stripped:
            lead = len(segment) - len(segment.lstrip())
            s = pos + lead
            blocks.append(Block(path, s, s + len(stripped)))
        if match:
            pos = match.end()
    return blocks


# The closing `#`s are stripped in Python, not by a lazy group before `[ \t]*#*[ \t]*$`: that
# regex backtracks cubically on a heading line with a long run of spaces (4 KB: minutes).
_ATX = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*)$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")


def _parse_markdown(text: str, fallback_title: str) -> ParsedDocument:
    lines = text.split("\n")
    offsets = []
    pos = 0
    for line in lines:
        offsets.append(pos)
        pos += len(line) + 1

    stack: list[tuple[int, str]] = []
    blocks: list[Block] = []
    headings: list[Block] = []  # the headings' own text: the body of a file of headings only
    title = ""
    body_start = 0
    in_fence = False

    def flush(until: int) -> None:
        path = tuple(h for _, h in stack)
        blocks.extend(_paragraph_blocks(text, body_start, until, path))

    i = 0
    while i < len(lines):
        line = lines[i]
        if _FENCE.match(line):
            in_fence = not in_fence
            i += 1
            continue
        heading: tuple[int, str] | None = None
        consumed = 1
        if not in_fence:
            atx = _ATX.match(line)
            if atx:
                heading = (len(atx.group(1)), atx.group(2).rstrip(" \t").rstrip("#").strip())
            elif (
                line.strip()
                and i + 1 < len(lines)
                and _SETEXT.match(lines[i + 1])
                and (i == 0 or not lines[i - 1].strip())
            ):
                heading = (1 if lines[i + 1].strip().startswith("=") else 2, line.strip())
                consumed = 2
        if heading and heading[1]:
            flush(offsets[i])
            level, name = heading
            while stack and stack[-1][0] >= level:
                stack.pop()
            at = offsets[i] + line.find(name)
            if at >= offsets[i]:
                # One section for all: an outline of 20,000 headings packs into few chunks.
                headings.append(Block((), at, at + len(name)))
            stack.append((level, name))
            if not title:
                title = name
            body_start = offsets[i + consumed] if i + consumed < len(lines) else len(text)
        i += consumed
    flush(len(text))
    if not blocks:
        blocks = headings
    return ParsedDocument(title or fallback_title, "markdown", text, blocks)


def _parse_text(text: str, fallback_title: str) -> ParsedDocument:
    # A short first line followed by a blank line reads as the title of a plain text file.
    first, _, rest = text.lstrip("\n").partition("\n")
    title = fallback_title
    path: tuple[str, ...] = ()
    if first.strip() and len(first) <= 120 and (not rest or not rest.split("\n", 1)[0].strip()):
        title = first.strip()
        path = (title,)
    blocks = _paragraph_blocks(text, 0, len(text), path)
    if path and blocks and text[blocks[0].start : blocks[0].end] == title:
        # The title line leaves the body, unless it is all the file says: a one-line note is
        # text, and its only block (not under itself as a heading, or chunks say it twice).
        blocks = blocks[1:] if len(blocks) > 1 else [Block((), blocks[0].start, blocks[0].end)]
    return ParsedDocument(title, "text", text, blocks)


# An attribute value as html.parser's start-tag regex reads it: quoted, or bare up to space or `>`.
_ATTRIBUTE_VALUE = re.compile(r"""=\s*(?:"[^"]*"|'[^']*'|[^>\s'"]*)""")
# Where that regex may start another attribute: after whitespace, a quote or a slash.
_ATTRIBUTE_START = re.compile(r"""(?<=['"\s/])[^\s/>]""")


class _HTMLText(HTMLParser):
    """Collects visible text by block element, with the heading stack."""

    BLOCK_TAGS: ClassVar[set[str]] = {
        "p",
        "div",
        "li",
        "pre",
        "blockquote",
        "td",
        "th",
        "section",
        "article",
        "br",
        "tr",
    }
    SKIP_TAGS: ClassVar[set[str]] = {"script", "style", "noscript", "template", "svg", "head"}
    # Elements that never enclose anything (no end tag) or whose end tag HTML lets a page leave
    # out: they do not count as nesting, or 300 `<br>` or unclosed `<li>` would read as deep.
    FLAT_TAGS: ClassVar[set[str]] = {
        "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param",
        "source", "track", "wbr", "html", "head", "body", "p", "li", "dt", "dd", "rt", "rp",
        "optgroup", "option", "colgroup", "caption", "thead", "tbody", "tfoot", "tr", "td", "th",
    }  # fmt: skip
    MAX_DEPTH = 256
    MAX_ATTRIBUTES = 10_000

    def __init__(self, budget: int) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.blocks: list[Block] = []
        self.stack: list[tuple[int, str]] = []
        self.headings: list[str] = []
        self.title = ""
        self._in_title = False
        self._heading: tuple[int, list[str]] | None = None
        self._skip = 0
        self._open: list[str] = []
        self._current: list[str] = []
        self._length = 0
        # Characters html.parser may still scan in vain: see _unterminated.
        self._budget = budget
        self._closing = False

    def _flush(self) -> None:
        body = " ".join(" ".join(self._current).split())
        self._current = []
        if not body:
            return
        if self.parts:
            self.parts.append("\n\n")
            self._length += 2
        start = self._length
        self.parts.append(body)
        self._length += len(body)
        self.blocks.append(Block(tuple(h for _, h in self.stack), start, self._length))

    def close(self) -> None:
        self._closing = True
        super().close()

    def _unterminated(self, i: int, end: int) -> int:
        """Charge a construct that close() finds unterminated against the budget.

        At close, html.parser scans to the end of the input for the terminator of every `<` that
        opens a tag, comment or declaration and then falls back to text, so `<a<a<a…` or
        `<!--x>` repeated costs the square of its length (400 KB of `<a`: minutes). Each such
        fallback is charged what is left of the input; past the budget the document is refused.
        """
        if end < 0 and self._closing:
            self._budget -= len(self.rawdata) - i
            if self._budget < 0:
                raise DocumentError(
                    PARSE_ERROR,
                    "malformed HTML: too many tags, comments or declarations left unterminated",
                )
        return end

    def check_for_whole_start_tag(self, i: int) -> int:
        """Refuse a start tag with absurdly many attributes before html.parser reads it.

        Its start-tag regex keeps ~800 bytes of backtracking state per attribute: a 2 MB tag of
        `a="1" ` peaked at 250 MB. Only a tag too long to be ordinary is counted, with every
        value (a data: URI, an SVG path) collapsed first, so long values never count.
        """
        close = self.rawdata.find(">", i)
        end = close if close >= 0 else len(self.rawdata)
        if end - i > 65_536:
            names = _ATTRIBUTE_VALUE.sub("=v ", self.rawdata[i:end])
            starts = itertools.islice(_ATTRIBUTE_START.finditer(names), self.MAX_ATTRIBUTES + 1)
            if sum(1 for _ in starts) > self.MAX_ATTRIBUTES:
                raise DocumentError(
                    PARSE_ERROR, f"an HTML tag with more than {self.MAX_ATTRIBUTES} attributes"
                )
        return int(super().check_for_whole_start_tag(i))

    def parse_starttag(self, i: int) -> int:
        return self._unterminated(i, super().parse_starttag(i))

    def parse_endtag(self, i: int) -> int:
        return self._unterminated(i, super().parse_endtag(i))

    def parse_comment(self, i: int, report: bool = True) -> int:
        return self._unterminated(i, super().parse_comment(i, report))

    def parse_pi(self, i: int) -> int:
        return self._unterminated(i, super().parse_pi(i))

    def parse_html_declaration(self, i: int) -> int:
        return self._unterminated(i, super().parse_html_declaration(i))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in self.FLAT_TAGS:
            self._open.append(tag)
            if len(self._open) > self.MAX_DEPTH:
                raise DocumentError(
                    PARSE_ERROR, f"HTML nested deeper than {self.MAX_DEPTH} elements"
                )
        if tag in self.SKIP_TAGS:
            self._skip += 1
        elif tag == "title":
            self._in_title = True
        elif len(tag) == 2 and tag[0] == "h" and tag[1] in "123456":
            self._flush()
            self._heading = (int(tag[1]), [])
        elif tag in self.BLOCK_TAGS:
            self._flush()

    def handle_endtag(self, tag: str) -> None:
        if tag in self._open:
            # As a browser does: an end tag also closes what was left open inside its element.
            del self._open[len(self._open) - 1 - self._open[::-1].index(tag) :]
        if tag in self.SKIP_TAGS:
            self._skip = max(0, self._skip - 1)
        elif tag == "title":
            self._in_title = False
        elif self._heading and tag == f"h{self._heading[0]}":
            level, words = self._heading
            name = " ".join(" ".join(words).split())
            self._heading = None
            if name:
                while self.stack and self.stack[-1][0] >= level:
                    self.stack.pop()
                self.stack.append((level, name))
                self.headings.append(name)
        elif tag in self.BLOCK_TAGS:
            self._flush()

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        elif self._skip:
            return
        elif self._heading:
            self._heading[1].append(data)
        else:
            self._current.append(data)


def _parse_html(text: str, fallback_title: str) -> ParsedDocument:
    # Ordinary pages leave nothing (or one stray `<` near the end) unterminated.
    parser = _HTMLText(budget=2 * len(text) + 1_000_000)
    try:
        parser.feed(text)
        parser.close()
    except DocumentError:
        raise
    except Exception as exc:  # html.parser raises assorted errors on broken markup
        raise DocumentError(PARSE_ERROR, f"cannot parse HTML: {exc}") from None
    parser._flush()
    page_title = " ".join(parser.title.split())
    title = page_title or (parser.stack[0][1] if parser.stack else fallback_title)
    if not parser.blocks:  # headings, or the page's title, are all it says: they are the body
        parser.stack = []  # one section for all, as in Markdown
        for name in parser.headings or ([page_title] if page_title else []):
            parser._current = [name]
            parser._flush()
    return ParsedDocument(title, "html", "".join(parser.parts), parser.blocks)


def _parse_pdf(data: bytes, fallback_title: str) -> ParsedDocument:
    from pypdf import PdfReader  # imported here: only PDF ingests pay for it

    if not data.startswith(b"%PDF"):
        raise DocumentError(PARSE_ERROR, "not a PDF file (no %PDF header)")
    try:
        reader = PdfReader(io.BytesIO(data))
        pages = [page.extract_text() or "" for page in reader.pages]
        meta_title = (reader.metadata.title if reader.metadata else None) or ""
    except Exception as exc:
        raise DocumentError(PARSE_ERROR, f"cannot read PDF: {exc}") from None
    parts: list[str] = []
    blocks: list[Block] = []
    length = 0
    for number, page_text in enumerate(pages, start=1):
        page_text = page_text.replace("\r\n", "\n").strip()
        if not page_text:
            continue
        if parts:
            parts.append("\n\n")
            length += 2
        offset = length
        parts.append(page_text)
        length += len(page_text)
        for block in _paragraph_blocks(page_text, 0, len(page_text), (f"page {number}",)):
            blocks.append(Block(block.heading_path, block.start + offset, block.end + offset))
    return ParsedDocument(meta_title.strip() or fallback_title, "pdf", "".join(parts), blocks)
