"""Excel, CSV and TSV: one section per sheet, one block per row, each cell beside its header,
rows numbered as the sheet numbers them; numbers as the sheet shows them."""

import datetime as dt

import pytest

from ragkit import parsing
from ragkit.chunking import chunk_document
from ragkit.parsing.sheets import cell_text
from tests.ragkit.parsing.samples import workbook
from tests.ragkit.test_chunking import tokenizer


def rows(doc: parsing.ParsedDocument) -> list[tuple[tuple[str, ...], int, str]]:
    return [(b.heading_path, b.row, doc.text[b.start : b.end]) for b in doc.blocks]


def test_each_row_is_searchable_with_its_column_headers() -> None:
    data = workbook(
        {
            "Capitals": [
                ["Quarterly capitals report"],
                [],
                ["Country", "Capital", "Population (M)"],
                ["France", "Paris", 2.1],
                ["Spain", "Madrid", None],
            ],
            "Empty": [],
            "Rivers": [["Seine"], ["Loire"]],
        }
    )
    doc = parsing.parse(data, "xlsx", "atlas")
    assert doc.headings == ["Capitals", "Rivers"]
    assert rows(doc) == [
        (("Capitals",), 1, "Quarterly capitals report"),
        (("Capitals",), 3, "Country | Capital | Population (M)"),
        (("Capitals",), 4, "Country: France | Capital: Paris | Population (M): 2.1"),
        (("Capitals",), 5, "Country: Spain | Capital: Madrid"),
        (("Rivers",), 1, "Seine"),
        (("Rivers",), 2, "Seine: Loire"),
    ]


def test_a_sheet_of_numbers_has_no_header() -> None:
    doc = parsing.parse(workbook({"Data": [[1, 2], [3, 4]]}), "xlsx", "data")
    assert [doc.text[b.start : b.end] for b in doc.blocks] == ["1 | 2", "3 | 4"]


def test_chunks_cite_the_sheet_and_the_rows_they_hold() -> None:
    table = [["Planet", "Moons"]] + [[f"Planet {n}", n] for n in range(200)]
    doc = parsing.parse(workbook({"Planets": table}), "xlsx", "planets")
    chunks = chunk_document(doc, tokenizer(), 128, 0.15)
    assert len(chunks) > 3
    assert chunks[0].heading_path == "Planets"
    assert chunks[0].location.startswith("rows 1-")
    assert chunks[-1].location.endswith("-201")


@pytest.mark.parametrize(
    ("value", "number_format", "shown"),
    [
        (0.01234, "0.00%", "1.23%"),
        (0.5, "0%", "50%"),
        (0.103, "0.00000", "0.10300"),
        (1234567.891, "#,##0.00", "1,234,567.89"),
        (42, "00000", "00042"),
        (4.89290024005183e17, "0", "489290024005183000"),
        (3.0, "General", "3"),
        (2.5, "", "2.5"),
        (True, "", "TRUE"),
        (dt.datetime(2011, 9, 15, 15, 22), "m/d/yy h:mm", "9/15/11 15:22"),
        (dt.datetime(2014, 12, 25), "dd/mm/yy", "25/12/14"),
        (dt.datetime(1940, 3, 29), "d-mmm-yyyy", "29-Mar-1940"),
        (
            dt.datetime(2020, 1, 2, 13, 45),
            "dddd, mmmm d, yyyy h:mm AM/PM",
            "Thursday, January 2, 2020 1:45 PM",
        ),
        (dt.datetime(2020, 1, 2), "[$-409]mmm\\-yy;@", "Jan-20"),
        (dt.datetime(2020, 1, 2, 8, 30), "General", "2020-01-02 08:30:00"),
        (dt.date(2020, 1, 2), "", "2020-01-02"),
        (dt.time(0, 0), "DD/MM/YY", "30/12/99"),  # a serial of 0: openpyxl's epoch
        (dt.time(11, 11, 11), "H:MM:SS;@", "11:11:11"),
        (None, "", ""),
    ],
)
def test_cells_read_as_the_sheet_shows_them(value: object, number_format: str, shown: str) -> None:
    assert cell_text(value, number_format) == shown


def test_csv_rows_with_quotes_and_newlines_and_the_delimiter_sniffed() -> None:
    data = b'Name;Motto\r\nAnn;"Carpe; diem"\r\nBob;"two\r\nlines"\r\n'
    doc = parsing.parse(data, "csv", "people")
    assert doc.title == "people"
    assert rows(doc) == [
        ((), 1, "Name | Motto"),
        ((), 2, "Name: Ann | Motto: Carpe; diem"),
        ((), 3, "Name: Bob | Motto: two lines"),
    ]


def test_tsv_is_split_on_tabs() -> None:
    doc = parsing.parse(b"city\tcountry\nLyon\tFrance\n", "tsv", "cities")
    assert rows(doc) == [((), 1, "city | country"), ((), 2, "city: Lyon | country: France")]


def test_a_csv_that_is_not_utf8_is_refused() -> None:
    with pytest.raises(parsing.DocumentError) as info:
        parsing.parse("caf\xe9,1\n".encode("latin-1"), "csv", "x")
    assert info.value.kind == parsing.INVALID_UTF8


def test_a_workbook_that_declares_shared_strings_it_lacks_is_read() -> None:
    """Writers that keep every string inline still declare the part; openpyxl refused it."""
    import io
    import zipfile

    source = zipfile.ZipFile(io.BytesIO(workbook({"S": [["Name", "Town"], ["Ann", "Lyon"]]})))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for member in source.infolist():
            if member.filename != "xl/sharedStrings.xml":
                body = source.read(member)
                if member.filename == "xl/worksheets/sheet1.xml":
                    body = body.replace(b't="s"', b't="inlineStr"')
                    for n, word in enumerate([b"Name", b"Town", b"Ann", b"Lyon"]):
                        body = body.replace(b"<v>%d</v>" % n, b"<is><t>" + word + b"</t></is>", 1)
                target.writestr(member, body)
    doc = parsing.parse(out.getvalue(), "xlsx", "inline")
    assert doc.text.endswith("Name: Ann | Town: Lyon")
