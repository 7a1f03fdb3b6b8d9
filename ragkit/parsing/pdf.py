"""PDF through pypdfium2 (PDFium, the engine of Chrome's viewer).

Each page's text is PDFium's, in its reading order, with the hyphens it marks as line-end
hyphenation taken out (`ap-⏎ply` reads `apply`). Every block is on one page, and a citation shows
it. Headings come from the document's outline (its bookmarks) where it has one: an entry's
heading starts where its title is found on the page it points to, else at that page's top. A
page with no text layer but images (a scan) is reported as such; a document made only of them is
refused as `no_text_layer`, never passed off as empty.

PDFium is native code, not thread-safe, and has crashed on hostile files: the parser runs in a
child process of its own (ragkit/parsing/isolation.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ragkit.parsing.model import (
    EMPTY,
    ENCRYPTED,
    NO_TEXT_LAYER,
    PARSE_ERROR,
    Block,
    DocumentError,
    ParsedDocument,
)
from ragkit.parsing.text import paragraph_blocks, squash

MAX_OUTLINE_ENTRIES = 10_000
MAX_OUTLINE_DEPTH = 16
# PDFium's marks for a hyphen it saw break a word at a line's end.
_SOFT_HYPHENS = str.maketrans("", "", "\ufffe\x02")


@dataclass(frozen=True)
class _Heading:
    at: int  # offset in the document's text
    level: int
    title: str


def _page_numbers(numbers: list[int]) -> str:
    shown = ", ".join(str(n) for n in numbers[:10])
    return shown + (f" and {len(numbers) - 10} more" if len(numbers) > 10 else "")


def _heading_at(page_text: str, title: str, start: int) -> int | None:
    """Where a heading's title begins a line of the page, at or after `start`."""
    words = title.split()
    if not words:
        return None
    pattern = re.compile(r"\s+".join(re.escape(w) for w in words), re.IGNORECASE)
    match = pattern.search(page_text, start)
    if match is None:
        return None
    line_start = page_text.rfind("\n", 0, match.start()) + 1
    return line_start  # with the number a heading carries before its title ("1.2 Usage")


def parse_pdf(data: bytes, fallback_title: str) -> ParsedDocument:
    import pypdfium2 as pdfium  # imported here: only PDF ingests pay for it
    import pypdfium2.raw as pdfium_c

    if b"%PDF" not in data[:1024]:
        raise DocumentError(PARSE_ERROR, "not a PDF file (no %PDF header)")
    try:
        pdf = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        if "password" in str(exc).lower():
            raise DocumentError(
                ENCRYPTED, "the PDF is encrypted with a password: ingest an unlocked copy"
            ) from None
        raise DocumentError(PARSE_ERROR, f"cannot read PDF: {exc}") from None
    try:
        pages: list[str] = []
        scanned: list[int] = []
        for index in range(len(pdf)):
            page = pdf[index]
            textpage = page.get_textpage()
            text = textpage.get_text_range().replace("\r\n", "\n").replace("\r", "\n")
            text = text.translate(_SOFT_HYPHENS).strip()
            if not text and any(
                page.get_objects(filter=[pdfium_c.FPDF_PAGEOBJ_IMAGE], max_depth=2)
            ):
                scanned.append(index + 1)
            pages.append(text)
            textpage.close()
            page.close()
        meta_title = squash((pdf.get_metadata_value("Title") or "").replace("\x00", " "))
        outline = []
        for entry in pdf.get_toc(max_depth=MAX_OUTLINE_DEPTH):
            destination = entry.get_dest()
            target = destination.get_index() if destination is not None else None
            title = squash(entry.get_title() or "")
            if title and target is not None and 0 <= target < len(pages):
                outline.append((target, entry.level, title))
            if len(outline) >= MAX_OUTLINE_ENTRIES:
                break
    except pdfium.PdfiumError as exc:
        raise DocumentError(PARSE_ERROR, f"cannot read PDF: {exc}") from None
    finally:
        pdf.close()

    if not any(pages):
        if scanned:
            raise DocumentError(
                NO_TEXT_LAYER,
                f"no page has a text layer: {len(scanned)} page(s) are images (a scan?). Run "
                "OCR on it first (for example ocrmypdf) and ingest the result",
            )
        raise DocumentError(EMPTY, "document has no text")

    # The document's text: its pages' texts, a blank line between pages.
    offsets: list[int] = []
    length = 0
    for text in pages:
        if text and length:
            length += 2
        offsets.append(length)
        length += len(text)
    full = "\n\n".join(t for t in pages if t)

    # Each outline entry starts where its title is found on its page (after the entry before
    # it on the same page), else at the page's top; never before the entry before it.
    headings: list[_Heading] = []
    previous = 0
    searched_from: dict[int, int] = {}
    for target, level, title in outline:
        page_text = pages[target]
        found = _heading_at(page_text, title, searched_from.get(target, 0))
        at = offsets[target] + (found if found is not None else 0)
        if found is not None:
            searched_from[target] = found + 1
        at = max(at, previous)
        previous = at
        headings.append(_Heading(at, level, title))

    blocks: list[Block] = []
    stack: list[_Heading] = []
    pending = 0
    for number, (text, start) in enumerate(zip(pages, offsets, strict=True), start=1):
        if not text:
            continue
        end = start + len(text)
        cut = start
        while True:
            following = headings[pending].at if pending < len(headings) else end
            stop = min(max(following, cut), end)
            path = tuple(h.title for h in stack)
            blocks.extend(paragraph_blocks(full, cut, stop, path, page=number))
            if pending >= len(headings) or headings[pending].at >= end:
                break
            heading = headings[pending]
            pending += 1
            while stack and stack[-1].level >= heading.level:
                stack.pop()
            stack.append(heading)
            cut = stop
    notes = []
    if scanned:
        notes.append(
            (
                NO_TEXT_LAYER,
                f"page(s) {_page_numbers(scanned)} are images without a text layer (a scan?): "
                "their text is not searchable",
            )
        )
    return ParsedDocument(
        meta_title or fallback_title,
        "pdf",
        full,
        blocks,
        "page",
        notes,
        [h.title for h in headings],
    )
