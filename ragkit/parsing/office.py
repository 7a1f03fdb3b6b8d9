"""Word (.docx) through python-docx and PowerPoint (.pptx) through python-pptx.

Word: the body in document order, content controls and text boxes included; a paragraph is a
heading when its style (or the styles it is based on) is a heading style, Title, or carries an
outline level, as Word's navigation pane reads it. Tables are one block per row with the header
row's names. Footnotes and endnotes follow the body. Pages are those Word last laid out (its
rendered page breaks), where it saved them.

PowerPoint: one section per slide, under the slide's title, shapes in reading order (top to
bottom, left to right; groups opened), tables by row, then the speaker notes.

Both formats are opened only after ragkit/parsing/archive.py checked the zip and its XML.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from typing import Any

from lxml import etree

from ragkit.parsing.archive import open_office_zip
from ragkit.parsing.model import PARSE_ERROR, DocumentError, ParsedDocument
from ragkit.parsing.text import TextBuilder, row_text, squash

_W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_MC = "http://schemas.openxmlformats.org/markup-compatibility/2006"


def _w(name: str) -> str:
    return f"{{{_W}}}{name}"


W_P, W_TBL, W_TR, W_TC, W_SDT = _w("p"), _w("tbl"), _w("tr"), _w("tc"), _w("sdt")
W_T, W_TAB, W_BR, W_CR = _w("t"), _w("tab"), _w("br"), _w("cr")
W_NBH, W_RENDERED_BREAK = _w("noBreakHyphen"), _w("lastRenderedPageBreak")
W_TXBX = _w("txbxContent")
# Subtrees whose text is not the paragraph's own: text boxes (read as blocks of their own),
# the fallback copy of a drawing (its text is in the choice beside it), deleted tracked changes.
_NOT_INLINE = frozenset({W_TXBX, f"{{{_MC}}}Fallback", _w("del"), _w("moveFrom")})
_CONTAINERS = frozenset({_w("sdtContent"), _w("customXml"), _w("ins"), _w("moveTo")})
_HEADING_NAME = re.compile(r"^heading (\d)$")


def _open(data: bytes, label: str, suffix: str, opener: Any) -> tuple[Any, bool]:
    """The library's document, and whether the file has its own core properties (python-docx
    and python-pptx make up a title, "Word Document", for a file without them)."""
    archive = open_office_zip(data, label, suffix)
    has_properties = "docProps/core.xml" in archive.namelist()
    try:
        return opener(io.BytesIO(data)), has_properties
    except DocumentError:
        raise
    except Exception as exc:  # the libraries raise KeyError, ValueError, lxml errors...
        raise DocumentError(PARSE_ERROR, f"cannot read the {label}: {exc}") from None


# --- Word ------------------------------------------------------------------------------------


def _style_levels(document: Any) -> dict[str, int]:
    """Heading level per paragraph style id: 0 for Title, n for "heading n" or outline level
    n-1, inherited through `basedOn`."""
    own: dict[str, int | None] = {}
    based: dict[str, str] = {}
    for style in document.styles.element.findall(_w("style")):
        if style.get(_w("type")) != "paragraph":
            continue
        style_id = style.get(_w("styleId")) or ""
        name_element = style.find(_w("name"))
        name = (name_element.get(_w("val")) if name_element is not None else "") or ""
        level: int | None = None
        outline = style.find(f"{_w('pPr')}/{_w('outlineLvl')}")
        if name.lower() == "title":
            level = 0
        elif match := _HEADING_NAME.match(name.lower()):
            level = int(match.group(1))
        elif outline is not None and (outline.get(_w("val")) or "").isdigit():
            value = int(outline.get(_w("val")) or "9")
            level = value + 1 if value < 9 else None
        own[style_id] = level
        parent = style.find(_w("basedOn"))
        if parent is not None and parent.get(_w("val")):
            based[style_id] = parent.get(_w("val")) or ""
    levels: dict[str, int] = {}
    for style_id in own:
        seen, current = set(), style_id
        while current and current not in seen:
            seen.add(current)
            if own.get(current) is not None:
                levels[style_id] = own[current]  # type: ignore[assignment]
                break
            current = based.get(current, "")
    return levels


def _inline(paragraph: etree._Element) -> Iterator[etree._Element]:
    """The paragraph's own run content, in order, without the subtrees of `_NOT_INLINE`."""
    walker = etree.iterwalk(paragraph, events=("start",))
    for _, element in walker:
        if element.tag in _NOT_INLINE:
            walker.skip_subtree()
        elif element is not paragraph and element.tag == W_P:
            walker.skip_subtree()  # a paragraph inside a drawing's text: read on its own
        else:
            yield element


