"""The reference corpus of bench/intake.py: public documents with a reference text each.

    .venv/bin/python bench/intake_corpus.py fetch       # the documents, into .data/intake-corpus
    .venv/bin/python bench/intake_corpus.py references  # rebuild bench/data/intake/reference/

Every document is a file that a public package ships, named in `bench/data/intake/manifest.json`
by source and path, with its SHA-256: the test files of python-docx, PyDocX and python-pptx,
xlsx2csv (whose tests ship the CSV it expects of each workbook), pyexcel-xlsx and tablib; PDFs
and Markdown that pypdf, pdfminer.six and markdown-it-py ship (the CommonMark spec among them);
and, from Debian, the Python 3.11 library reference (HTML) and the LaTeX base documentation
(PDFs with outlines). Nothing is generated here, and no reference comes from a library under
test. `fetch` downloads each source once (PyPI's sdists, Debian's .debs) and checks every hash.

Each document's reference (`reference/<id>.json`) holds what a reader finds in it, made once by
`references` with readers that are not the ones measured, and checked by hand on a sample:
- `text`: Word and PowerPoint: every text run of the file's XML (`w:t`, `a:t`; the body,
  footnotes and endnotes; slides and their notes without slide numbers, dates and footers;
  without the fallback copy of a drawing), read with the standard library. Excel: xlsx2csv's CSV
  of every sheet. CSV: the file. PDF: poppler's `pdftotext`. HTML: the visible text of the page's
  main content (Sphinx's `role="main"`, else the body), read with BeautifulSoup on the standard
  library's html.parser. Markdown: pandoc's plain-text rendering of the CommonMark.
- `headings`: Word: pandoc's headers and the Title; PowerPoint: the slides' title placeholders;
  Excel: the names of the sheets that hold cells; PDF: the outline's entries (pypdf); HTML: the
  main content's h1-h6; Markdown: pandoc's headers.
- `cells`: the non-empty table cells (Word: pandoc's tables; PowerPoint: `a:tc`; HTML: td/th;
  Excel and CSV: every cell).
- `phrase`: six words around the corpus' rarest word of the document: what bench/intake.py
  searches for.
- `expect`: "accept", or "refuse:<kind>" for a document that has nothing to read (a scan without
  a text layer, an encrypted PDF, a legacy binary format).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import urllib.request
import zipfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "bench" / "data" / "intake"
MANIFEST = DATA / "manifest.json"
REFERENCES = DATA / "reference"
CACHE = ROOT / ".data" / "intake-corpus"
PYPI = "https://pypi.org/simple/{name}/"


@dataclass(frozen=True)
class Document:
    id: str
    source: str
    member: str
    sha256: str
    bytes: int

    @property
    def format(self) -> str:
        return self.id.split("/", 1)[0]

    @property
    def file_name(self) -> str:
        """The name it is ingested under: its own, made unique by its id."""
        return self.id.replace("/", "__") + Path(self.member).suffix


def manifest() -> tuple[dict[str, dict[str, str]], list[Document]]:
    raw = json.loads(MANIFEST.read_text())
    return raw["sources"], [Document(**d) for d in raw["documents"]]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _download(url: str, target: Path) -> None:
    partial = target.with_suffix(target.suffix + ".partial")
    with urllib.request.urlopen(url, timeout=300) as answer, partial.open("wb") as out:
        shutil.copyfileobj(answer, out)
    partial.replace(target)


def _pypi_url(file_name: str) -> str:
    name = re.split(r"-\d", file_name, maxsplit=1)[0]
    request = urllib.request.Request(
        PYPI.format(name=name), headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        files = json.load(answer)["files"]
    return next(f["url"] for f in files if f["filename"] == file_name)


def _source_archive(name: str, source: dict[str, str]) -> Path:
    CACHE.mkdir(parents=True, exist_ok=True)
    target = CACHE / source["file"]
    if not target.exists() or _sha256(target) != source["sha256"]:
        url = source.get("url") or _pypi_url(source["file"])
        print(f"  downloading {name}: {url}", file=sys.stderr)
        _download(url, target)
        if _sha256(target) != source["sha256"]:
            raise SystemExit(f"{target}: SHA-256 differs from the manifest's")
    return target


def _tar(archive: Path, kind: str) -> tarfile.TarFile:
    """The archive's files: a .deb's data (through dpkg-deb), or the tarball itself."""
    if kind == "deb":
        tar_bytes = subprocess.run(
            ["dpkg-deb", "--fsys-tarfile", str(archive)], check=True, capture_output=True
        ).stdout
        return tarfile.open(fileobj=io.BytesIO(tar_bytes))
    return tarfile.open(archive)


def _members(archive: Path, kind: str, wanted: set[str]) -> dict[str, bytes]:
    prefix = "./" if kind == "deb" else ""
    found: dict[str, bytes] = {}
    with _tar(archive, kind) as opened:
        for info in opened:
            name = info.name.removeprefix(prefix)
            if name in wanted and info.isfile():
                extracted = opened.extractfile(info)
                assert extracted is not None
                found[name] = extracted.read()
    return found


def fetch() -> dict[str, Path]:
    """Every document of the manifest in CACHE/docs, named `Document.file_name`; path by id."""
    sources, documents = manifest()
    folder = CACHE / "docs"
    folder.mkdir(parents=True, exist_ok=True)
    paths = {d.id: folder / d.file_name for d in documents}
    missing = [d for d in documents if not paths[d.id].exists()]
    for name in sorted({d.source for d in missing}):
        wanted = {d.member for d in missing if d.source == name}
        archive = _source_archive(name, sources[name])
        found = _members(archive, sources[name]["kind"], wanted)
        for document in (d for d in missing if d.source == name):
            data = found.get(document.member)
            if data is None:
                raise SystemExit(f"{name} has no {document.member}")
            if hashlib.sha256(data).hexdigest() != document.sha256:
                raise SystemExit(f"{document.id}: SHA-256 differs from the manifest's")
            paths[document.id].write_bytes(data)
    return paths


# --- references (run once; needs pandoc, pdftotext, xlsx2csv and pypdf) ------------------------

W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
W_STRICT = "{http://purl.oclc.org/ooxml/wordprocessingml/main}"  # ISO 29500 strict
A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
P = "{http://schemas.openxmlformats.org/presentationml/2006/main}"
MC_FALLBACK = "{http://schemas.openxmlformats.org/markup-compatibility/2006}Fallback"
WORD = re.compile(r"\w+")


def _runs(element: ElementTree.Element, tag: str, skip: set[str]) -> list[str]:
    """Text of every `tag` under `element`, in order, outside subtrees tagged in `skip`; a tab
    or a line break reads as a space."""
    found: list[str] = []
    spaces = {tag.replace("}t", "}tab"), tag.replace("}t", "}br"), tag.replace("}t", "}cr")}

    def walk(node: ElementTree.Element) -> None:
        if node.tag in skip:
            return
        if node.tag == tag:
            found.append(node.text or "")
        elif node.tag in spaces:
            found.append(" ")
        for child in node:
            walk(child)

    walk(element)
    return found


def _pandoc_json(path: Path, reader: str) -> dict[str, Any]:
    """Pandoc's document, or an empty one where pandoc cannot read the file (strict OOXML)."""
    out = subprocess.run(["pandoc", "-f", reader, "-t", "json", str(path)], capture_output=True)
    return json.loads(out.stdout) if out.returncode == 0 else {"blocks": []}


