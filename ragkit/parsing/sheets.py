"""Spreadsheets: Excel (.xlsx, .xlsm) through openpyxl, and CSV/TSV through the csv module.

One section per sheet, one block per row, each cell beside its column's header:
`Country: France | Capital: Paris`, so a search for a fact in a cell finds the row with what the
cell means. A citation shows the sheet and the row, numbered as the spreadsheet numbers them.

The header is the first row that is all text; a lone cell over a wider table is its caption, and
the header is looked for on the row below. A sheet whose first row holds numbers has no header:
its rows are their cells, `France | Paris`.
"""

from __future__ import annotations

import calendar
import csv
import datetime as dt
import io
import re
import zipfile
from collections.abc import Iterable, Sequence
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from ragkit.parsing.archive import open_office_zip
from ragkit.parsing.model import PARSE_ERROR, DocumentError, ParsedDocument
from ragkit.parsing.text import TextBuilder, decode, row_text, squash

# csv's default field limit is 128 KB; a cell may hold a long text, but not more than this.
MAX_FIELD_CHARS = 8 * 1024 * 1024


# A number format's first section, as digits: `0.00%`, `#,##0.00`, `00000`. Other formats
# (currencies, fractions) show the number.
_NUMBER_FORMAT = re.compile(r"^([#,0]*)(?:\.([0#]+))?(%?)$")
# A date format's pieces: quoted text, escaped characters, codes in brackets (colours, locales),
# the date and time codes, and any other character, shown as it is.
_DATE_PARTS = re.compile(
    r'"[^"]*"|\\.|\[[^\]]*\]|[_*].|am/pm|a/p|y{3,4}|y{1,2}|m{1,5}|d{1,4}|h{1,2}|s{1,2}|.',
    re.I,
)


def _formatted(value: float, number_format: str) -> str | None:
    section = re.sub(r'"[^"]*"|\[[^\]]*\]|\\.|[_*].', "", number_format.split(";", 1)[0])
    match = _NUMBER_FORMAT.match(section.strip())
    if match is None or not (match.group(1) or match.group(2)):
        return None
    whole, decimals, percent = match.groups()
    places = len(decimals or "")
    # Excel keeps 15 significant digits: 4.89290024005183E+17 shows as 489290024005183000.
    shown = Decimal(f"{value * 100 if percent else value:.15g}").quantize(
        Decimal(1).scaleb(-places),
        rounding=ROUND_HALF_UP,  # Excel rounds halves up
    )
    if percent:
        return f"{shown:.{places}f}%"
    grouped = "," if "," in whole else ""
    if not places and not grouped and whole.count("0") > 1 and shown == shown.to_integral_value():
        return f"{int(shown):0{whole.count('0')}d}"  # zero-padded codes: 00042
    return f"{shown:{grouped}.{places}f}"