def _paragraph_text(paragraph: etree._Element) -> tuple[str, int, int]:
    """The paragraph's text, the rendered page breaks before its first character, and all of
    the rendered page breaks it holds."""
    parts: list[str] = []
    breaks = leading = 0
    for element in _inline(paragraph):
        tag = element.tag
        if tag == W_T:
            parts.append(element.text or "")
        elif tag == W_TAB:
            parts.append("\t")
        elif tag in (W_BR, W_CR):
            parts.append("\n")
        elif tag == W_NBH:
            parts.append("-")
        elif tag == W_RENDERED_BREAK:
            breaks += 1
            if not "".join(parts).strip():
                leading += 1
    return "".join(parts), leading, breaks


class _WordReader:
    def __init__(self, document: Any) -> None:
        self.levels = _style_levels(document)
        body = document.element.body
        self.paged = body.find(f".//{W_RENDERED_BREAK}") is not None
        self.page = 1
        self.out = TextBuilder()
        self.stack: list[tuple[int, str]] = []
        self.headings: list[str] = []
        self.title = ""

    def path(self) -> tuple[str, ...]:
        return tuple(name for _, name in self.stack)

    def read(self, container: etree._Element, depth: int = 0) -> None:
        if depth > 64:
            raise DocumentError(PARSE_ERROR, "Word content nested deeper than 64 levels")
        for child in container:
            if child.tag == W_P:
                self.paragraph(child)
                for box in child.iter(W_TXBX):
                    if self._own_box(box, child):
                        self.read(box, depth + 1)
            elif child.tag == W_TBL:
                self.table(child, depth)
            elif child.tag == W_SDT or child.tag in _CONTAINERS:
                self.read(child.find(_w("sdtContent")) if child.tag == W_SDT else child, depth + 1)

    @staticmethod
    def _own_box(box: etree._Element, paragraph: etree._Element) -> bool:
        """A text box directly in this paragraph's drawing (not in its fallback copy, nor in
        another text box): read once."""
        for ancestor in box.iterancestors():
            if ancestor is paragraph:
                return True
            if ancestor.tag in _NOT_INLINE:
                return False
        return False

    def level(self, paragraph: etree._Element) -> int | None:
        properties = paragraph.find(_w("pPr"))
        if properties is None:
            return None
        outline = properties.find(_w("outlineLvl"))
        if outline is not None and (outline.get(_w("val")) or "").isdigit():
            value = int(outline.get(_w("val")) or "9")
            return value + 1 if value < 9 else None
        style = properties.find(_w("pStyle"))
        if style is None:
            return None
        return self.levels.get(style.get(_w("val")) or "")

    def paragraph(self, paragraph: etree._Element) -> None:
        text, leading, breaks = _paragraph_text(paragraph)
        self.page += leading
        level = self.level(paragraph)
        name = squash(text)
        if level is not None and name:
            while self.stack and self.stack[-1][0] >= level:
                self.stack.pop()
            self.stack.append((level, name))
            self.headings.append(name)
            self.title = self.title or name
        else:
            self.out.add(text, self.path(), page=self.page if self.paged else 0)
        self.page += breaks - leading

    def cell_text(self, cell: etree._Element) -> str:
        texts = []
        for paragraph in cell.iter(W_P):
            texts.append(_paragraph_text(paragraph)[0])
        return squash(" ".join(texts))

    def table(self, table: etree._Element, depth: int) -> None:
        if depth > 64:
            raise DocumentError(PARSE_ERROR, "Word tables nested deeper than 64 levels")
        rows = [row for row in table if row.tag == W_TR]
        header: list[str] | None = None
        for number, row in enumerate(rows):
            page = self._page()
            for paragraph in row.iter(W_P):
                self.page += sum(1 for _ in paragraph.iter(W_RENDERED_BREAK))
            cells: list[str] = []
            for cell in row.iter(W_TC):
                if next(cell.iterancestors(W_TBL)) is not table:
                    continue  # a nested table's cell: in its outer cell's text
                span = cell.find(f"{_w('tcPr')}/{_w('gridSpan')}")
                count = int(span.get(_w("val")) or 1) if span is not None else 1
                merged = cell.find(f"{_w('tcPr')}/{_w('vMerge')}")
                continued = merged is not None and merged.get(_w("val")) != "restart"
                text = "" if continued else self.cell_text(cell)
                cells.extend([text] * max(1, min(count, 1_000)))
            marked = row.find(f"{_w('trPr')}/{_w('tblHeader')}") is not None
            if header is None and (marked or (number == 0 and len(rows) > 1)):
                header = cells
                self.out.add(" | ".join(c for c in cells if c), self.path(), page=page)
                continue
            self.out.add(row_text(header, cells), self.path(), page=page)

    def _page(self) -> int:
        return self.page if self.paged else 0

    def notes(self, document: Any) -> None:
        """Footnotes and endnotes, after the body, under a heading of their own."""
        from docx.oxml.parser import parse_xml

        for part in document.part.package.iter_parts():
            name = str(part.partname)
            if not name.endswith(("/footnotes.xml", "/endnotes.xml")):
                continue
            root = part.element if hasattr(part, "element") else parse_xml(part.blob)
            label = "Footnotes" if "footnotes" in name else "Endnotes"
            for note in root:
                if note.get(_w("type")) in ("separator", "continuationSeparator"):
                    continue
                text = " ".join(_paragraph_text(p)[0] for p in note.iter(W_P))
                self.out.add(text, (label,))


