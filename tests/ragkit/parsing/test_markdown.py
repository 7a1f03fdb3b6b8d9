"""Markdown through markdown-it-py: CommonMark's blocks, plain-text heading paths, exact offsets
into the file, and nothing a file says dropped (the spec's own examples: test_commonmark.py)."""

from ragkit import parsing
from tests.ragkit.parsing.test_formats import blocks_text


def parse(text: str) -> parsing.ParsedDocument:
    return parsing.parse(text.encode(), "markdown", "fallback")


def test_headings_become_paths_and_code_fences_are_not_headings() -> None:
    doc = parse(
        "# Guide\n\nIntro paragraph.\n\n## Install\n\nRun it.\n\n```\n# not a heading\n```\n\n"
        "### Linux\n\nUse apt.\n\n## Usage\n\nCall it.\n"
    )
    assert doc.title == "Guide"
    got = blocks_text(doc)
    assert got[0] == (("Guide",), "Intro paragraph.")
    assert (("Guide", "Install"), "```\n# not a heading\n```") in got
    assert (("Guide", "Install", "Linux"), "Use apt.") in got
    assert (("Guide", "Usage"), "Call it.") in got


def test_setext_headings() -> None:
    doc = parse("Title\n=====\n\nBody one.\n\nPart\n----\n\nBody two.\n")
    assert blocks_text(doc) == [(("Title",), "Body one."), (("Title", "Part"), "Body two.")]


def test_indented_code_and_html_blocks_are_blocks_not_headings() -> None:
    doc = parse("# Top\n\n    # indented code\n\n<div>\n# inside html\n</div>\n\nAfter.\n")
    assert doc.headings == ["Top"]
    assert blocks_text(doc) == [
        (("Top",), "# indented code"),
        (("Top",), "<div>\n# inside html\n</div>"),
        (("Top",), "After."),
    ]


def test_heading_paths_hold_plain_text_without_markup() -> None:
    doc = parse(
        "# **Install** the `cli`\n\nA.\n\n## [Docs](https://x.org) & ![logo](l.png) *more*\n\nB.\n"
    )
    assert doc.headings == ["Install the cli", "Docs & logo more"]
    assert doc.blocks[1].heading_path == ("Install the cli", "Docs & logo more")


def test_offsets_are_exact_source_offsets_markup_and_all() -> None:
    text = (
        "# A\n\nfirst *para*\nstill first\n\n> quoted\n> on two lines\n\n- item one\n- item two\n"
    )
    doc = parse(text)
    assert doc.text == text
    assert [text[b.start : b.end] for b in doc.blocks] == [
        "first *para*\nstill first",
        "> quoted\n> on two lines",
        "- item one",
        "- item two",
    ]


def test_gfm_tables_are_one_block_of_their_source() -> None:
    doc = parse("# Prices\n\n| Fruit | Price |\n|---|---|\n| Apple | 3 |\n| Pear | 4 |\n")
    assert blocks_text(doc) == [
        (("Prices",), "| Fruit | Price |\n|---|---|\n| Apple | 3 |\n| Pear | 4 |")
    ]


def test_link_reference_definitions_and_deep_nesting_are_kept_as_text() -> None:
    deep = ">" * 200 + " the bottom of the quote\n"
    doc = parse(f'# Links\n\nSee [the site].\n\n[the site]: https://example.org "Site"\n\n{deep}')
    kept = " ".join(doc.text[b.start : b.end] for b in doc.blocks)
    assert "https://example.org" in kept
    assert "the bottom of the quote" in kept


def test_front_matter_is_text_and_gives_the_title() -> None:
    doc = parse("---\ntitle: Field Notes\nauthor: A. Birder\n---\n\n# Herons\n\nGrey herons.\n")
    assert doc.title == "Field Notes"
    assert doc.headings == ["Herons"]
    assert blocks_text(doc) == [
        ((), "title: Field Notes\nauthor: A. Birder"),
        (("Herons",), "Grey herons."),
    ]


def test_a_thematic_break_is_not_front_matter() -> None:
    doc = parse("---\n\nPara\n\n---\n")
    assert doc.title == "fallback"
    assert blocks_text(doc) == [((), "Para")]