def _date_formatted(value: dt.date | dt.time, number_format: str) -> str | None:
    """A date or time as Excel shows it in its cell's format (`d-mmm-yyyy`: `29-Mar-1940`), or
    None for a format without date codes. Month and day names are English."""
    parts = _DATE_PARTS.findall(number_format.split(";", 1)[0])
    codes = [p.lower() for p in parts if p[:1].lower() in "ymdhs" or p.lower() in ("am/pm", "a/p")]
    if not codes:
        return None
    moment = value if isinstance(value, dt.datetime) else None
    # A time in a date format is a serial under 1: a time on day 0, 1899-12-30 (openpyxl's epoch).
    day = value if isinstance(value, dt.date) else dt.date(1899, 12, 30)
    clock = moment.time() if moment else (value if isinstance(value, dt.time) else dt.time())
    twelve = any(c in ("am/pm", "a/p") for c in codes)
    shown: list[str] = []
    for i, part in enumerate(parts):
        code = part.lower()
        before = [p.lower() for p in parts[:i] if p[:1].lower() in "ymdhs"]
        after = [p.lower() for p in parts[i + 1 :] if p[:1].lower() in "ymdhs"]
        if part.startswith('"'):
            shown.append(part[1:-1])
        elif part.startswith("\\"):
            shown.append(part[1:])
        elif part.startswith(("[", "_", "*")):
            continue  # a colour, a locale, padding
        elif code[0] == "y":
            shown.append(f"{day.year:04d}" if len(code) > 2 else f"{day.year % 100:02d}")
        elif (
            code[0] == "m"
            and len(code) <= 2
            and ((before and before[-1][0] == "h") or (after and after[0][0] == "s"))
        ):
            shown.append(f"{clock.minute:0{len(code)}d}")
        elif code[0] == "m":
            names = (calendar.month_abbr, calendar.month_name, calendar.month_name)
            shown.append(
                f"{day.month:0{len(code)}d}"
                if len(code) <= 2
                else names[len(code) - 3][day.month][: 1 if len(code) == 5 else None]
            )
        elif code[0] == "d":
            weekday = (calendar.day_abbr, calendar.day_name)
            shown.append(
                f"{day.day:0{len(code)}d}"
                if len(code) <= 2
                else weekday[len(code) - 3][day.weekday()]
            )
        elif code[0] == "h":
            hour = (clock.hour % 12 or 12) if twelve else clock.hour
            shown.append(f"{hour:0{len(code)}d}")
        elif code[0] == "s":
            shown.append(f"{clock.second:0{len(code)}d}")
        elif code in ("am/pm", "a/p"):
            half = "AM" if clock.hour < 12 else "PM"
            shown.append(half if code == "am/pm" else half[0])
        else:
            shown.append(part)
    return "".join(shown).strip() or None


def cell_text(value: Any, number_format: str = "") -> str:
    """A cell's value as a person reads it in the sheet: numbers and dates in the cell's number
    format (decimals, percent, thousands, zero padding; `dd/mm/yy`, `d-mmm-yyyy`), dates in ISO
    8601 where the format says nothing of them."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int | float) and number_format not in ("", "General"):
        shown = _formatted(value, number_format)
        if shown is not None:
            return shown
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return f"{value:.15g}"
    if isinstance(value, dt.date | dt.time) and number_format not in ("", "General"):
        shown = _date_formatted(value, number_format)
        if shown is not None:
            return shown
    if isinstance(value, dt.datetime):
        return value.date().isoformat() if value.time() == dt.time() else value.isoformat(" ")
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    return squash(str(value))


class _Sheet:
    """Rows of one sheet into blocks: finds the header, then writes each row beside it."""

    def __init__(self, out: TextBuilder, path: tuple[str, ...]) -> None:
        self.out = out
        self.path = path
        self.header: list[str] | None = None
        self.deciding = True
        # A first row of one text cell: the caption over a table, or a one-column table's header.
        self.lone: list[str] | None = None

    def row(self, number: int, cells: Sequence[str], raw: Sequence[Any]) -> None:
        filled = [c for c in cells if c]
        if not filled:
            return
        if self.deciding:
            texts = all(isinstance(v, str) for v, c in zip(raw, cells, strict=False) if c)
            if texts and len(filled) == 1 and self.lone is None:
                self.lone = list(cells)
                self.out.add(filled[0], self.path, row=number)
                return
            self.deciding = False
            if texts and (len(filled) > 1 or self.lone is None):
                self.header = list(cells)
                self.out.add(" | ".join(filled), self.path, row=number)
                return
            if self.lone is not None and len(filled) == 1:
                self.header = self.lone
        self.out.add(row_text(self.header, cells), self.path, row=number)


def _trimmed(values: Iterable[Any]) -> list[Any]:
    row = list(values)
    while row and (row[-1] is None or row[-1] == ""):
        row.pop()
    return row


_SHARED_STRINGS = "xl/sharedStrings.xml"
_EMPTY_SHARED_STRINGS = (
    b'<sst xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" count="0" '
    b'uniqueCount="0"/>'
)


def _with_shared_strings(data: bytes) -> bytes:
    """The workbook with an empty shared strings part: writers that keep every string inline
    still declare the part, and openpyxl refuses a workbook that lacks it (Excel opens it)."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w") as target:
        for member in source.infolist():
            target.writestr(member, source.read(member))
        target.writestr(_SHARED_STRINGS, _EMPTY_SHARED_STRINGS)
    return out.getvalue()