def parse_docx(data: bytes, fallback_title: str) -> ParsedDocument:
    import docx

    document, has_properties = _open(data, "Word document", ".docx", docx.Document)
    reader = _WordReader(document)
    try:
        reader.read(document.element.body)
        reader.notes(document)
    except DocumentError:
        raise
    except Exception as exc:  # python-docx on XML it did not expect: this document fails alone
        raise DocumentError(PARSE_ERROR, f"cannot read the Word document: {exc}") from None
    own_title = squash(document.core_properties.title or "") if has_properties else ""
    title = own_title or reader.title or fallback_title
    if not reader.out.blocks:  # headings are all it says: they are the body, in one section
        for name in reader.headings:
            reader.out.add(name, ())
    return reader.out.document(
        title, "docx", page_kind="page" if reader.paged else "", headings=reader.headings
    )


# --- PowerPoint ------------------------------------------------------------------------------


def _reading_order(shapes: Any) -> list[Any]:
    def position(shape: Any) -> tuple[int, int]:
        try:
            return (int(shape.top or 0), int(shape.left or 0))
        except (TypeError, ValueError, AttributeError):
            return (0, 0)

    return sorted(shapes, key=position)


def _shape_blocks(shape: Any, skip: Any, depth: int = 0) -> Iterator[tuple[str, bool]]:
    """(text, is a table row) of a shape, groups opened."""
    from pptx.enum.shapes import MSO_SHAPE_TYPE, PP_PLACEHOLDER

    if depth > 32:
        raise DocumentError(PARSE_ERROR, "PowerPoint groups nested deeper than 32 levels")
    if shape.shape_id == skip:
        return
    if shape.is_placeholder:
        kind = shape.placeholder_format.type
        if kind in (PP_PLACEHOLDER.SLIDE_NUMBER, PP_PLACEHOLDER.DATE, PP_PLACEHOLDER.FOOTER):
            return
    if shape.shape_type == MSO_SHAPE_TYPE.GROUP:
        for inner in _reading_order(shape.shapes):
            yield from _shape_blocks(inner, skip, depth + 1)
        return
    if getattr(shape, "has_table", False) and shape.has_table:
        table = shape.table
        header: list[str] | None = None
        for number, row in enumerate(table.rows):
            cells = [cell.text for cell in row.cells]
            if number == 0 and table.first_row and len(table.rows) > 1:
                header = cells
                yield " | ".join(squash(c) for c in cells if squash(c)), True
                continue
            yield row_text(header, cells), True
        return
    if getattr(shape, "has_chart", False) and shape.has_chart:
        chart = shape.chart
        if chart.has_title and chart.chart_title.has_text_frame:
            yield chart.chart_title.text_frame.text, False
        return
    if getattr(shape, "has_text_frame", False) and shape.has_text_frame:
        yield "\n".join(p.text.replace("\v", "\n") for p in shape.text_frame.paragraphs), False


def parse_pptx(data: bytes, fallback_title: str) -> ParsedDocument:
    import pptx

    deck, has_properties = _open(data, "PowerPoint deck", ".pptx", pptx.Presentation)
    out = TextBuilder()
    titles: list[str] = []
    try:
        for number, slide in enumerate(deck.slides, start=1):
            title_shape = slide.shapes.title
            title = squash(title_shape.text_frame.text) if title_shape is not None else ""
            titles.append(title)
            path = (title,) if title else (f"Slide {number}",)
            skip = title_shape.shape_id if title_shape is not None else None
            before = len(out.blocks)
            for shape in _reading_order(slide.shapes):
                for text, is_row in _shape_blocks(shape, skip):
                    out.add(text, path, page=number, keep_lines=not is_row)
            if slide.has_notes_slide:
                frame = slide.notes_slide.notes_text_frame
                if frame is not None:
                    out.add(frame.text, (*path, "Speaker notes"), page=number, keep_lines=True)
            if len(out.blocks) == before and title:
                out.add(title, (), page=number)  # a title slide: its title is what it says
    except DocumentError:
        raise
    except Exception as exc:  # python-pptx on XML it did not expect: this document fails alone
        raise DocumentError(PARSE_ERROR, f"cannot read the PowerPoint deck: {exc}") from None
    first = next((t for t in titles if t), "")
    own_title = squash(deck.core_properties.title or "") if has_properties else ""
    title = own_title or first or fallback_title
    return out.document(title, "pptx", page_kind="slide", headings=[t for t in titles if t])
