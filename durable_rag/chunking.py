"""Structure-aware chunking to a token budget with overlap (R19).

Chunks never cross a heading: each section (a run of blocks under one heading path) is packed on
its own. Inside a section, sentences are packed greedily up to the budget, keeping paragraph breaks;
a sentence longer than the budget is cut on token boundaries. Consecutive chunks of a section share
their last sentences, up to `overlap` of the budget.

Tokens are counted with the embedding model's own tokenizer, so a chunk's budget is what the
encoder sees.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from durable_rag.parsing import Block, ParsedDocument

HEADING_SEPARATOR = " > "


class Tokenizer(Protocol):
    """The slice of a Hugging Face fast tokenizer that chunking uses."""

    def __call__(self, text: list[str], **kwargs: object) -> dict[str, list[list[object]]]: ...


@dataclass(frozen=True)
class ChunkDraft:
    ordinal: int
    text: str
    token_count: int
    heading_path: str
    char_start: int
    char_end: int


@dataclass(frozen=True, slots=True)  # one per sentence: millions in a file of tiny ones
class _Unit:
    """A sentence (or a piece of one) at text[start:end]."""

    start: int
    end: int
    tokens: int
    paragraph: int


_SENTENCE_END = re.compile(r"(?<=[.!?…])[\"')\]]*\s+|\n")


def _sentences(text: str, start: int, end: int) -> list[tuple[int, int]]:
    spans = []
    pos = start
    for match in _SENTENCE_END.finditer(text, start, end):
        if match.start() > pos:
            spans.append((pos, match.start()))
        pos = match.end()
    if pos < end:
        spans.append((pos, end))
    return [(s, e) for s, e in spans if text[s:e].strip()]


def chunk_document(
    doc: ParsedDocument, tokenizer: Tokenizer, chunk_tokens: int, overlap: float
) -> list[ChunkDraft]:
    if not 0 <= overlap < 0.5:
        raise ValueError("overlap must be in [0, 0.5)")
    chunks: list[ChunkDraft] = []
    for path, blocks in _sections(doc.blocks):
        heading = HEADING_SEPARATOR.join(path)
        # The heading is embedded with every chunk, so it takes part of the budget.
        heading_tokens = _count(tokenizer, [heading])[0] if heading else 0
        budget = max(chunk_tokens // 2, chunk_tokens - heading_tokens)
        units = _units(doc.text, blocks, tokenizer, budget)
        for start_i, end_i in _pack(units, budget, overlap):
            first, last = units[start_i], units[end_i - 1]
            text = doc.text[first.start : last.end]
            chunks.append(
                ChunkDraft(
                    ordinal=len(chunks),
                    text=text,
                    token_count=sum(u.tokens for u in units[start_i:end_i]),
                    heading_path=heading,
                    char_start=first.start,
                    char_end=last.end,
                )
            )
    return chunks


def _sections(blocks: Sequence[Block]) -> list[tuple[tuple[str, ...], list[Block]]]:
    sections: list[tuple[tuple[str, ...], list[Block]]] = []
    for block in blocks:
        if sections and sections[-1][0] == block.heading_path:
            sections[-1][1].append(block)
        else:
            sections.append((block.heading_path, [block]))
    return sections


# Sentences tokenized per call. One call for all of them keeps a Rust encoding per sentence alive
# at once: a 2 MB file of one-letter paragraphs peaked 1 GB higher.
_COUNT_BATCH = 4_096


def _count(tokenizer: Tokenizer, texts: list[str]) -> list[int]:
    counts: list[int] = []
    for first in range(0, len(texts), _COUNT_BATCH):
        encoded = tokenizer(texts[first : first + _COUNT_BATCH], add_special_tokens=False)
        counts.extend(len(ids) for ids in encoded["input_ids"])
    return counts


def _units(text: str, blocks: list[Block], tokenizer: Tokenizer, budget: int) -> list[_Unit]:
    spans: list[tuple[int, int, int]] = []
    for paragraph, block in enumerate(blocks):
        spans.extend((s, e, paragraph) for s, e in _sentences(text, block.start, block.end))
    if not spans:
        return []
    counts = _count(tokenizer, [text[s:e] for s, e, _ in spans])
    units: list[_Unit] = []
    for (s, e, paragraph), tokens in zip(spans, counts, strict=True):
        if tokens <= budget:
            units.append(_Unit(s, e, tokens, paragraph))
        else:
            units.extend(_split_long(text, s, e, paragraph, tokenizer, budget))
    return units


def _split_long(
    text: str, start: int, end: int, paragraph: int, tokenizer: Tokenizer, budget: int
) -> list[_Unit]:
    """Cut one over-long sentence into pieces of at most `budget` tokens, on token boundaries."""
    encoded = tokenizer([text[start:end]], add_special_tokens=False, return_offsets_mapping=True)
    offsets = encoded["offset_mapping"][0]
    pieces = []
    for i in range(0, len(offsets), budget):
        window = offsets[i : i + budget]
        s = start + int(window[0][0])  # type: ignore[index]
        e = start + int(window[-1][1])  # type: ignore[index]
        pieces.append(_Unit(s, e, len(window), paragraph))
    return pieces


def _pack(units: list[_Unit], budget: int, overlap: float) -> list[tuple[int, int]]:
    """Greedy packing of units into [start, end) index ranges, with sentence overlap."""
    ranges: list[tuple[int, int]] = []
    overlap_budget = int(budget * overlap)
    start = 0
    while start < len(units):
        end = start
        used = 0
        while end < len(units) and used + units[end].tokens <= budget:
            used += units[end].tokens
            end += 1
        end = max(end, start + 1)
        ranges.append((start, end))
        if end >= len(units):
            break
        # Step back over trailing units that fit in the overlap, but always move forward.
        next_start = end
        carried = 0
        while next_start - 1 > start and carried + units[next_start - 1].tokens <= overlap_budget:
            carried += units[next_start - 1].tokens
            next_start -= 1
        start = next_start
    return ranges
