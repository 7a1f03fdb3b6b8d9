"""Docling's reading of the intake corpus, for bench/intake.py's comparison (`--docling PYTHON`).

Runs under another interpreter: a virtual environment with docling-slim, which does not install
beside this project's lock (docling-core wants typer<0.27; we pin 0.29). Reads file paths on
stdin, one per line, and writes one JSON object per line: the document's text (Docling's plain
text export), its headings (title and section headers), its table cells, and the seconds the
conversion took; or the error. Docling's weight-free backends only: no model is downloaded.

    python3.11 -m venv /tmp/docling && /tmp/docling/bin/pip install torch==2.13.0 packaging \\
        'docling-slim[format-office,format-html,format-markdown,format-pdf]==2.143.0'
"""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    from docling.backend.pypdfium2_backend import PyPdfiumDocumentBackend
    from docling.datamodel.base_models import InputFormat
    from docling.datamodel.pipeline_options import NativePdfPipelineOptions
    from docling.document_converter import DocumentConverter, PdfFormatOption
    from docling.pipeline.native_pdf_pipeline import NativePdfPipeline

    # PDF: the weight-free pipeline (text cells from pypdfium2, no layout model).
    pdf = PdfFormatOption(
        pipeline_cls=NativePdfPipeline,
        pipeline_options=NativePdfPipelineOptions(),
        backend=PyPdfiumDocumentBackend,
    )
    converter = DocumentConverter(format_options={InputFormat.PDF: pdf})
    for line in sys.stdin:
        path = line.strip()
        if not path:
            continue
        started = time.perf_counter()
        try:
            document = converter.convert(path).document
            headings = [
                item.text
                for item, _ in document.iterate_items()
                if str(getattr(item, "label", "")) in ("title", "section_header")
            ]
            cells = [
                cell.text
                for table in document.tables
                for cell in table.data.table_cells
                if cell.text.strip()
            ]
            text = document.export_to_text()
            found = {"path": path, "text": text, "headings": headings, "cells": cells}
        except Exception as exc:
            found = {"path": path, "error": f"{type(exc).__name__}: {exc}"[:500]}
        found["seconds"] = time.perf_counter() - started
        print(json.dumps(found), flush=True)


if __name__ == "__main__":
    main()
