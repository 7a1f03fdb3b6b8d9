"""Word and PowerPoint: headings from styles and outline levels, tables by row with headers, text
boxes, content controls, notes, pages and slides a citation can show."""

import io

from ragkit import parsing
from ragkit.chunking import chunk_document
from tests.ragkit.parsing.samples import deck, docx_file, heading_styles, paragraph
from tests.ragkit.parsing.test_formats import blocks_text
from tests.ragkit.test_chunking import tokenizer


def docx(body: str, **parts: str) -> parsing.ParsedDocument:
    return parsing.parse(docx_file(body, **parts), "docx", "fallback")


def test_word_headings_come_from_heading_styles_the_title_and_outline_levels() -> None:
    styles = heading_styles(1, 2) + (
        '<w:style w:type="paragraph" w:styleId="Titel"><w:name w:val="Title"/></w:style>'
        '<w:style w:type="paragraph" w:styleId="Chapter"><w:name w:val="Chapter"/>'
        '<w:basedOn w:val="Heading1"/></w:style>'
    )
    body = (
        paragraph("Field Guide", "Titel")
        + paragraph("Birds", "Heading1")
        + paragraph("Herons wade.")
        + paragraph("Waders", "Heading2")
        + paragraph("Egrets too.")
        + '<w:p><w:pPr><w:outlineLvl w:val="1"/></w:pPr><w:r><w:t>Level two by outline</w:t>'
        "</w:r></w:p>"
        + paragraph("Under it.")
        + paragraph("Mammals", "Chapter")
        + paragraph("Otters swim.")
    )
    doc = docx(body, styles=styles)
    assert doc.title == "Field Guide"
    assert doc.headings == ["Field Guide", "Birds", "Waders", "Level two by outline", "Mammals"]
    assert blocks_text(doc) == [
        (("Field Guide", "Birds"), "Herons wade."),
        (("Field Guide", "Birds", "Waders"), "Egrets too."),
        (("Field Guide", "Birds", "Level two by outline"), "Under it."),
        (("Field Guide", "Mammals"), "Otters swim."),
    ]


def test_a_word_table_is_one_block_per_row_with_the_header_rows_names() -> None:
    def cell(text: str, properties: str = "") -> str:
        return f"<w:tc><w:tcPr>{properties}</w:tcPr>{paragraph(text)}</w:tc>"

    span, restart = '<w:gridSpan w:val="2"/>', '<w:vMerge w:val="restart"/>'
    table = (
        "<w:tbl>"
        f"<w:tr>{cell('Bird')}{cell('Wingspan', span)}</w:tr>"
        f"<w:tr>{cell('Heron')}{cell('1.8 m')}{cell('large')}</w:tr>"
        f"<w:tr>{cell('Egret', restart)}{cell('1.0 m')}{cell('')}</w:tr>"
        f"<w:tr>{cell('', '<w:vMerge/>')}{cell('0.9 m')}{cell('small')}</w:tr>"
        "</w:tbl>"
    )
    doc = docx(paragraph("Before.") + table)
    assert [doc.text[b.start : b.end] for b in doc.blocks] == [
        "Before.",
        "Bird | Wingspan | Wingspan",
        "Bird: Heron | Wingspan: 1.8 m | Wingspan: large",
        "Bird: Egret | Wingspan: 1.0 m",
        "Wingspan: 0.9 m | Wingspan: small",
    ]


def test_text_boxes_content_controls_and_tracked_changes_are_read_once() -> None:
    box = (
        "<w:p><w:r><w:t>Anchor text.</w:t></w:r><w:r><mc:AlternateContent><mc:Choice>"
        "<w:drawing><wps:txbx><w:txbxContent>" + paragraph("Inside the box.") + ""
        "</w:txbxContent></wps:txbx></w:drawing></mc:Choice><mc:Fallback><w:pict>"
        "<w:txbxContent>" + paragraph("Inside the box.") + "</w:txbxContent></w:pict>"
        "</mc:Fallback></mc:AlternateContent></w:r></w:p>"
    )
    control = (
        "<w:sdt><w:sdtContent>" + paragraph("In a content control.") + "</w:sdtContent></w:sdt>"
    )
    changes = (
        '<w:p><w:r><w:t xml:space="preserve">Kept </w:t></w:r><w:del><w:r><w:delText>gone'
        "</w:delText></w:r></w:del><w:ins><w:r><w:t>added</w:t></w:r></w:ins></w:p>"
    )
    doc = docx(box + control + changes)
    assert [doc.text[b.start : b.end] for b in doc.blocks] == [
        "Anchor text.",
        "Inside the box.",
        "In a content control.",
        "Kept added",
    ]


