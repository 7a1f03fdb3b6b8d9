"""Plain text, and the pieces every parser shares: decoding, paragraphs, and a builder of the
canonical text that formats without a text of their own (HTML, PDF, Office) render into."""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence

from ragkit.parsing.model import (
    EMPTY,
    INVALID_UTF8,
    Block,
    DocumentError,
    PageKind,
    ParsedDocument,
)


def decode(data: bytes) -> str:
    """UTF-8 (a BOM allowed), with every line ending as `\\n`."""
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


def paragraph_blocks(
    text: str, start: int, end: int, path: tuple[str, ...], page: int = 0
) -> list[Block]:
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
            blocks.append(Block(path, s, s + len(stripped), page))
        if match:
            pos = match.end()
    return blocks


def parse_text(data: bytes, fallback_title: str) -> ParsedDocument:
    text = decode(data)
    # A short first line followed by a blank line reads as the title of a plain text file.
    first, _, rest = text.lstrip("\n").partition("\n")
    title = fallback_title
    path: tuple[str, ...] = ()
    if first.strip() and len(first) <= 120 and (not rest or not rest.split("\n", 1)[0].strip()):
        title = first.strip()
        path = (title,)
    blocks = paragraph_blocks(text, 0, len(text), path)
    if path and blocks and text[blocks[0].start : blocks[0].end] == title:
        # The title line leaves the body, unless it is all the file says: a one-line note is
        # text, and its only block (not under itself as a heading, or chunks say it twice).
        blocks = blocks[1:] if len(blocks) > 1 else [Block((), blocks[0].start, blocks[0].end)]
    return ParsedDocument(title, "text", text, blocks)


def squash(text: str) -> str:
    """Runs of whitespace as one space, trimmed: how rendered text reads."""
    return " ".join(text.split())


class TextBuilder:
    """The canonical text of a rendered document: blocks of text separated by blank lines, each
    one a `Block` at its exact offsets."""

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._length = 0
        self.blocks: list[Block] = []

    def add(
        self,
        body: str,
        path: Sequence[str],
        *,
        page: int = 0,
        row: int = 0,
        keep_lines: bool = False,
    ) -> None:
        """Append one block; whitespace is squashed unless `keep_lines` (code, preformatted)."""
        if keep_lines:
            body = "\n".join(line.rstrip() for line in body.strip("\n").split("\n")).strip()
        else:
            body = squash(body)
        if not body:
            return
        if self._parts:
            self._parts.append("\n\n")
            self._length += 2
        start = self._length
        self._parts.append(body)
        self._length += len(body)
        self.blocks.append(Block(tuple(path), start, self._length, page, row))

    @property
    def text(self) -> str:
        return "".join(self._parts)

    def document(
        self,
        title: str,
        content_type: str,
        *,
        page_kind: PageKind = "",
        notes: list[tuple[str, str]] | None = None,
        headings: list[str] | None = None,
    ) -> ParsedDocument:
        return ParsedDocument(
            title, content_type, self.text, self.blocks, page_kind, notes or [], headings or []
        )


def row_text(header: Sequence[str] | None, cells: Sequence[str]) -> str:
    """A table row as one searchable line: each cell with its column's header, as
    `Country: France | Capital: Paris`; cells of a table without a header, `France | Paris`."""
    shown = []
    for i, cell in enumerate(cells):
        cell = squash(cell)
        if not cell:
            continue
        name = squash(header[i]) if header is not None and i < len(header) else ""
        shown.append(f"{name}: {cell}" if name and name != cell else cell)
    return " | ".join(shown)