def _open_workbook(data: bytes) -> Any:
    import openpyxl

    for attempt in range(2):
        try:
            return openpyxl.load_workbook(
                io.BytesIO(data), read_only=True, data_only=True, keep_links=False
            )
        except KeyError as exc:
            if attempt or _SHARED_STRINGS not in str(exc):
                raise DocumentError(PARSE_ERROR, f"cannot read the Excel workbook: {exc}") from None
            data = _with_shared_strings(data)
        except Exception as exc:  # openpyxl raises ValueError, zipfile and XML errors
            raise DocumentError(PARSE_ERROR, f"cannot read the Excel workbook: {exc}") from None
    raise AssertionError("unreachable")


def parse_xlsx(data: bytes, fallback_title: str) -> ParsedDocument:
    open_office_zip(data, "Excel workbook", ".xlsx")
    out = TextBuilder()
    names: list[str] = []
    workbook = _open_workbook(data)
    try:
        for sheet in workbook.worksheets:
            # The sheet's declared dimension may be wrong (writers other than Excel): read
            # every row it has, not the rows it claims.
            sheet.reset_dimensions()
            rows = _Sheet(out, (squash(sheet.title) or "Sheet",))
            before = len(out.blocks)
            for number, cells in enumerate(sheet.iter_rows(), start=1):
                raw = _trimmed(getattr(c, "value", None) for c in cells)
                formats = [getattr(c, "number_format", "") or "" for c in cells]
                texts = [cell_text(v, f) for v, f in zip(raw, formats, strict=False)]
                row_number = next((c.row for c in cells if getattr(c, "row", None)), number)
                rows.row(row_number, texts, raw)
            if len(out.blocks) > before:
                names.append(rows.path[0])
        title = squash(workbook.properties.title or "") or fallback_title
    except DocumentError:
        raise
    except Exception as exc:
        raise DocumentError(PARSE_ERROR, f"cannot read the Excel workbook: {exc}") from None
    finally:
        workbook.close()
    return out.document(title, "xlsx", headings=names)


def parse_csv(data: bytes, fallback_title: str) -> ParsedDocument:
    return parse_delimited(data, fallback_title, "csv")


def parse_tsv(data: bytes, fallback_title: str) -> ParsedDocument:
    return parse_delimited(data, fallback_title, "tsv")


def parse_delimited(data: bytes, fallback_title: str, content_type: str) -> ParsedDocument:
    """CSV (the delimiter sniffed among `,;|` and tab) or TSV (tab)."""
    text = decode(data)
    delimiter = "\t"
    if content_type == "csv":
        try:
            delimiter = csv.Sniffer().sniff(text[:65_536], delimiters=",;\t|").delimiter
        except csv.Error:
            delimiter = ","
    previous = csv.field_size_limit(MAX_FIELD_CHARS)
    out = TextBuilder()
    rows = _Sheet(out, ())
    try:
        for number, record in enumerate(
            csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=False), start=1
        ):
            cells = _trimmed(squash(cell) for cell in record)
            raw: list[Any] = [_number(c) for c in cells]
            rows.row(number, cells, raw)
    except csv.Error as exc:
        raise DocumentError(PARSE_ERROR, f"cannot read the {content_type.upper()}: {exc}") from None
    finally:
        csv.field_size_limit(previous)
    return out.document(fallback_title, content_type)


def _number(cell: str) -> Any:
    """A CSV cell as a spreadsheet would type it: numbers are not header text."""
    try:
        return float(cell.replace(",", "")) if cell else None
    except ValueError:
        return cell