def _pandoc_text(inlines: Any) -> str:
    """Plain text of pandoc inlines or blocks."""
    words: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            kind = node.get("t")
            if kind == "Str":
                words.append(node["c"])
            elif kind in ("Space", "SoftBreak", "LineBreak"):
                words.append(" ")
            elif kind in ("Code", "Math"):
                words.append(node["c"][-1])
            elif kind in ("Para", "Plain", "Header"):
                walk(node["c"])
                words.append(" ")  # blocks are apart
            elif "c" in node:
                walk(node["c"])
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(inlines)
    return " ".join("".join(words).split())


def _pandoc_structure(doc: dict[str, Any]) -> tuple[list[str], list[str]]:
    headings: list[str] = []
    cells: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("t") == "Header":
                headings.append(_pandoc_text(node["c"][2]))
            elif node.get("t") == "Table":
                for cell in _table_cells(node["c"]):
                    cells.append(cell)
                return
            if "c" in node:
                walk(node["c"])
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(doc["blocks"])
    title = doc.get("meta", {}).get("title")
    if title:
        headings.insert(0, _pandoc_text(title.get("c")))
    return [h for h in headings if h], [c for c in cells if c]


def _table_cells(table: list[Any]) -> list[str]:
    """Pandoc's Table: [attr, caption, colspecs, head, bodies, foot]; a cell is
    [attr, alignment, rowspan, colspan, blocks]."""
    found: list[str] = []

    def rows(rows_: list[Any]) -> None:
        for _, cells in rows_:
            for cell in cells:
                found.append(_pandoc_text(cell[4]))

    rows(table[3][1])
    for body in table[4]:
        rows(body[2])
        rows(body[3])
    rows(table[5][1])
    return found


