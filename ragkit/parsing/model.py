"""What every format's parser returns, and the one way they refuse a document."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

# Stable error kinds, reported per document in the ingest result.
UNREADABLE = "unreadable"
UNSUPPORTED_TYPE = "unsupported_type"
EMPTY = "empty"
TOO_LARGE = "too_large"
INVALID_UTF8 = "invalid_utf8"
PARSE_ERROR = "parse_error"
ENCRYPTED = "encrypted"
NO_TEXT_LAYER = "no_text_layer"
KINDS = frozenset(
    {UNREADABLE, UNSUPPORTED_TYPE, EMPTY, TOO_LARGE, INVALID_UTF8, PARSE_ERROR, ENCRYPTED}
    | {NO_TEXT_LAYER}
)

# What `Block.page` counts in a document: pages of a PDF (or as Word last laid them out), or
# slides of a deck. Rows (`Block.row`) are a sheet's own row numbers.
PageKind = Literal["", "page", "slide"]


class DocumentError(Exception):
    """A document that cannot be ingested, with a stable kind and a message for the user."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message

    def __reduce__(self) -> tuple[type[DocumentError], tuple[str, str]]:
        return (DocumentError, (self.kind, self.message))


@dataclass(frozen=True, slots=True)  # slots: a file of tiny paragraphs makes millions of them
class Block:
    """A run of body text under one heading path: `text[start:end]` of the parsed document.

    `page` (1-based; 0: none) is the page or slide it is on, `row` (1-based; 0: none) the
    spreadsheet row it renders: what a citation shows a person, beside the exact offsets."""

    heading_path: tuple[str, ...]
    start: int
    end: int
    page: int = 0
    row: int = 0


@dataclass
class ParsedDocument:
    """A document's canonical text (what citations' offsets point into) and its structure.

    `notes` are (kind, message) of what the parser could not keep but ingested the rest without
    (a scanned page in a PDF with text elsewhere): the ingest result reports them per document."""

    title: str
    content_type: str
    text: str
    blocks: list[Block] = field(default_factory=list)
    page_kind: PageKind = ""
    notes: list[tuple[str, str]] = field(default_factory=list)
    # Every heading the parser recognised, in order: those of a file of headings only are its
    # body (one section), not a path; this says what was found either way.
    headings: list[str] = field(default_factory=list)
