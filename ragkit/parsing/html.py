"""HTML through lxml (libxml2's HTML5 tokenizer: linear time, in C), walked without recursion.

What a reader of the page reads becomes text: block elements are blocks, headings make the
heading path, a table is one block per row with its column headers (as a spreadsheet's rows are),
preformatted text keeps its lines. What is not the page's content stays out: scripts, styles,
navigation, site headers and footers, asides, hidden elements, forms' controls.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator

from lxml import etree

from ragkit.parsing.model import EMPTY, INVALID_UTF8, PARSE_ERROR, DocumentError, ParsedDocument
from ragkit.parsing.text import TextBuilder, decode, row_text, squash

MAX_DEPTH = 256  # libxml2's own bound without XML_PARSE_HUGE: a page past it is refused

_SKIP = frozenset(
    {
        "script", "style", "noscript", "template", "svg", "head", "iframe", "object", "embed",
        "canvas", "nav", "button", "select", "textarea", "input", "dialog",
    }
)  # fmt: skip
# Landmarks that are the site's, not the page's (ARIA roles, as screen readers skip them).
_SKIP_ROLES = frozenset({"navigation", "banner", "contentinfo", "search", "complementary"})
# Inside these, a <header>, <footer> or <aside> is the content's own (an article's byline, a
# sidebar note), not the site's.
_CONTENT = frozenset({"article", "main", "section"})
_SITE_PARTS = frozenset({"header", "footer", "aside"})
_BLOCK = frozenset(
    {
        "p", "div", "li", "dt", "dd", "blockquote", "section", "article", "main", "header",
        "footer", "ul", "ol", "dl", "figure", "figcaption", "address", "details", "summary",
        "hr", "br", "table", "tr", "td", "th", "caption", "form", "fieldset", "legend", "body",
        "center", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "tbody", "thead", "tfoot",
    }
)  # fmt: skip
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
# Cells holding these are a layout table's (a page laid out in a grid), not a data table's: its
# cells are read as blocks of the page.
_LAYOUT = ("h1", "h2", "h3", "h4", "h5", "h6", "table")


# `<meta charset="...">` or `<meta http-equiv="Content-Type" content="text/html; charset=...">`,
# in the first bytes, as a browser's prescan finds it.
_CHARSET = re.compile(rb"""<meta[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.I)


def _decode_html(data: bytes) -> str:
    """UTF-8, or the encoding the page declares in a `<meta>` (an older page's ISO-8859-1)."""
    try:
        return decode(data)
    except DocumentError as exc:
        if exc.kind != INVALID_UTF8 or b"\x00" in data:
            raise
        declared = _CHARSET.search(data[:4_096])
        if declared is None:
            raise
        try:
            codec = codecs.lookup(declared.group(1).decode("ascii"))
        except LookupError:
            raise exc from None
        if codec.name in ("utf-8", "utf-8-sig"):
            raise
        return decode(data.decode(codec.name, "replace").encode())


def _tag(element: etree._Element) -> str:
    tag = element.tag
    return tag.lower() if isinstance(tag, str) else ""


def _skipped(element: etree._Element, in_content: int) -> bool:
    tag = _tag(element)
    if not tag or tag in _SKIP:
        return True  # a comment or processing instruction left in, or what is never content
    attrib = element.attrib
    if "hidden" in attrib or attrib.get("aria-hidden") == "true":
        return True
    if attrib.get("role", "").lower() in _SKIP_ROLES:
        return True
    if tag in _SITE_PARTS and not in_content:
        return True
    # Sphinx and MkDocs put a "¶" permalink inside every heading.
    return tag == "a" and "headerlink" in attrib.get("class", "").split()


def _text_of(element: etree._Element) -> str:
    """The visible text inside an element (scripts and styles left out). Inline elements join
    their neighbours as a browser shows them (`L<sub>A</sub>TeX` is one word); block elements
    and line breaks are apart."""
    parts: list[str] = []
    walker = etree.iterwalk(element, events=("start", "end"))
    for event, node in walker:
        tag = _tag(node)
        if event == "start":
            if node is not element and tag in ("script", "style", "template"):
                walker.skip_subtree()  # its end event still comes, with its tail
                continue
            if tag in _BLOCK:
                parts.append(" ")
            parts.append(node.text or "")
        elif node is not element:
            if tag in _BLOCK:
                parts.append(" ")
            parts.append(node.tail or "")
    return squash("".join(parts))


def _own_rows(table: etree._Element) -> Iterator[etree._Element]:
    """The table's rows, not those of a table nested in one of its cells."""
    for row in table.iter("tr"):
        parent = row.getparent()
        while parent is not None and _tag(parent) != "table":
            parent = parent.getparent()
        if parent is table:
            yield row


