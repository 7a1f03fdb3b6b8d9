"""Documents the parsing tests build: PDFs and Word files written byte by byte (so the parser is
not tested against its own library's writer), decks and workbooks through python-pptx and
openpyxl where hand-written XML would be most of the test, and the hostile archives."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Sequence

W_NS = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"


def pdf_file(
    pages: Sequence[Sequence[str]],
    outline: Sequence[tuple[str, int]] = (),
    title: str | None = None,
) -> bytes:
    """A PDF whose pages show these lines (Helvetica), with an outline of (title, page index)
    entries at one level, and a `title` in its information dictionary (UTF-16, as most writers
    store it). No PDF writer ships text support, so it is written by hand."""
    objects: list[bytes] = []

    def add(body: bytes) -> int:
        objects.append(body)
        return len(objects)

    catalog = add(b"")  # filled in below
    pages_ref = add(b"")
    font = add(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    page_refs = []
    for lines in pages:
        escaped = [line.replace("(", "\\(").replace(")", "\\)") for line in lines]
        text = " ".join(f"({line}) Tj 0 -16 Td" for line in escaped)
        stream = f"BT /F1 12 Tf 72 720 Td {text} ET".encode()
        content = add(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
        page_refs.append(
            add(
                b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
                b"/Resources << /Font << /F1 %d 0 R >> >> >>" % (pages_ref, content, font)
            )
        )
    kids = b" ".join(b"%d 0 R" % r for r in page_refs)
    objects[pages_ref - 1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, len(page_refs))
    outlines = b""
    if outline:
        root = add(b"")
        items = []
        for _ in outline:
            items.append(add(b""))
        for n, ((title, page), ref) in enumerate(zip(outline, items, strict=True)):
            links = b""
            if n > 0:
                links += b" /Prev %d 0 R" % items[n - 1]
            if n + 1 < len(items):
                links += b" /Next %d 0 R" % items[n + 1]
            objects[ref - 1] = b"<< /Title (%s) /Parent %d 0 R /Dest [%d 0 R /XYZ 0 792 0]%s >>" % (
                title.encode(),
                root,
                page_refs[page],
                links,
            )
        objects[root - 1] = b"<< /Type /Outlines /First %d 0 R /Last %d 0 R /Count %d >>" % (
            items[0],
            items[-1],
            len(items),
        )
        outlines = b" /Outlines %d 0 R" % root
    objects[catalog - 1] = b"<< /Type /Catalog /Pages %d 0 R%s >>" % (pages_ref, outlines)
    info = b""
    if title is not None:
        encoded = ("\ufeff" + title).encode("utf-16-be").hex().upper().encode()
        info = b" /Info %d 0 R" % add(b"<< /Title <%s> >>" % encoded)
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root %d 0 R%s >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        catalog,
        info,
        xref,
    )
    return bytes(out)


def minimal_pdf(lines: list[str]) -> bytes:
    """A one-page PDF with real text."""
    return pdf_file([lines])


def image_only_pdf(pages: int = 1) -> bytes:
    """A PDF whose pages are one image each and no text: a scan without OCR."""
    import pypdfium2 as pdfium
    from PIL import Image

    pdf = pdfium.PdfDocument.new()
    image = Image.new("L", (60, 20), 255)
    for _ in range(pages):
        page = pdf.new_page(200, 100)
        bitmap = pdfium.PdfBitmap.from_pil(image)
        picture = pdfium.PdfImage.new(pdf)
        picture.set_bitmap(bitmap)
        picture.set_matrix(pdfium.PdfMatrix().scale(60, 20))
        page.insert_obj(picture)
        page.gen_content()
    out = io.BytesIO()
    pdf.save(out)
    return out.getvalue()


def zip_of(parts: dict[str, bytes | str], compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression) as archive:
        for name, body in parts.items():
            archive.writestr(name, body)
    return out.getvalue()


def docx_file(body: str, styles: str = "", footnotes: str = "", prolog: str = "") -> bytes:
    """A Word file from the XML of its body (`<w:p>`, `<w:tbl>`...), written by hand."""
    rels = (
        '<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxml'
        'formats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.'
        'openxmlformats.org/officeDocument/2006/relationships/officeDocument" '
        'Target="word/document.xml"/></Relationships>'
    )
    document_rels = [
        '<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    ]
    overrides = [
        '<Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/>'
    ]
    parts: dict[str, bytes | str] = {}
    if styles:
        document_rels.append(
            '<Relationship Id="rId2" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/styles" Target="styles.xml"/>'
        )
        overrides.append(
            '<Override PartName="/word/styles.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.styles+xml"/>'
        )
        parts["word/styles.xml"] = (
            f'<?xml version="1.0" encoding="UTF-8"?><w:styles xmlns:w="{W_NS}">{styles}</w:styles>'
        )
    if footnotes:
        document_rels.append(
            '<Relationship Id="rId3" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/footnotes" Target="footnotes.xml"/>'
        )
        overrides.append(
            '<Override PartName="/word/footnotes.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.footnotes+xml"/>'
        )
        parts["word/footnotes.xml"] = (
            f'<?xml version="1.0" encoding="UTF-8"?><w:footnotes xmlns:w="{W_NS}">{footnotes}</w:footnotes>'
        )
    document_rels.append("</Relationships>")
    content_types = (
        '<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/'
        'package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.'
        'openxmlformats-package.relationships+xml"/><Default Extension="xml" '
        f'ContentType="application/xml"/>{"".join(overrides)}</Types>'
    )
    document = (
        f'<?xml version="1.0" encoding="UTF-8"?>{prolog}<w:document xmlns:w="{W_NS}" '
        'xmlns:mc="http://schemas.openxmlformats.org/markup-compatibility/2006" '
        'xmlns:wps="http://schemas.microsoft.com/office/word/2010/wordprocessingShape">'
        f"<w:body>{body}</w:body></w:document>"
    )
    return zip_of(
        {
            "[Content_Types].xml": content_types,
            "_rels/.rels": rels,
            "word/document.xml": document,
            "word/_rels/document.xml.rels": "".join(document_rels),
            **parts,
        }
    )


def paragraph(text: str, style: str = "", extra: str = "") -> str:
    properties = f'<w:pPr><w:pStyle w:val="{style}"/></w:pPr>' if style else ""
    return f'<w:p>{properties}<w:r>{extra}<w:t xml:space="preserve">{text}</w:t></w:r></w:p>'


def heading_styles(*levels: int) -> str:
    """Styles `Heading<n>` named "heading n", as Word writes them."""
    return "".join(
        f'<w:style w:type="paragraph" w:styleId="Heading{n}"><w:name w:val="heading {n}"/></w:style>'
        for n in levels
    )


def billion_laughs(root: str) -> str:
    """An XML prolog declaring entities that expand a billion-fold, and a root that uses them."""
    entities = '<!ENTITY lol "lol">' + "".join(
        f'<!ENTITY lol{i} "{("&lol" + (str(i - 1) if i > 1 else "") + ";") * 10}">'
        for i in range(1, 10)
    )
    return f"<!DOCTYPE {root} [{entities}]>"


def deck(slides: Sequence[dict[str, object]]) -> bytes:
    """A PowerPoint deck: each slide a dict of `title`, `bullets`, `notes`, `table` (rows)."""
    from pptx import Presentation
    from pptx.util import Inches

    presentation = Presentation()
    for spec in slides:
        layout = presentation.slide_layouts[1 if spec.get("bullets") else 5]
        slide = presentation.slides.add_slide(layout)
        if spec.get("title") is not None:
            slide.shapes.title.text = str(spec["title"])
        bullets = spec.get("bullets")
        if bullets:
            frame = slide.placeholders[1].text_frame
            frame.text = str(bullets[0])  # type: ignore[index]
            for line in bullets[1:]:  # type: ignore[index]
                frame.add_paragraph().text = str(line)
        rows = spec.get("table")
        if rows:
            grid = slide.shapes.add_table(
                len(rows),
                len(rows[0]),
                Inches(1),
                Inches(2),
                Inches(6),
                Inches(2),  # type: ignore[arg-type, index]
            ).table
            for r, row in enumerate(rows):  # type: ignore[arg-type]
                for c, value in enumerate(row):
                    grid.cell(r, c).text = str(value)
        if spec.get("notes"):
            slide.notes_slide.notes_text_frame.text = str(spec["notes"])
    out = io.BytesIO()
    presentation.save(out)
    return out.getvalue()


def workbook(sheets: dict[str, Sequence[Sequence[object]]]) -> bytes:
    """An Excel workbook of these sheets' rows (None: an empty cell)."""
    from openpyxl import Workbook

    book = Workbook()
    book.remove(book.active)
    for name, rows in sheets.items():
        sheet = book.create_sheet(name)
        for row in rows:
            sheet.append(list(row))
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def partly_scanned_pdf() -> bytes:
    """Two pages: one of text, then one that is only an image."""
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(minimal_pdf(["Kingfishers dive from a perch to catch fish."]))
    pdf.import_pages(pdfium.PdfDocument(image_only_pdf(1)))
    out = io.BytesIO()
    pdf.save(out)
    return out.getvalue()
