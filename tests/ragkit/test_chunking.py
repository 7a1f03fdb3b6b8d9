import itertools
from functools import cache
from typing import Any

import pytest

from ragkit import parsing
from ragkit.chunking import _count, chunk_document
from ragkit.embedding import load_tokenizer
from ragkit.settings import PACKAGED_MINILM


@cache
def tokenizer() -> Any:
    return load_tokenizer(PACKAGED_MINILM)


def count(text: str) -> int:
    return len(tokenizer()([text], add_special_tokens=False)["input_ids"][0])


def sentences(n: int, topic: str) -> str:
    return " ".join(f"Sentence {i} about {topic} carries a few plain words." for i in range(n))


def test_chunks_respect_budget_and_never_cross_headings() -> None:
    text = f"# Doc\n\n## Alpha\n\n{sentences(60, 'alpha')}\n\n## Beta\n\n{sentences(5, 'beta')}\n"
    doc = parsing.parse(text.encode(), "markdown", "f")
    chunks = chunk_document(doc, tokenizer(), chunk_tokens=128, overlap=0.15)
    assert len(chunks) > 3
    for chunk in chunks:
        heading_tokens = count(chunk.heading_path)
        assert count(chunk.text) <= 128 - heading_tokens + 2  # joins may merge a token or two
        assert ("alpha" in chunk.text) != ("beta" in chunk.text)
        assert chunk.text == doc.text[chunk.char_start : chunk.char_end]
    assert [c.ordinal for c in chunks] == list(range(len(chunks)))
    assert chunks[-1].heading_path == "Doc > Beta"


def test_consecutive_chunks_overlap_by_10_to_20_percent() -> None:
    doc = parsing.parse(f"# D\n\n{sentences(200, 'x')}".encode(), "markdown", "f")
    chunks = chunk_document(doc, tokenizer(), chunk_tokens=256, overlap=0.15)
    assert len(chunks) >= 4
    for first, second in itertools.pairwise(chunks):
        shared = first.char_end - second.char_start
        assert shared > 0, "consecutive chunks of a section share text"
        shared_tokens = count(doc.text[second.char_start : first.char_end])
        assert 0.05 * 256 <= shared_tokens <= 0.20 * 256


def test_sentence_longer_than_budget_is_cut_on_token_boundaries() -> None:
    long_sentence = " ".join(f"word{i}" for i in range(900))
    doc = parsing.parse(f"# D\n\n{long_sentence}".encode(), "markdown", "f")
    chunks = chunk_document(doc, tokenizer(), chunk_tokens=128, overlap=0.1)
    assert len(chunks) > 5
    assert all(c.token_count <= 128 for c in chunks)
    covered = "".join(c.text for c in chunks)
    assert "word899" in covered and "word0" in covered


def test_chunking_is_deterministic() -> None:
    doc = parsing.parse(f"# D\n\n{sentences(80, 'y')}".encode(), "markdown", "f")
    a = chunk_document(doc, tokenizer(), 128, 0.15)
    b = chunk_document(doc, tokenizer(), 128, 0.15)
    assert a == b


def test_invalid_overlap() -> None:
    doc = parsing.parse(b"# D\n\ntext", "markdown", "f")
    with pytest.raises(ValueError):
        chunk_document(doc, tokenizer(), 128, 0.6)


def test_token_counts_match_the_tokenizer_and_ignore_its_truncation() -> None:
    # A freshly loaded MiniLM's Rust tokenizer truncates and pads to 128; counting through it
    # directly would cap every sentence at 128 tokens and chunks would overflow the budget.
    fresh = load_tokenizer(PACKAGED_MINILM)
    assert fresh.backend_tokenizer.truncation is not None  # else this test proves nothing
    before = fresh.backend_tokenizer.truncation
    texts = ["word " * 300, "Hi.", "", "naïve café, 東京 and emoji 🎉.", "x" * 5_000]
    counts = _count(fresh, texts)  # before any call through the wrapper, which resets it
    assert fresh.backend_tokenizer.truncation == before  # the shared tokenizer is untouched
    expected = [len(ids) for ids in fresh(texts, add_special_tokens=False)["input_ids"]]
    assert expected[0] == 300
    assert counts == expected
