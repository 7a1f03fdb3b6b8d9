"""Build the passage file of the `lexers` retrieval set from the lexer classes Pygments ships.

One passage per built-in Pygments lexer (the pinned `Pygments` of requirements.lock): its
display name as title and, as text, its own docstring (reST markup reduced to plain words,
`versionadded` lines and code samples dropped) followed by its aliases and file name patterns,
e.g. "Aliases: rust, rs. Files: *.rs, *.rs.in." Lexers whose docstring has fewer than MIN_DOC
characters of text are left out. The ids are slugs of the class names (`c_sharp_lexer`).

The output is committed (evals/sets/lexers-passages.jsonl) so the set does not change with the
environment; tests/evals/test_lexers_set.py checks it still matches the installed Pygments.
Rerun this only to rebuild the set, then re-check every question's label.

    python -m evals.build_lexer_passages
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
from pathlib import Path

from pygments.lexer import Lexer
from pygments.lexers._mapping import LEXERS

OUT = Path(__file__).resolve().parent / "sets" / "lexers-passages.jsonl"
MIN_DOC, MAX_CHARS = 30, 600

DIRECTIVE = re.compile(r"^\.\.\s+([\w-]+)::?(.*)$")  # `.. name:: args` (also the `name:` typo)
TARGET = re.compile(r"^\.\.\s+_[^:]+:")  # `.. _name: url`, a hyperlink target
MARKUP = [
    (re.compile(r"`([^`<]+?)\s*<[^>]*>`__?"), r"\1"),  # `Name <url>`_ -> Name
    (re.compile(r":[\w:-]+:`([^`<]+?)\s*<[^>]*>`"), r"\1"),  # :role:`Text <target>` -> Text
    (re.compile(r":[\w:-]+:`([^`]+)`"), r"\1"),  # :role:`x` -> x
    (re.compile(r"``(.+?)``"), r"\1"),  # ``code`` -> code
    (re.compile(r"`([^`]+)`__?"), r"\1"),  # `name`_ -> name
    (re.compile(r"`([^`]+)`"), r"\1"),  # `x` -> x
    (re.compile(r"\*\*(\w[^*]*?)\*\*"), r"\1"),  # **strong** -> strong
    (re.compile(r"(?<![\w*])\*(\w[^*]*?)\*(?![\w*])"), r"\1"),  # *emphasis* -> emphasis
    (re.compile(r"::$"), ":"),  # literal-block marker at a paragraph's end
]


def slug(class_name: str) -> str:
    """`CSharpLexer` -> `c_sharp_lexer`, `ABAPLexer` -> `abap_lexer`."""
    words = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", class_name)
    return re.sub(r"[^a-z0-9_.-]+", "_", words.lower()).strip("_")


def paragraphs(doc: str) -> list[str]:
    """The docstring's paragraphs as plain one-line text, without directives and code samples."""
    kept: list[str] = []
    skip_below: int | None = None  # inside a dropped block: skip lines indented deeper than this
    for line in inspect.cleandoc(doc).splitlines():
        indent = len(line) - len(line.lstrip())
        if skip_below is not None:
            if not line.strip() or indent > skip_below:
                continue
            skip_below = None
        stripped = line.strip()
        if TARGET.match(stripped):
            continue
        directive = DIRECTIVE.match(stripped)
        if directive:
            name = directive.group(1)
            if name in ("sourcecode", "code", "code-block"):
                skip_below = indent  # a code sample: drop it with its body
            elif name not in ("versionadded",):
                kept.append("")  # versionchanged, deprecated, important: keep the body only
            continue
        kept.append(re.sub(r"^[*-] ", "", stripped))  # a bullet: keep the item's words
    out = []
    for block in re.split(r"\n\s*\n", "\n".join(kept)):
        text = re.sub(r"\s+", " ", block).strip()
        for pattern, repl in MARKUP:
            text = pattern.sub(repl, text)
        text = re.sub(r"\s+", " ", text).strip()
        if text:
            out.append(text)
    return out


def fit(parts: list[str], budget: int) -> str:
    """Whole paragraphs while they fit in `budget`; the first one cut at a word if it does not."""
    text = ""
    for part in parts:
        joined = f"{text} {part}" if text else part
        if len(joined) > budget:
            break
        text = joined
    if not text and parts:
        text = parts[0][: budget - 1].rsplit(" ", 1)[0].rstrip(" ,;:") + "…"
    return text


def facts(cls: type[Lexer]) -> str:
    """The class's aliases and file name patterns: `Aliases: rust, rs. Files: *.rs, *.rs.in.`"""
    sentences = []
    if cls.aliases:
        sentences.append("Aliases: " + ", ".join(cls.aliases) + ".")
    if cls.filenames:
        sentences.append("Files: " + ", ".join(cls.filenames) + ".")
    return " ".join(sentences)


def passages() -> list[dict[str, str]]:
    """One passage per built-in lexer with at least MIN_DOC characters of docstring, by id."""
    records: dict[str, dict[str, str]] = {}
    for class_name, (module_name, *_) in sorted(LEXERS.items()):
        cls = getattr(importlib.import_module(module_name), class_name)
        doc = cls.__dict__.get("__doc__") or ""  # its own docstring, never a base class's
        parts = paragraphs(doc)
        if len(" ".join(parts)) < MIN_DOC:
            continue
        tail = facts(cls)
        # The name first, on a line of its own, as the stdlib set does: the plain-text parser
        # reads it as the title, so it is indexed with the passage.
        body = fit(parts, MAX_CHARS - len(tail) - len(cls.name) - 4).rstrip(":")
        if body[-1] not in ".!?…":
            body += "."  # so the aliases sentence does not run on from the docstring
        text = f"{cls.name}\n\n{body} {tail}".strip()
        pid = slug(class_name)
        if pid in records:
            raise ValueError(f"two lexers share the id {pid!r}")
        records[pid] = {"id": pid, "title": cls.name, "text": text}
    return [records[pid] for pid in sorted(records)]


def main() -> None:
    rows = passages()
    OUT.write_text(
        "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8"
    )
    print(f"{len(rows)} passages -> {OUT}")


if __name__ == "__main__":
    main()
