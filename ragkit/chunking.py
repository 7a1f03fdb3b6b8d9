"""Structure-aware chunking to a token budget with overlap (R19).

Chunks never cross a heading: each section (a run of blocks under one heading path) is packed on
its own. Inside a section, sentences are packed greedily up to the budget, keeping paragraph breaks;
a sentence longer than the budget is cut on token boundaries. Consecutive chunks of a section share
their last sentences, up to `overlap` of the budget.

Tokens are counted with the embedding model's own tokenizer, so a chunk's budget is what the
encoder sees.

Chunks are also bounded in characters. A word over 100 characters is one [UNK] token, so 512
tokens can be a megabyte of text, and Postgres refuses a tsvector (`chunks.search`) over 1 MB:
one such chunk failed the insert of its whole batch. `MAX_CHUNK_CHARS` and `MAX_HEADING_CHARS`
keep any chunk's heading and text under about 90 KB of UTF-8, whatever the input.
"""

from __future__ import annotations

import itertools
import re
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import tokenizers

from ragkit.parsing import Block, ParsedDocument

HEADING_SEPARATOR = " > "
# Ordinary prose packs 512 tokens into about 2,500 characters; code, about 5,000.
MAX_CHUNK_CHARS = 20_000
# Per heading level; a heading is a title, and it is embedded and stored with every chunk.
MAX_HEADING_CHARS = 300


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
    location: str = ""  # the page, slide or rows it spans, for a person: "pages 3-4"


@dataclass(frozen=True, slots=True)  # one per sentence: millions in a file of tiny ones
class _Unit:
    """A sentence (or a piece of one) at text[start:end]."""

    start: int
    end: int
    tokens: int
    paragraph: int


_SENTENCE_END = re.compile(r"(?<=[.!?…])[\"')\]]*\s+|\n")


def _sentences(text: str, start: int, end: int) -> Iterator[tuple[int, int]]:
    pos = start
    for match in _SENTENCE_END.finditer(text, start, end):
        if match.start() > pos and not text[pos : match.start()].isspace():
            yield pos, match.start()
        pos = match.end()
    if pos < end and not text[pos:end].isspace():
        yield pos, end


def chunk_document(
    doc: ParsedDocument, tokenizer: Tokenizer, chunk_tokens: int, overlap: float
) -> list[ChunkDraft]:
    if not 0 <= overlap < 0.5:
        raise ValueError("overlap must be in [0, 0.5)")
    chunks: list[ChunkDraft] = []
    for path, blocks in _sections(doc.blocks, by_page=doc.page_kind == "slide"):
        heading = HEADING_SEPARATOR.join(_shorten(part) for part in path)
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
                    location=location(
                        doc.page_kind, blocks[first.paragraph], blocks[last.paragraph]
                    ),
                )
            )
    return chunks


def _span(noun: str, first: int, last: int) -> str:
    return f"{noun} {first}" if first == last else f"{noun}s {first}-{last}"


def location(page_kind: str, first: Block, last: Block) -> str:
    """Where a run of blocks is, as a person finds it: `rows 5-12`, `slide 3`, `pages 3-4`."""
    if first.row and last.row:
        return _span("row", first.row, last.row)
    if page_kind and first.page and last.page:
        return _span(page_kind, first.page, last.page)
    return ""


def _shorten(heading: str) -> str:
    return heading if len(heading) <= MAX_HEADING_CHARS else heading[: MAX_HEADING_CHARS - 1] + "…"


def _sections(blocks: Sequence[Block], by_page: bool) -> list[tuple[tuple[str, ...], list[Block]]]:
    """Runs of blocks under one heading path (and, `by_page`, on one slide: two slides of one
    title are two sections)."""
    sections: list[tuple[tuple[str, ...], list[Block]]] = []
    for block in blocks:
        if (
            sections
            and sections[-1][0] == block.heading_path
            and (not by_page or sections[-1][1][-1].page == block.page)
        ):
            sections[-1][1].append(block)
        else:
            sections.append((block.heading_path, [block]))
    return sections


# Sentences tokenized per call. One call for all of them keeps a Rust encoding per sentence alive
# at once: a 2 MB file of one-letter paragraphs peaked 1 GB higher.
_COUNT_BATCH = 4_096


def _count(tokenizer: Tokenizer, texts: list[str]) -> list[int]:
    counts: list[int] = []
    counter = _counter(tokenizer)
    for first in range(0, len(texts), _COUNT_BATCH):
        batch = texts[first : first + _COUNT_BATCH]
        if counter is not None:
            counts.extend(
                len(e.ids) for e in counter.encode_batch_fast(batch, add_special_tokens=False)
            )
        else:
            encoded = tokenizer(batch, add_special_tokens=False)
            counts.extend(len(ids) for ids in encoded["input_ids"])
    return counts


