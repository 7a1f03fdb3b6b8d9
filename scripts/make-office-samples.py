"""Writes the sample corpus' Office documents (written for the project; facts in the public record).

    .venv/bin/python scripts/make-office-samples.py

- corpus/history/the-metric-system.docx: headings (Heading 1/2), a table of the SI base units;
- corpus/technology/version-control.pptx: one slide per era, speaker notes, a comparison table;
- corpus/science/highest-mountains.xlsx: two sheets, a header row each.

Run once; the files are committed. Each file's content is fixed (no dates), so running it again
writes the same text.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "corpus"


def metric_system(target: Path) -> None:
    from docx import Document

    doc = Document()
    doc.core_properties.title = "The Metric System"
    doc.core_properties.author = "durable-rag"
    doc.add_heading("The Metric System", 0)
    doc.add_paragraph(
        "The metric system is a decimal system of measurement: every unit is related to the "
        "others by powers of ten. It began in revolutionary France and is now used, as the "
        "International System of Units, by almost every country in the world."
    )
    doc.add_heading("Origins", 1)
    doc.add_paragraph(
        "In 1791 the French Academy of Sciences proposed a new unit of length, the metre, defined "
        "as one ten-millionth of the distance from the North Pole to the equator along the "
        "meridian through Paris. The astronomers Jean-Baptiste Delambre and Pierre Méchain spent "
        "seven years surveying the arc between Dunkirk and Barcelona to fix its length."
    )
    doc.add_paragraph(
        "A platinum bar, the mètre des Archives, was made in 1799 to stand for the new metre, "
        "together with a platinum kilogram."
    )
    doc.add_heading("The Treaty of the Metre", 1)
    doc.add_paragraph(
        "On 20 May 1875 seventeen nations signed the Metre Convention in Paris. It created the "
        "International Bureau of Weights and Measures (BIPM), which keeps its laboratories at "
        "the Pavillon de Breteuil in Sèvres, near Paris."
    )
    doc.add_heading("The International System of Units", 1)
    doc.add_paragraph(
        "In 1960 the 11th General Conference on Weights and Measures named the modern form of "
        "the system the International System of Units, abbreviated SI. Since 20 May 2019 every "
        "SI unit is defined by fixing the value of a constant of nature, such as the speed of "
        "light or the Planck constant; the last physical artefact, the International Prototype "
        "of the Kilogram, was retired."
    )
    doc.add_heading("The seven base units", 2)
    units = [
        ("Quantity", "Unit", "Symbol"),
        ("length", "metre", "m"),
        ("mass", "kilogram", "kg"),
        ("time", "second", "s"),
        ("electric current", "ampere", "A"),
        ("thermodynamic temperature", "kelvin", "K"),
        ("amount of substance", "mole", "mol"),
        ("luminous intensity", "candela", "cd"),
    ]
    table = doc.add_table(rows=len(units), cols=3)
    table.style = "Table Grid"
    for r, row in enumerate(units):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    doc.save(target)


def version_control(target: Path) -> None:
    from pptx import Presentation
    from pptx.util import Inches

    deck = Presentation()
    deck.core_properties.title = "A Short History of Version Control"
    deck.core_properties.author = "durable-rag"

    def slide(title: str, bullets: list[str], notes: str) -> None:
        page = deck.slides.add_slide(deck.slide_layouts[1])
        page.shapes.title.text = title
        frame = page.placeholders[1].text_frame
        frame.text = bullets[0]
        for line in bullets[1:]:
            frame.add_paragraph().text = line
        page.notes_slide.notes_text_frame.text = notes

    cover = deck.slides.add_slide(deck.slide_layouts[0])
    cover.shapes.title.text = "A Short History of Version Control"
    cover.placeholders[1].text = "From SCCS to Git, 1972-2005"
    slide(
        "Early tools: SCCS and RCS",
        [
            "SCCS, the Source Code Control System, was written by Marc Rochkind at Bell Labs in "
            "1972.",
            "RCS, the Revision Control System, was released by Walter Tichy at Purdue "
            "University in 1982.",
            "Both kept the history of single files and locked a file while one person edited it.",
        ],
        "SCCS stored interleaved deltas; RCS stored reverse deltas, so the newest revision was "
        "the fastest to check out.",
    )
    slide(
        "Centralised: CVS and Subversion",
        [
            "CVS, the Concurrent Versions System, began in 1986 as shell scripts by Dick Grune.",
            "Subversion was started by CollabNet in 2000 as a better CVS, with atomic commits.",
            "Every commit went to one central server.",
        ],
        "CVS let several people edit the same file and merged their changes, instead of locking.",
    )
    slide(
        "Distributed: Git and Mercurial",
        [
            "Git was written by Linus Torvalds in April 2005 for the Linux kernel, after the "
            "free licence of BitKeeper was withdrawn.",
            "Mercurial was released by Matt Mackall in the same month, for the same reason.",
            "Every clone holds the whole history; commits are named by their hashes.",
        ],
        "Git's first commit, of 7 April 2005, describes it as 'the information manager from hell'.",
    )
    compare = deck.slides.add_slide(deck.slide_layouts[5])
    compare.shapes.title.text = "The tools side by side"
    rows = [
        ("Tool", "Year", "Model", "Author"),
        ("SCCS", "1972", "single files, locking", "Marc Rochkind"),
        ("RCS", "1982", "single files, locking", "Walter Tichy"),
        ("CVS", "1986", "centralised", "Dick Grune"),
        ("Subversion", "2000", "centralised", "CollabNet"),
        ("Git", "2005", "distributed", "Linus Torvalds"),
        ("Mercurial", "2005", "distributed", "Matt Mackall"),
    ]
    grid = compare.shapes.add_table(
        len(rows), 4, Inches(0.5), Inches(1.6), Inches(9), Inches(4)
    ).table
    for r, row in enumerate(rows):
        for c, value in enumerate(row):
            grid.cell(r, c).text = value
    deck.save(target)


def highest_mountains(target: Path) -> None:
    from openpyxl import Workbook

    book = Workbook()
    book.properties.title = "The Highest Mountains"
    book.properties.creator = "durable-rag"
    eight = book.active
    eight.title = "Eight-thousanders"
    eight.append(["Mountain", "Height (m)", "Range", "Countries", "First ascent"])
    for row in [
        ("Mount Everest", 8849, "Himalaya", "Nepal, China", 1953),
        ("K2", 8611, "Karakoram", "Pakistan, China", 1954),
        ("Kangchenjunga", 8586, "Himalaya", "Nepal, India", 1955),
        ("Lhotse", 8516, "Himalaya", "Nepal, China", 1956),
        ("Makalu", 8485, "Himalaya", "Nepal, China", 1955),
        ("Cho Oyu", 8188, "Himalaya", "Nepal, China", 1954),
        ("Dhaulagiri", 8167, "Himalaya", "Nepal", 1960),
        ("Manaslu", 8163, "Himalaya", "Nepal", 1956),
        ("Nanga Parbat", 8126, "Himalaya", "Pakistan", 1953),
        ("Annapurna", 8091, "Himalaya", "Nepal", 1950),
    ]:
        eight.append(list(row))
    summits = book.create_sheet("Seven Summits")
    summits.append(["Continent", "Summit", "Height (m)"])
    for row in [
        ("Asia", "Mount Everest", 8849),
        ("South America", "Aconcagua", 6961),
        ("North America", "Denali", 6190),
        ("Africa", "Kilimanjaro", 5895),
        ("Europe", "Mount Elbrus", 5642),
        ("Antarctica", "Vinson Massif", 4892),
        ("Australia", "Mount Kosciuszko", 2228),
    ]:
        summits.append(list(row))
    book.save(target)


if __name__ == "__main__":
    metric_system(CORPUS / "history" / "the-metric-system.docx")
    version_control(CORPUS / "technology" / "version-control.pptx")
    highest_mountains(CORPUS / "science" / "highest-mountains.xlsx")
    print("written: the-metric-system.docx, version-control.pptx, highest-mountains.xlsx")