def _docx_reference(path: Path) -> dict[str, Any]:
    archive = zipfile.ZipFile(path)
    texts: list[str] = []
    for part in ("word/document.xml", "word/footnotes.xml", "word/endnotes.xml"):
        if part not in archive.namelist():
            continue
        root = ElementTree.fromstring(archive.read(part))
        # Paragraphs in the fallback copy of a drawing repeat those of its choice: left out.
        fallback = {id(p) for f in root.iter(MC_FALLBACK) for p in f.iter()}
        for w in (W, W_STRICT):
            for paragraph in root.iter(f"{w}p"):
                if id(paragraph) in fallback:
                    continue
                skip = {MC_FALLBACK, f"{w}txbxContent"}
                texts.append("".join(_runs(paragraph, f"{w}t", skip)))
    headings, cells = _pandoc_structure(_pandoc_json(path, "docx"))
    return {"text": "\n".join(texts), "headings": headings, "cells": cells}


def _pptx_reference(path: Path) -> dict[str, Any]:
    archive = zipfile.ZipFile(path)
    furniture = {"sldNum", "dt", "ftr", "sldImg", "hdr"}
    texts: list[str] = []
    headings: list[str] = []
    cells: list[str] = []
    slides = sorted(
        (
            n
            for n in archive.namelist()
            if re.fullmatch(r"ppt/(slides/slide|notesSlides/notesSlide)\d+\.xml", n)
        ),
        key=lambda n: int(re.search(r"(\d+)\.xml$", n).group(1)),  # type: ignore[union-attr]
    )
    for name in slides:
        root = ElementTree.fromstring(archive.read(name))
        for shape in root.iter(f"{P}sp"):
            placeholder = shape.find(f"{P}nvSpPr/{P}nvPr/{P}ph")
            kind = placeholder.get("type", "") if placeholder is not None else ""
            if kind in furniture:
                continue
            text = "\n".join("".join(_runs(p, f"{A}t", {MC_FALLBACK})) for p in shape.iter(f"{A}p"))
            texts.append(text)
            if kind in ("title", "ctrTitle") and "slides/" in name:
                headings.append(" ".join(text.split()))
        for cell in root.iter(f"{A}tc"):
            text = " ".join("".join(_runs(cell, f"{A}t", set())).split())
            cells.append(text)
            texts.append(text)
    return {
        "text": "\n".join(texts),
        "headings": [h for h in headings if h],
        "cells": [c for c in cells if c],
    }