# The Rust tokenizer behind a Hugging Face fast one counts about 4 times faster: the Python
# wrapper turns every encoding into dicts (14 of 29 s on 500k sentences). It is a private copy,
# because the shared one carries the truncation and padding (128 for MiniLM) of the last call.
_COUNTERS: weakref.WeakKeyDictionary[object, tokenizers.Tokenizer] = weakref.WeakKeyDictionary()


def _counter(tokenizer: Tokenizer) -> tokenizers.Tokenizer | None:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if not isinstance(backend, tokenizers.Tokenizer):
        return None
    try:
        return _COUNTERS[tokenizer]
    except KeyError:
        pass
    except TypeError:  # not weakly referenceable: no cache, so no copy either
        return None
    counter = tokenizers.Tokenizer.from_str(backend.to_str())
    counter.no_truncation()
    counter.no_padding()
    _COUNTERS[tokenizer] = counter
    return counter


def _units(text: str, blocks: list[Block], tokenizer: Tokenizer, budget: int) -> list[_Unit]:
    # Sentences are counted a batch at a time, as they are found: a file of millions of tiny
    # sentences never holds all their spans, texts and counts at once besides the units.
    spans = (
        (s, e, paragraph)
        for paragraph, block in enumerate(blocks)
        for s, e in _sentences(text, block.start, block.end)
    )
    units: list[_Unit] = []
    while batch := list(itertools.islice(spans, _COUNT_BATCH)):
        counts = _count(tokenizer, [text[s:e] for s, e, _ in batch])
        for (s, e, paragraph), tokens in zip(batch, counts, strict=True):
            if tokens <= budget and e - s <= MAX_CHUNK_CHARS:
                units.append(_Unit(s, e, tokens, paragraph))
            else:
                units.extend(_split_long(text, s, e, paragraph, tokenizer, budget))
    return units


def _split_long(
    text: str, start: int, end: int, paragraph: int, tokenizer: Tokenizer, budget: int
) -> list[_Unit]:
    """Cut one over-long sentence into pieces of at most `budget` tokens and `MAX_CHUNK_CHARS`
    characters, on token boundaries; a single token longer than that is cut on characters."""
    encoded = tokenizer([text[start:end]], add_special_tokens=False, return_offsets_mapping=True)
    # Offsets are relative to `start`; one tuple per token, so no second list of them is made.
    offsets: list[tuple[int, int]] = encoded["offset_mapping"][0]  # type: ignore[assignment]
    pieces: list[_Unit] = []
    first = 0  # the piece being built is offsets[first:i]
    for i, (s, e) in enumerate(offsets):
        if i > first and (i - first >= budget or e - offsets[first][0] > MAX_CHUNK_CHARS):
            pieces.append(
                _Unit(start + offsets[first][0], start + offsets[i - 1][1], i - first, paragraph)
            )
            first = i
        if e - s > MAX_CHUNK_CHARS:
            pieces.extend(_cut_token(text, start + s, start + e, paragraph, tokenizer))
            first = i + 1
    if first < len(offsets):
        last = len(offsets) - first
        pieces.append(_Unit(start + offsets[first][0], start + offsets[-1][1], last, paragraph))
    return pieces


def _cut_token(
    text: str, start: int, end: int, paragraph: int, tokenizer: Tokenizer
) -> list[_Unit]:
    cuts = [(s, min(s + MAX_CHUNK_CHARS, end)) for s in range(start, end, MAX_CHUNK_CHARS)]
    counts = _count(tokenizer, [text[s:e] for s, e in cuts])
    return [_Unit(s, e, n, paragraph) for (s, e), n in zip(cuts, counts, strict=True)]


def _pack(units: list[_Unit], budget: int, overlap: float) -> list[tuple[int, int]]:
    """Greedy packing of units into [start, end) index ranges, with sentence overlap."""
    ranges: list[tuple[int, int]] = []
    overlap_budget = int(budget * overlap)
    start = 0
    while start < len(units):
        end = start
        used = 0
        while (
            end < len(units)
            and used + units[end].tokens <= budget
            and units[end].end - units[start].start <= MAX_CHUNK_CHARS
        ):
            used += units[end].tokens
            end += 1
        end = max(end, start + 1)
        ranges.append((start, end))
        if end >= len(units):
            break
        # Step back over trailing units that fit in the overlap, but always move forward, and
        # only as far as the next chunk still takes units[end]: else it repeats this one's tail.
        next_start = end
        carried = 0
        while next_start - 1 > start:
            unit = units[next_start - 1]
            if (
                carried + unit.tokens > overlap_budget
                or carried + unit.tokens + units[end].tokens > budget
                or units[end].end - unit.start > MAX_CHUNK_CHARS
            ):
                break
            carried += unit.tokens
            next_start -= 1
        start = next_start
    return ranges
