"""Build the passage file of the `stdlib` retrieval set from the docstrings CPython ships.

The output is committed (eval/sets/stdlib-passages.jsonl) so the set does not change with the
interpreter; rerun this only to rebuild the set, then re-check every question's label.

    python eval/build_stdlib_passages.py > eval/sets/stdlib-passages.jsonl
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
import sys

MODULES = [
    "os",
    "os.path",
    "shutil",
    "pathlib",
    "glob",
    "fnmatch",
    "tempfile",
    "json",
    "csv",
    "re",
    "string",
    "textwrap",
    "difflib",
    "datetime",
    "time",
    "calendar",
    "collections",
    "itertools",
    "functools",
    "heapq",
    "bisect",
    "random",
    "statistics",
    "math",
    "decimal",
    "fractions",
    "hashlib",
    "hmac",
    "secrets",
    "base64",
    "binascii",
    "zlib",
    "gzip",
    "tarfile",
    "zipfile",
    "subprocess",
    "threading",
    "queue",
    "socket",
    "urllib.parse",
    "logging",
    "argparse",
    "configparser",
    "sqlite3",
    "pickle",
    "copy",
    "pprint",
    "enum",
    "dataclasses",
    "inspect",
    "traceback",
    "warnings",
    "contextlib",
    "uuid",
    "ipaddress",
    "unicodedata",
    "shlex",
    "struct",
    "weakref",
    "operator",
    "io",
    "codecs",
    "asyncio",
    "concurrent.futures",
    "html",
    "email.utils",
    "mimetypes",
    "platform",
    "locale",
    "gettext",
    "signal",
    "array",
    "typing",
    "abc",
    "numbers",
    "cmath",
    "filecmp",
    "stat",
    "getpass",
    "sched",
    "selectors",
    "wave",
    "colorsys",
    "graphlib",
    "zoneinfo",
    "tomllib",
    "lzma",
    "bz2",
    "plistlib",
    "netrc",
    "http.cookies",
    "http.client",
]
PER_MODULE = 12
MIN_CHARS, MAX_CHARS = 80, 900


def clean(doc: str) -> str:
    doc = re.sub(r"\n{3,}", "\n\n", doc.strip())
    return doc[:MAX_CHARS].rsplit("\n", 1)[0] if len(doc) > MAX_CHARS else doc


def members(module_name: str):
    module = importlib.import_module(module_name)
    public = getattr(module, "__all__", None) or [n for n in dir(module) if not n.startswith("_")]
    for name in sorted(public):
        obj = getattr(module, name, None)
        if obj is None or inspect.ismodule(obj):
            continue
        if not (inspect.isroutine(obj) or inspect.isclass(obj)):
            continue
        yield f"{module_name}.{name}", obj
        if inspect.isclass(obj):
            for attr in sorted(vars(obj)):
                if not attr.startswith("_") and inspect.isroutine(getattr(obj, attr, None)):
                    yield f"{module_name}.{name}.{attr}", getattr(obj, attr)


def main() -> None:
    seen: set[str] = set()
    for module_name in MODULES:
        taken = 0
        for qualname, obj in members(module_name):
            doc = inspect.getdoc(obj) or ""
            if len(doc.strip()) < MIN_CHARS or doc.strip() in seen:
                continue
            text = clean(doc)
            if len(text) < MIN_CHARS:
                continue
            seen.add(doc.strip())
            record = {"id": qualname, "title": qualname, "text": f"{qualname}\n\n{text}"}
            sys.stdout.write(json.dumps(record, ensure_ascii=False) + "\n")
            taken += 1
            if taken == PER_MODULE:
                break


if __name__ == "__main__":
    main()