def test_footnotes_follow_the_body_and_pages_are_words_last_layout() -> None:
    notes = (
        '<w:footnote w:type="separator" w:id="-1"><w:p><w:r><w:t>---</w:t></w:r></w:p>'
        '</w:footnote><w:footnote w:id="1">' + paragraph("Herons are birds.") + "</w:footnote>"
    )
    body = (
        paragraph("Page one text.")
        + "<w:p><w:r><w:lastRenderedPageBreak/><w:t>Page two text.</w:t></w:r></w:p>"
        + paragraph("Still page two.")
    )
    doc = docx(body, footnotes=notes)
    assert doc.page_kind == "page"
    assert [(b.heading_path, b.page, doc.text[b.start : b.end]) for b in doc.blocks] == [
        ((), 1, "Page one text."),
        ((), 2, "Page two text."),
        ((), 2, "Still page two."),
        (("Footnotes",), 0, "Herons are birds."),
    ]


def test_a_document_word_never_laid_out_has_no_pages() -> None:
    doc = docx(paragraph("Text.") + '<w:p><w:r><w:br w:type="page"/><w:t>More.</w:t></w:r></w:p>')
    assert doc.page_kind == ""
    assert all(b.page == 0 for b in doc.blocks)


def test_a_document_written_by_python_docx_reads_back_with_its_structure() -> None:
    from docx import Document

    written = Document()
    written.add_heading("Report", 0)
    written.add_heading("Findings", 1)
    written.add_paragraph("Otters use tools.", style="List Bullet")
    table = written.add_table(rows=2, cols=2)
    for (r, c), text in {(0, 0): "Animal", (0, 1): "Tool", (1, 0): "Otter", (1, 1): "Rock"}.items():
        table.cell(r, c).text = text
    out = io.BytesIO()
    written.save(out)
    doc = parsing.parse(out.getvalue(), "docx", "f")
    assert doc.headings == ["Report", "Findings"]
    assert blocks_text(doc)[-1] == (("Report", "Findings"), "Animal: Otter | Tool: Rock")


def test_a_deck_is_one_section_per_slide_under_its_title_with_notes_and_tables() -> None:
    data = deck(
        [
            {"title": "Version Control", "bullets": ["SCCS, 1972", "RCS, 1982"], "notes": "Ask."},
            {"title": "Tools", "table": [["Tool", "Year"], ["Git", "2005"]]},
            {"title": "Tools", "bullets": ["Mercurial, 2005"]},
            {"title": None, "bullets": ["No title here"]},
        ]
    )
    doc = parsing.parse(data, "pptx", "history")
    assert doc.page_kind == "slide"
    assert doc.headings == ["Version Control", "Tools", "Tools"]
    assert [(b.page, b.heading_path, doc.text[b.start : b.end]) for b in doc.blocks] == [
        (1, ("Version Control",), "SCCS, 1972\nRCS, 1982"),
        (1, ("Version Control", "Speaker notes"), "Ask."),
        (2, ("Tools",), "Tool | Year"),
        (2, ("Tools",), "Tool: Git | Year: 2005"),
        (3, ("Tools",), "Mercurial, 2005"),
        (4, ("Slide 4",), "No title here"),
    ]
    chunks = chunk_document(doc, tokenizer(), 256, 0.15)
    # Two slides of one title are two sections: a chunk never spans slides.
    assert [c.location for c in chunks] == ["slide 1", "slide 1", "slide 2", "slide 3", "slide 4"]
