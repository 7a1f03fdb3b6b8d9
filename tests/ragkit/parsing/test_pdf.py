"""PDF through pypdfium2: page text in PDFium's order, every block on its page, headings from the
outline, scans reported as scans, encrypted files refused as such."""

import io

import pytest

from ragkit import parsing
from ragkit.chunking import chunk_document
from ragkit.parsing import DocumentError
from tests.ragkit.parsing.samples import (
    image_only_pdf,
    minimal_pdf,
    partly_scanned_pdf,
    pdf_file,
)
from tests.ragkit.test_chunking import tokenizer


def test_text_is_extracted_and_each_block_knows_its_page() -> None:
    data = pdf_file([["Sea otters hold hands while they sleep."], ["They use rocks as tools."]])
    doc = parsing.parse(data, "pdf", "otters")
    assert doc.title == "otters"
    assert doc.page_kind == "page"
    assert [(b.page, doc.text[b.start : b.end]) for b in doc.blocks] == [
        (1, "Sea otters hold hands while they sleep."),
        (2, "They use rocks as tools."),
    ]


def test_headings_come_from_the_outline_where_their_titles_are_on_the_page() -> None:
    data = pdf_file(
        [["Preface text."], ["1 Methods", "We counted otters."], ["More method.", "2 Results"]],
        outline=[("1 Methods", 1), ("2 Results", 2)],
    )
    doc = parsing.parse(data, "pdf", "report")
    assert doc.headings == ["1 Methods", "2 Results"]
    assert [(b.page, b.heading_path, doc.text[b.start : b.end]) for b in doc.blocks] == [
        (1, (), "Preface text."),
        (2, ("1 Methods",), "1 Methods\nWe counted otters."),
        (3, ("1 Methods",), "More method."),
        (3, ("2 Results",), "2 Results"),
    ]


def test_an_outline_entry_whose_title_is_not_on_its_page_starts_at_the_page_top() -> None:
    data = pdf_file([["Cover."], ["Body of chapter one."]], outline=[("Chapter One", 1)])
    doc = parsing.parse(data, "pdf", "book")
    assert [(b.page, b.heading_path) for b in doc.blocks] == [(1, ()), (2, ("Chapter One",))]


def test_chunks_cite_the_pages_they_span() -> None:
    lines = [f"Sentence {n} of the page about herons and their nests." for n in range(12)]
    doc = parsing.parse(pdf_file([lines, lines, lines]), "pdf", "herons")
    chunks = chunk_document(doc, tokenizer(), 128, 0.15)
    assert chunks[0].location == "page 1"
    assert any(c.location.startswith("pages ") for c in chunks)
    assert chunks[-1].location in ("page 3", "pages 2-3")


def test_the_title_comes_from_the_documents_information_without_a_nul() -> None:
    """Writers store the title in UTF-16, some with a NUL at its end: Postgres refuses a NUL in
    text, and once it failed every document of the batch (stage_failed)."""
    doc = parsing.parse(pdf_file([["Body."]], title="Field Notes\x00"), "pdf", "fallback")
    assert doc.title == "Field Notes"
    assert parsing.parse(pdf_file([["Body."]], title="Otters"), "pdf", "f").title == "Otters"


def test_a_scan_without_a_text_layer_is_refused_as_such() -> None:
    with pytest.raises(DocumentError) as info:
        parsing.parse(image_only_pdf(3), "pdf", "scan")
    assert info.value.kind == parsing.NO_TEXT_LAYER
    assert "3 page(s) are images" in info.value.message and "OCR" in info.value.message


def test_scanned_pages_beside_text_are_reported_and_the_text_is_kept() -> None:
    doc = parsing.parse(partly_scanned_pdf(), "pdf", "mixed")
    assert "Kingfishers dive" in doc.text
    assert doc.notes == [
        (
            parsing.NO_TEXT_LAYER,
            "page(s) 2 are images without a text layer (a scan?): their text is not searchable",
        )
    ]


def test_a_pdf_without_text_or_images_is_empty() -> None:
    with pytest.raises(DocumentError) as info:
        parsing.parse(pdf_file([[]]), "pdf", "blank")
    assert info.value.kind == parsing.EMPTY


def test_an_encrypted_pdf_is_refused_as_encrypted() -> None:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(minimal_pdf(["Secret otters."]))))
    writer.encrypt(user_password="hunter2", owner_password="owner", algorithm="AES-256")
    out = io.BytesIO()
    writer.write(out)
    with pytest.raises(DocumentError) as info:
        parsing.parse(out.getvalue(), "pdf", "locked")
    assert info.value.kind == parsing.ENCRYPTED


@pytest.mark.parametrize(
    ("data", "says"),
    [(b"hello", "no %PDF header"), (b"%PDF-1.7\n" + bytes(range(256)) * 40, "cannot read PDF")],
)
def test_what_is_not_a_pdf_is_a_parse_error(data: bytes, says: str) -> None:
    with pytest.raises(DocumentError) as info:
        parsing.parse(data, "pdf", "f")
    assert info.value.kind == parsing.PARSE_ERROR
    assert says in info.value.message
