"""The CommonMark spec's examples of block structure, against what our Markdown parser keeps.

The examples (data/commonmark-blocks.json: the spec's sections on tabs, thematic breaks, ATX and
setext headings, indented and fenced code, HTML blocks, link reference definitions, paragraphs,
blank lines, block quotes and lists) come with the HTML the spec expects. For each one:
- the headings we put in heading paths are exactly the spec's `<h1>`-`<h6>`, in order, as plain
  text (a `# not a heading` inside a code block never is one; a setext heading always is);
- every word the spec renders is in our blocks or headings: nothing is dropped;
- blocks are ordered, trimmed, non-empty slices of the file's own text.
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from ragkit import parsing

DATA = json.loads((Path(__file__).parent / "data" / "commonmark-blocks.json").read_text())
WORD = re.compile(r"[^\W_]+")  # `_world_` is emphasis around a word


class Rendered(HTMLParser):
    """The text and the headings of the spec's expected HTML."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.text: list[str] = []
        self.headings: list[str] = []
        self._heading: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if re.fullmatch(r"h[1-6]", tag):
            self._heading = []
        elif tag == "img":  # an image's alt text is what a heading path shows of it
            alt = dict(attrs).get("alt") or ""
            self.text.append(alt)
            if self._heading is not None:
                self._heading.append(alt)

    def handle_endtag(self, tag: str) -> None:
        if re.fullmatch(r"h[1-6]", tag) and self._heading is not None:
            self.headings.append(" ".join("".join(self._heading).split()))
            self._heading = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._heading is not None:
            self._heading.append(data)


def rendered(html: str) -> Rendered:
    reader = Rendered()
    reader.feed(html)
    reader.close()
    return reader


@pytest.mark.parametrize(
    "example", DATA["examples"], ids=lambda e: f"{e['example']}-{e['section'].replace(' ', '-')}"
)
def test_block_structure_is_read_as_commonmark_reads_it(example: dict[str, Any]) -> None:
    expected = rendered(example["html"])
    try:
        doc = parsing.parse(example["markdown"].encode(), "markdown", "f")
    except parsing.DocumentError as exc:
        assert exc.kind == parsing.EMPTY
        assert not WORD.search("".join(expected.text)), "text the spec renders was refused"
        return
    assert doc.headings == [h for h in expected.headings if h]
    source = example["markdown"]
    assert doc.text == source
    previous = 0
    for block in doc.blocks:
        body = doc.text[block.start : block.end]
        assert previous <= block.start < block.end and body == body.strip()
        previous = block.end
    kept = {
        w.lower()
        for b in doc.blocks
        for w in WORD.findall(doc.text[b.start : b.end] + " " + " ".join(b.heading_path))
    } | {w.lower() for h in doc.headings for w in WORD.findall(h)}
    if "&" not in source:  # entities: the spec renders `&ouml;` as `ö`, the file says `&ouml;`
        lost = {w.lower() for w in WORD.findall("".join(expected.text))} - kept
        assert not lost, f"words the spec renders but we dropped: {sorted(lost)}"


def test_the_issue_example_a_tilde_fence_holding_a_backtick_fence() -> None:
    """A `~~~` fence is closed by `~~~` only: before, a backtick line closed it, the `#` line
    inside became a heading of every block after it, and `## Real section` was never seen."""
    source = "~~~\n```bash\n# not a heading\n~~~\n## Real section\n\nBody.\n"
    doc = parsing.parse(source.encode(), "markdown", "f")
    assert doc.headings == ["Real section"]
    by_text = {doc.text[b.start : b.end]: b.heading_path for b in doc.blocks}
    assert by_text["Body."] == ("Real section",)
    assert by_text["~~~\n```bash\n# not a heading\n~~~"] == ()