def _cells(row: etree._Element) -> list[etree._Element]:
    return [cell for cell in row if _tag(cell) in ("td", "th")]


def _spread(row: etree._Element) -> list[str]:
    """A row's cell texts, a cell spanning n columns repeated n times (to line up headers)."""
    texts: list[str] = []
    for cell in _cells(row):
        text = _text_of(cell)
        try:
            span = max(1, min(int(cell.get("colspan", "1")), 1_000))
        except ValueError:
            span = 1
        texts.extend([text] * span)
    return texts


def _is_layout(table: etree._Element) -> bool:
    if table.get("role") in ("presentation", "none"):
        return True
    return any(
        _tag(child) in _LAYOUT
        for row in _own_rows(table)
        for cell in _cells(row)
        for child in cell.iterdescendants()
    )


def _table(table: etree._Element, out: TextBuilder, path: tuple[str, ...]) -> None:
    caption = table.find("caption")
    if caption is not None:
        out.add(_text_of(caption), path)
    rows = list(_own_rows(table))
    header: list[str] | None = None
    for row in rows:
        parent = row.getparent()
        in_head = parent is not None and _tag(parent) == "thead"
        cells = _cells(row)
        if header is None and cells and (in_head or all(_tag(c) == "th" for c in cells)):
            header = _spread(row)
            out.add(" | ".join(h for h in header if h), path)
            continue
        out.add(row_text(header, _spread(row)), path)


def parse_html(data: bytes, fallback_title: str) -> ParsedDocument:
    text = _decode_html(data)
    parser = etree.HTMLParser(
        recover=True,
        no_network=True,
        remove_comments=True,
        remove_pis=True,
        encoding="utf-8",
    )
    try:
        root = etree.fromstring(text.encode("utf-8"), parser)
    except (etree.LxmlError, ValueError) as exc:
        raise DocumentError(PARSE_ERROR, f"cannot parse HTML: {exc}") from None
    if any("Excessive depth" in error.message for error in parser.error_log):
        raise DocumentError(PARSE_ERROR, f"HTML nested deeper than {MAX_DEPTH} elements")
    out = TextBuilder()
    if root is None:  # all of it a comment, a declaration or markup left open, as browsers read it
        raise DocumentError(EMPTY, "document has no text")
    title_element = root.find(".//title")
    page_title = _text_of(title_element) if title_element is not None else ""

    stack: list[tuple[int, str]] = []
    headings: list[str] = []
    current: list[str] = []
    heading: tuple[int, list[str]] | None = None
    skipping: etree._Element | None = None
    in_content = 0

    def path() -> tuple[str, ...]:
        return tuple(name for _, name in stack)

    def flush() -> None:
        if current:
            out.add("".join(current), path())
            current.clear()

    def take(words: str | None) -> None:
        if words:
            (heading[1] if heading else current).append(words)

    walker = etree.iterwalk(root, events=("start", "end"))
    for event, element in walker:
        tag = _tag(element)
        if skipping is not None:
            if event == "end" and element is skipping:
                skipping = None
                if tag in _CONTENT or element.get("role") == "main":
                    in_content -= 1  # a table or pre read whole, counted at its start
                take(element.tail)
            continue
        if event == "start":
            if _skipped(element, in_content) or tag == "title":
                skipping = element
                if tag in _CONTENT or element.get("role") == "main":
                    in_content += 1  # balanced at its end, above
                continue
            if tag in _CONTENT or element.get("role") == "main":
                in_content += 1
            if tag in _HEADINGS:
                flush()
                heading = (_HEADINGS[tag], [])
            elif tag == "table" and not _is_layout(element):
                flush()
                _table(element, out, path())
                skipping = element
                continue
            elif tag == "pre":
                flush()
                out.add(element.xpath("string()"), path(), keep_lines=True)
                skipping = element
                continue
            elif tag in _BLOCK:
                flush()
            take(element.text)
            continue
        # end
        if tag in _CONTENT or element.get("role") == "main":
            in_content -= 1
        if heading is not None and tag in _HEADINGS:
            level, words = heading
            heading = None
            name = squash("".join(words))
            if name:
                while stack and stack[-1][0] >= level:
                    stack.pop()
                stack.append((level, name))
                headings.append(name)
        elif tag in _BLOCK:
            flush()
        take(element.tail)
    flush()
    title = page_title or (headings[0] if headings else fallback_title)
    if not out.blocks:  # headings, or the page's title, are all it says: they are the body
        for name in headings or ([page_title] if page_title else []):
            out.add(name, ())
    return out.document(title, "html", headings=headings)
