"""Document intake: what each parser keeps of public documents, per format, side by side.

    .venv/bin/python bench/intake.py [--search] [--docling PYTHON] [--json FILE]

The corpus is bench/intake_corpus.py's: 131 public documents in seven formats (and two legacy
ones), each with a reference text, headings and table cells made by readers that are not
measured here. Each parser reads every document, in this process, one at a time:
- `today`: ragkit/parsing.py as it was before issue 37 (read from git at BASELINE_REF);
- `new`: ragkit.parsing;
- `docling` (with `--docling`): Docling's weight-free backends, run by bench/intake_docling.py
  under the given interpreter (a venv of its own: it does not install beside our lock).

Per format and parser, the table gives documents accepted (and refused, by kind), the share of
the reference's words kept as searchable text (chunk text and heading paths, as the keyword
index holds them; counted with repeats, refused documents keeping none), heading recall, table
cell recall (a cell counts when its text is in the searchable text), and throughput (MB of file
per second of parsing; PDF also pages per second).

`--search` also ingests the corpus through IngestWorkflow on a fresh embedded stack for `today`
and for `new` (each its own Postgres, Temporal dev server and Qdrant Edge), then searches
(hybrid, top 5) for each document's rare phrase: the share of documents it finds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import types
import unicodedata
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")

from bench.intake_corpus import Document, fetch, load_reference, manifest  # noqa: E402
from ragkit import parsing  # noqa: E402
from ragkit.parsing import Block, DocumentError, ParsedDocument  # noqa: E402

# The last commit whose ragkit/parsing.py is the hand-written parser this issue replaced.
BASELINE_REF = "336ab75"
FORMATS = ["docx", "pptx", "xlsx", "csv", "html", "pdf", "md", "xls", "ods"]
WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    """Lower-cased words, ligatures and compatibility forms folded (PDF's `ﬀ` is `ff`)."""
    return WORD.findall(unicodedata.normalize("NFKC", text).lower())


def norm(text: str) -> str:
    return " ".join(words(text))


def legacy_parser() -> Callable[[bytes, str, str], ParsedDocument]:
    """Today's parser, loaded from git, its documents turned into ours (no page, no row)."""
    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{BASELINE_REF}:ragkit/parsing.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    module = types.ModuleType("legacy_parsing")
    sys.modules["legacy_parsing"] = module  # dataclasses look their module up
    exec(compile(source, "legacy_parsing.py", "exec"), module.__dict__)

    def parse(data: bytes, content_type: str, title: str) -> ParsedDocument:
        try:
            old = module.parse(data, content_type, title)
        except module.DocumentError as exc:
            raise DocumentError(exc.kind, exc.message) from None
        blocks = [Block(b.heading_path, b.start, b.end) for b in old.blocks]
        return ParsedDocument(old.title, old.content_type, old.text, blocks)

    def checked(data: bytes, content_type: str, title: str) -> ParsedDocument:
        if content_type not in set(module.CONTENT_TYPES.values()):
            raise DocumentError(parsing.UNSUPPORTED_TYPE, f"{content_type} is not read")
        return parse(data, content_type, title)

    return checked


@dataclass
class Reading:
    """What one parser made of one document."""

    text: str = ""
    headings: list[str] = field(default_factory=list)
    refused: str = ""  # the kind, when refused
    seconds: float = 0.0
    pages: int = 0


def searchable(doc: ParsedDocument) -> Reading:
    """The text the keyword index holds: the blocks, and each heading once."""
    headings: list[str] = []
    seen: set[tuple[str, ...]] = set()
    for block in doc.blocks:
        for depth in range(1, len(block.heading_path) + 1):
            prefix = block.heading_path[:depth]
            if prefix not in seen:
                seen.add(prefix)
                headings.append(prefix[-1])
    body = "\n".join(doc.text[b.start : b.end] for b in doc.blocks)
    return Reading(text=body + "\n" + "\n".join(headings), headings=headings)


def read_with(
    parse: Callable[[bytes, str, str], ParsedDocument], path: Path, document: Document
) -> Reading:
    data = path.read_bytes()
    started = time.perf_counter()
    try:
        content_type = parsing.content_type_for(path.name)
        doc = parse(data, content_type, Path(document.member).stem)
    except DocumentError as exc:
        return Reading(refused=exc.kind, seconds=time.perf_counter() - started)
    seconds = time.perf_counter() - started
    reading = searchable(doc)
    reading.headings = doc.headings or reading.headings  # today's parser keeps no list of them
    reading.seconds = seconds
    reading.pages = len({b.page for b in doc.blocks if b.page})
    return reading


def read_with_docling(python: str, paths: dict[str, Path]) -> dict[str, Reading]:
    found = subprocess.run(
        [python, str(ROOT / "bench" / "intake_docling.py")],
        input="\n".join(str(p) for p in paths.values()),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    by_path = {str(p): doc_id for doc_id, p in paths.items()}
    readings: dict[str, Reading] = {}
    for line in found.splitlines():
        answer = json.loads(line)
        doc_id = by_path[answer["path"]]
        if "error" in answer:
            readings[doc_id] = Reading(refused="error", seconds=answer["seconds"])
            continue
        text = answer["text"] + "\n" + "\n".join(answer["headings"])
        readings[doc_id] = Reading(text, answer["headings"], "", answer["seconds"])
    return readings


@dataclass
class Row:
    documents: int = 0
    accepted: int = 0
    refused: Counter[str] = field(default_factory=Counter)
    words_kept: int = 0
    words: int = 0
    headings_found: int = 0
    headings: int = 0
    cells_found: int = 0
    cells: int = 0
    bytes: int = 0
    seconds: float = 0.0
    pages: int = 0
    phrases_found: int = 0
    phrases: int = 0

    def add(self, reading: Reading, reference: dict[str, Any], size: int) -> None:
        self.documents += 1
        if reading.refused:
            self.refused[reading.refused] += 1
        else:
            self.accepted += 1
            self.bytes += size
            self.seconds += reading.seconds
            self.pages += reading.pages
        if reference["expect"] != "accept":
            return
        wanted = Counter(words(reference["text"]))
        kept = Counter(words(reading.text))
        self.words += sum(wanted.values())
        self.words_kept += sum(min(n, kept[w]) for w, n in wanted.items())
        ours = {norm(h) for h in reading.headings}
        self.headings += len(reference["headings"])
        self.headings_found += sum(norm(h) in ours for h in reference["headings"])
        flat = norm(reading.text)
        self.cells += len(reference["cells"])
        self.cells_found += sum(norm(c) in flat for c in reference["cells"])

    def shares(self) -> dict[str, float | None]:
        """The recalls as numbers (None where the format has none to recall)."""

        def share(part: int, whole: int) -> float | None:
            return part / whole if whole else None

        return {
            "words": share(self.words_kept, self.words),
            "headings": share(self.headings_found, self.headings),
            "cells": share(self.cells_found, self.cells),
            "phrases": share(self.phrases_found, self.phrases),
        }

    def cells_of(self) -> dict[str, str]:
        def share(part: int, whole: int) -> str:
            return f"{part / whole:.3f}" if whole else "-"

        refused = ", ".join(f"{n} {kind}" for kind, n in sorted(self.refused.items()))
        speed = f"{self.bytes / 1e6 / self.seconds:.1f} MB/s" if self.seconds else "-"
        if self.pages and self.seconds:
            speed += f", {self.pages / self.seconds:.0f} pages/s"
        return {
            "documents": str(self.documents),
            "accepted": f"{self.accepted}" + (f" (refused: {refused})" if refused else ""),
            "words kept": share(self.words_kept, self.words),
            "headings": share(self.headings_found, self.headings),
            "table cells": share(self.cells_found, self.cells),
            "throughput": speed,
            "rare phrase in top 5": (
                f"{self.phrases_found} of {self.phrases}" if self.phrases else "-"
            ),
        }


async def search_phrases(
    parse: Callable[[bytes, str, str], ParsedDocument],
    paths: dict[str, Path],
    documents: list[Document],
    references: dict[str, dict[str, Any]],
) -> tuple[dict[str, bool], dict[str, str]]:
    """Ingest the corpus through IngestWorkflow with this parser; search each rare phrase.
    Returns found per document, and the ingest's failure kind per document."""
    from bench.services import bench_services, local_workers, running
    from ragkit.db import make_sessionmaker
    from ragkit.embedding import load_embedder
    from ragkit.index import open_index
    from ragkit.settings import PACKAGED_MINILM
    from ragkit.temporal import connect

    folder = Path(tempfile.mkdtemp(prefix="intake-"))
    for path in paths.values():
        shutil.copy(path, folder / path.name)
    try:
        async with bench_services("intake") as (_, settings):
            embedder = load_embedder(PACKAGED_MINILM, "cpu", 512, settings.embedding.batch_size)
            sessions = make_sessionmaker(settings.postgres.sqlalchemy_url)
            index = open_index(settings, embedder.dimension)
            client = await connect(settings)
            from durable_rag.client import RagClient

            with ThreadPoolExecutor(8) as executor:
                workers = local_workers(
                    client, settings, sessions, index, embedder, executor, parser=parse
                )
                async with running(workers):
                    rag = RagClient(client, settings, sessions)
                    result = await rag.ingest([str(folder)], tenant="intake")
                    failed = {Path(f.source).name: f.kind for f in result.failures}
                    found: dict[str, bool] = {}
                    for document in documents:
                        phrase = references[document.id].get("phrase", "")
                        if references[document.id]["expect"] != "accept" or not phrase:
                            continue
                        answer = await rag.search(phrase, tenant="intake", top_k=5)
                        name = paths[document.id].name
                        found[document.id] = any(
                            Path(p.source).name == name for p in answer.passages
                        )
            index.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    by_name = {paths[d.id].name: d.id for d in documents}
    return found, {by_name[name]: kind for name, kind in failed.items() if name in by_name}


def print_table(rows: dict[str, dict[str, Row]]) -> None:
    columns = list(Row().cells_of())
    print(f"\n| format | parser | {' | '.join(columns)} |")
    print("|---|---|" + "---|" * len(columns))
    for fmt in [*FORMATS, "all"]:
        for name, by_format in rows.items():
            row = by_format.get(fmt)
            if row is None or not row.documents:
                continue
            cells = row.cells_of()
            print(f"| {fmt} | {name} | {' | '.join(cells[c] for c in columns)} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--search", action="store_true", help="also ingest and search (slow)")
    parser.add_argument("--docling", metavar="PYTHON", help="a Python with docling-slim")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args()

    paths = fetch()
    _, documents = manifest()
    references = {d.id: load_reference(d) for d in documents}
    parsers: dict[str, Callable[[bytes, str, str], ParsedDocument]] = {
        "today": legacy_parser(),
        "new": parsing.parse,
    }
    readings: dict[str, dict[str, Reading]] = {
        name: {d.id: read_with(parse, paths[d.id], d) for d in documents}
        for name, parse in parsers.items()
    }
    if args.docling:
        readings["docling"] = read_with_docling(args.docling, paths)

    searched: dict[str, dict[str, bool]] = {}
    ingest_failures: list[str] = []
    if args.search:
        for name, parse in parsers.items():
            found, failed = asyncio.run(search_phrases(parse, paths, documents, references))
            searched[name] = found
            ingest_failures += [
                f"{doc}: {name}'s ingest failed it ({kind})" for doc, kind in failed.items()
            ]

    rows: dict[str, dict[str, Row]] = {}
    for name, by_doc in readings.items():
        by_format: dict[str, Row] = {}
        for document in documents:
            reading = by_doc[document.id]
            for key in (document.format, "all"):
                row = by_format.setdefault(key, Row())
                row.add(reading, references[document.id], document.bytes)
                if name in searched and document.id in searched[name]:
                    row.phrases += 1
                    row.phrases_found += searched[name][document.id]
        rows[name] = by_format

    print(f"{len(documents)} documents; machine: {os.cpu_count()} CPUs")
    print_table(rows)
    misses = [
        f"{d.id}: {name} refused it ({r.refused})"
        for name, by_doc in readings.items()
        for d in documents
        if (r := by_doc[d.id]).refused and references[d.id]["expect"] == "accept"
    ]
    if misses:
        print("\nrefused although the reference has text:\n  " + "\n  ".join(misses))
    if ingest_failures:
        print("\nfailed by IngestWorkflow:\n  " + "\n  ".join(sorted(ingest_failures)))
    if args.json:
        table_rows = [
            {"format": fmt, "parser": name, **by_format[fmt].cells_of()}
            for fmt in [*FORMATS, "all"]
            for name, by_format in rows.items()
            if fmt in by_format and by_format[fmt].documents
        ]
        figures = {
            name: {fmt: row.shares() for fmt, row in by_format.items()}
            for name, by_format in rows.items()
        }
        args.json.write_text(
            json.dumps(
                {
                    "name": "intake",
                    "rows": table_rows,
                    "figures": figures,
                    "misses": misses,
                    "ingest_failures": ingest_failures,
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
