"""Turn a file's bytes into its canonical text plus its structure (headings, blocks, locations).

One module per family of formats, each a thin wrapper over a well-kept library:

| format | module | library |
|---|---|---|
| Markdown | `markdown.py` | markdown-it-py (CommonMark, GFM tables) |
| plain text | `text.py` | - |
| HTML | `html.py` | lxml (libxml2) |
| PDF | `pdf.py` | pypdfium2 (PDFium) |
| Word, PowerPoint | `office.py` | python-docx, python-pptx |
| Excel, CSV, TSV | `sheets.py` | openpyxl, csv |

Every parser returns a `ParsedDocument` (model.py): citations point at exact offsets of its text,
and its blocks carry the page, slide or row a person can follow. Every refusal is a
`DocumentError` with a stable `kind`. `parse` runs in the calling process; the ingest runs it in
a child process with CPU-time and memory limits (isolation.py), so a hostile document costs one
`parse_error`, never a worker.
"""

from __future__ import annotations

import stat
from collections.abc import Callable
from importlib import import_module
from pathlib import Path

from ragkit.parsing.model import (
    EMPTY,
    ENCRYPTED,
    INVALID_UTF8,
    KINDS,
    NO_TEXT_LAYER,
    PARSE_ERROR,
    TOO_LARGE,
    UNREADABLE,
    UNSUPPORTED_TYPE,
    Block,
    DocumentError,
    ParsedDocument,
)

__all__ = [
    "CONTENT_TYPES",
    "EMPTY",
    "ENCRYPTED",
    "INVALID_UTF8",
    "KINDS",
    "NO_TEXT_LAYER",
    "PARSE_ERROR",
    "TOO_LARGE",
    "UNREADABLE",
    "UNSUPPORTED_TYPE",
    "Block",
    "DocumentError",
    "ParsedDocument",
    "content_type_for",
    "parse",
    "read_source",
    "unsupported_reason",
]

CONTENT_TYPES = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".txt": "text",
    ".text": "text",
    ".html": "html",
    ".htm": "html",
    ".pdf": "pdf",
    ".docx": "docx",
    ".pptx": "pptx",
    ".xlsx": "xlsx",
    ".xlsm": "xlsx",
    ".csv": "csv",
    ".tsv": "tsv",
}
# Formats people keep that we read once they are saved as another: what to save them as.
CONVERT_TO = {
    ".doc": ".docx",
    ".dot": ".docx",
    ".rtf": ".docx",
    ".odt": ".docx",
    ".ppt": ".pptx",
    ".pps": ".pptx",
    ".odp": ".pptx",
    ".xls": ".xlsx",
    ".xlsb": ".xlsx",
    ".ods": ".xlsx",
}


def unsupported_reason(suffix: str) -> str:
    """Why a file of this suffix is not read, in a few words (`convert to .docx`), or ''."""
    target = CONVERT_TO.get(suffix.lower())
    return f"convert to {target}" if target else ""


def content_type_for(source: str) -> str:
    suffix = Path(source).suffix.lower()
    try:
        return CONTENT_TYPES[suffix]
    except KeyError:
        pass
    reason = unsupported_reason(suffix)
    if reason:
        raise DocumentError(
            UNSUPPORTED_TYPE,
            f"{suffix} is a format we do not read: {reason} (save it as {CONVERT_TO[suffix]})",
        )
    supported = ", ".join(sorted(CONTENT_TYPES))
    raise DocumentError(
        UNSUPPORTED_TYPE, f"unsupported file type {suffix or '(none)'!r}; supported: {supported}"
    )


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


def _storable(doc: ParsedDocument) -> ParsedDocument:
    """No NUL anywhere: Postgres text cannot hold one (a PDF's UTF-16 title ends in one). The
    text keeps its length, so every offset stays true."""
    if (
        "\x00" not in doc.text
        and "\x00" not in doc.title
        and not any("\x00" in name for block in doc.blocks for name in block.heading_path)
    ):
        return doc

    def clean(text: str) -> str:
        return " ".join(text.replace("\x00", " ").split())

    doc.title = clean(doc.title)
    doc.text = doc.text.replace("\x00", "\ufffd")
    doc.headings = [clean(h) for h in doc.headings]
    doc.blocks = [
        Block(tuple(clean(h) for h in b.heading_path), b.start, b.end, b.page, b.row)
        for b in doc.blocks
    ]
    return doc


# Each content type's parser, imported on first use: a worker that reads only Markdown never
# loads PDFium or openpyxl.
_PARSERS = {
    "markdown": ("ragkit.parsing.markdown", "parse_markdown"),
    "text": ("ragkit.parsing.text", "parse_text"),
    "html": ("ragkit.parsing.html", "parse_html"),
    "pdf": ("ragkit.parsing.pdf", "parse_pdf"),
    "docx": ("ragkit.parsing.office", "parse_docx"),
    "pptx": ("ragkit.parsing.office", "parse_pptx"),
    "xlsx": ("ragkit.parsing.sheets", "parse_xlsx"),
    "csv": ("ragkit.parsing.sheets", "parse_csv"),
    "tsv": ("ragkit.parsing.sheets", "parse_tsv"),
}


def parse(data: bytes, content_type: str, fallback_title: str) -> ParsedDocument:
    """Parse bytes of a known content type, in this process. Raises DocumentError."""
    if not data.strip():
        raise DocumentError(EMPTY, "document is empty")
    try:
        module, name = _PARSERS[content_type]
    except KeyError:
        raise DocumentError(
            UNSUPPORTED_TYPE, f"unsupported content type {content_type!r}"
        ) from None
    reader: Callable[[bytes, str], ParsedDocument] = getattr(import_module(module), name)
    doc = _storable(reader(data, fallback_title))
    if not doc.blocks or not any(doc.text[b.start : b.end].strip() for b in doc.blocks):
        raise DocumentError(EMPTY, "document has no text")
    return doc