def _xlsx_reference(path: Path) -> dict[str, Any]:
    out = subprocess.run(
        ["xlsx2csv", "--all", str(path)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    texts: list[str] = []
    headings: list[str] = []
    cells: list[str] = []
    import csv

    for chunk in re.split(r"^-------- \d+ - ", out, flags=re.M)[1:]:
        name_line, _, body = chunk.partition("\n")
        rows = [row for row in csv.reader(io.StringIO(body)) if any(c.strip() for c in row)]
        if rows:
            headings.append(" ".join(name_line.split()))
        for row in rows:
            cells.extend(" ".join(c.split()) for c in row if c.strip())
            texts.append(" ".join(row))
    return {"text": "\n".join(texts), "headings": headings, "cells": cells}


def _csv_reference(path: Path) -> dict[str, Any]:
    import csv

    text = path.read_text(encoding="utf-8-sig")
    cells = [" ".join(c.split()) for row in csv.reader(io.StringIO(text)) for c in row if c.strip()]
    return {"text": text, "headings": [], "cells": cells}


def _pdf_reference(path: Path) -> dict[str, Any]:
    import pypdf

    reader = pypdf.PdfReader(path)
    if reader.is_encrypted and not reader.decrypt(""):
        return {"text": "", "headings": [], "cells": [], "encrypted": True}
    text = subprocess.run(
        ["pdftotext", "-enc", "UTF-8", str(path), "-"], capture_output=True, text=True
    ).stdout
    headings: list[str] = []
    try:

        def walk(entries: Any) -> None:
            for entry in entries:
                if isinstance(entry, list):
                    walk(entry)
                elif entry.get("/Title"):
                    headings.append(" ".join(str(entry["/Title"]).split()))

        walk(reader.outline)
    except Exception:  # an encrypted file: no outline to read
        pass
    return {"text": text, "headings": headings, "cells": []}


def _html_reference(path: Path) -> dict[str, Any]:
    from bs4 import BeautifulSoup  # with the standard library's html.parser, not lxml

    raw = path.read_bytes()
    declared = re.search(rb"charset=([A-Za-z0-9_-]+)", raw[:4096])
    try:
        source = raw.decode("utf-8")
    except UnicodeDecodeError:
        source = raw.decode(declared.group(1).decode() if declared else "latin-1", "replace")
    soup = BeautifulSoup(source, "html.parser")
    for hidden in soup(["script", "style", "template", "head"]):
        hidden.decompose()
    for permalink in soup.select("a.headerlink"):
        permalink.decompose()
    main = soup.select_one('[role="main"]') or soup.body or soup

    def text(element: Any) -> str:
        return " ".join(element.get_text(" ").split())

    return {
        "text": main.get_text(" "),
        "headings": [h for h in (text(e) for e in main.find_all(re.compile(r"^h[1-6]$"))) if h],
        "cells": [c for c in (text(e) for e in main.find_all(["td", "th"])) if c],
    }


def _md_reference(path: Path) -> dict[str, Any]:
    text = subprocess.run(
        ["pandoc", "-f", "gfm", "-t", "plain", "--wrap=none", str(path)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    headings, cells = _pandoc_structure(_pandoc_json(path, "gfm"))
    return {"text": text, "headings": headings, "cells": cells}


READERS = {
    "docx": _docx_reference,
    "pptx": _pptx_reference,
    "xlsx": _xlsx_reference,
    "csv": _csv_reference,
    "pdf": _pdf_reference,
    "html": _html_reference,
    "md": _md_reference,
}
REFUSED = {"xls": "unsupported_type", "ods": "unsupported_type"}


def _phrases(references: dict[str, dict[str, Any]]) -> None:
    """Each document's phrase: six words around its rarest word in the corpus."""
    frequency: Counter[str] = Counter()
    for reference in references.values():
        frequency.update({w.lower() for w in WORD.findall(reference["text"])})
    for reference in references.values():
        words = WORD.findall(reference["text"])
        candidates = [
            (frequency[w.lower()], -len(w), i)
            for i, w in enumerate(words)
            if w.isalpha() and len(w) >= 5
        ]
        if not candidates or len(words) < 6:
            reference["phrase"] = ""
            continue
        _, _, at = min(candidates)
        start = max(0, min(at - 2, len(words) - 6))
        reference["phrase"] = " ".join(words[start : start + 6])


def build_references(paths: dict[str, Path]) -> None:
    _, documents = manifest()
    REFERENCES.mkdir(parents=True, exist_ok=True)
    references: dict[str, dict[str, Any]] = {}
    for document in documents:
        path = paths[document.id]
        if document.format in REFUSED:
            references[document.id] = {"text": "", "headings": [], "cells": []}
            references[document.id]["expect"] = f"refuse:{REFUSED[document.format]}"
            continue
        reference = READERS[document.format](path)
        if not WORD.search(reference["text"]):
            encrypted = reference.pop("encrypted", False)
            reference["expect"] = "refuse:encrypted" if encrypted else "refuse:no_text"
        else:
            reference["expect"] = "accept"
        references[document.id] = reference
    _phrases(references)
    for document in documents:
        reference = references[document.id]
        target = REFERENCES / (document.id.replace("/", "__") + ".json")
        target.write_text(json.dumps(reference, ensure_ascii=False, indent=1) + "\n")
    print(f"{len(references)} references in {REFERENCES}")


def load_reference(document: Document) -> dict[str, Any]:
    return json.loads((REFERENCES / (document.id.replace("/", "__") + ".json")).read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["fetch", "references"])
    args = parser.parse_args()
    paths = fetch()
    print(f"{len(paths)} documents in {CACHE / 'docs'}")
    if args.command == "references":
        missing = [tool for tool in ("pandoc", "pdftotext", "xlsx2csv") if not shutil.which(tool)]
        if missing:
            raise SystemExit(f"references need {', '.join(missing)} on PATH")
        build_references(paths)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUTF8", "1")
    main()
