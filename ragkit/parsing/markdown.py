"""Markdown, read as CommonMark reads it (markdown-it-py), with blocks at exact source offsets.

markdown-it gives each block token the source lines it spans (`map`): a block is those lines of
the file itself, so a citation shows what the file says, markup and all. Headings go into the
heading path as the plain text a reader sees (`**Install** it` is `Install it`). Only headings
are parsed inline: the body's inline markup changes no offset and costs time on big files.

Lines no block token claims are kept as text, never dropped: link reference definitions, and
whatever sits deeper than the nesting markdown-it parses (`MAX_NESTING`, a bound on its
recursion that 10,000 nested quotes would otherwise pass).

YAML front matter (a first line `---`, closed by `---` or `...`, as Jekyll, Hugo, MkDocs and
pandoc write it) is one block of text, not a thematic break over a setext heading; its `title:`
is the document's title.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.token import Token

from ragkit.parsing.model import Block, ParsedDocument
from ragkit.parsing.text import decode, paragraph_blocks, squash

MAX_NESTING = 50
# Headings are cut to 300 characters in chunks (ragkit/chunking.py); their inline markup is read
# this far: a heading line of a megabyte costs seconds to parse and says nothing more.
MAX_HEADING_SOURCE = 2_000
# Leaf blocks whose lines are body text; tables are one block, as their source.
_LEAF = {"paragraph_open", "fence", "code_block", "html_block", "table_open"}
_WORD = re.compile(r"\w")
_FRONT_MATTER = re.compile(
    r"\A---[ \t]*\n(?=[A-Za-z_][\w.-]*:)(.*?\n)(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.S
)
_FRONT_TITLE = re.compile(r"^title:[ \t]*['\"]?(.*?)['\"]?[ \t]*$", re.M)


@cache
def _block_parser() -> MarkdownIt:
    # GFM tables are what Markdown files in the wild use for tables; the rest is CommonMark.
    return (
        MarkdownIt("commonmark", {"maxNesting": MAX_NESTING})
        .enable("table")
        .disable(["inline", "text_join"])
    )


@cache
def _inline_parser() -> MarkdownIt:
    return MarkdownIt("commonmark")


def heading_text(source: str, env: dict[str, Any] | None = None) -> str:
    """A heading's inline Markdown as plain text: emphasis, links and code lose their markup,
    images keep their alt text, raw HTML is dropped. `env` holds the file's link reference
    definitions (`[Foo]` is a link when the file defines `[foo]: /url`)."""
    tokens = _inline_parser().parseInline(source[:MAX_HEADING_SOURCE], dict(env or {}))
    words: list[str] = []

    def walk(children: Sequence[Token]) -> None:
        for token in children:
            if token.type in ("text", "text_special", "code_inline"):
                words.append(token.content)
            elif token.type in ("softbreak", "hardbreak"):
                words.append(" ")
            elif token.type == "image":
                walk(token.children or [])
            elif token.children:
                walk(token.children)

    for token in tokens:
        walk(token.children or [])
    return squash("".join(words))


def parse_markdown(data: bytes, fallback_title: str) -> ParsedDocument:
    text = decode(data)
    starts = [0]
    for line in text.split("\n"):
        starts.append(starts[-1] + len(line) + 1)
    line_count = len(starts) - 1

    def span(first: int, last: int) -> tuple[int, int]:
        """Characters of lines [first, last), without the final newline."""
        return starts[first], min(starts[last] - 1, len(text))

    stack: list[tuple[int, str]] = []
    blocks: list[Block] = []
    headings: list[Block] = []  # the headings' own text: the body of a file of headings only
    names: list[str] = []
    title = ""
    claimed = 0  # lines before this one belong to a block token already seen

    def path() -> tuple[str, ...]:
        return tuple(name for _, name in stack)

    def unclaimed(until: int) -> None:
        """Keep the text of lines [claimed, until) that no block token took."""
        if until <= claimed:
            return
        start, end = span(claimed, until)
        for block in paragraph_blocks(text, start, end, path()):
            if _WORD.search(text, block.start, block.end):
                blocks.append(block)

    readable = text
    front = _FRONT_MATTER.match(text)
    if front:
        # markdown-it reads the front matter as blank lines (offsets stay those of the file).
        blank = re.sub(r"[^\n]", " ", front.group(0))
        readable = blank + text[front.end() :]
        start, end = span(1, 1 + front.group(1).count("\n"))
        if front.group(1).strip():
            blocks.append(Block((), start, start + len(text[start:end].rstrip())))
        claimed = front.group(0).count("\n") + (0 if front.group(0).endswith("\n") else 1)
        named = _FRONT_TITLE.search(front.group(1))
        title = squash(named.group(1)) if named else ""

    env: dict[str, Any] = {}
    tokens = _block_parser().parse(readable, env)
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if token.map is None or token.nesting == -1:
            continue
        first, last = token.map
        if token.type == "heading_open":
            unclaimed(first)
            claimed = max(claimed, last)
            source = tokens[i].content if i < len(tokens) else ""
            name = heading_text(source, env)
            if not name:
                continue
            level = int(token.tag[1])
            while stack and stack[-1][0] >= level:
                stack.pop()
            start, end = span(first, last)
            at = text.find(source.split("\n", 1)[0], start, end) if source else -1
            if at >= 0:
                # One section for all: an outline of 20,000 headings packs into few chunks.
                headings.append(Block((), at, at + len(source.split("\n", 1)[0].rstrip())))
            stack.append((level, name))
            names.append(name)
            title = title or name
        elif token.type in _LEAF:
            unclaimed(first)
            claimed = max(claimed, last)
            start, end = span(first, last)
            segment = text[start:end]
            body = segment.strip()
            if body:
                at = start + len(segment) - len(segment.lstrip())
                blocks.append(Block(path(), at, at + len(body)))
            if token.type == "table_open":  # its rows are inside the block just kept
                while i < len(tokens) and tokens[i].type != "table_close":
                    i += 1
        elif token.type == "hr":
            unclaimed(first)
            claimed = max(claimed, last)
    unclaimed(line_count)
    if not blocks:
        blocks = [h for h in headings if h.end > h.start]
    return ParsedDocument(title or fallback_title, "markdown", text, blocks, headings=names)
