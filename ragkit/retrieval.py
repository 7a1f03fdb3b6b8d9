"""Pure steps of the answer flow: fusion, context assembly, prompting and citation parsing.

No I/O here: the workflow calls these directly (they are deterministic), and unit tests cover them
without Temporal.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

FusionMethod = Literal["zscore", "rrf", "dbsf"]


@dataclass(frozen=True)
class Scored:
    key: str
    score: float


def fuse(
    dense: Sequence[Scored],
    keyword: Sequence[Scored],
    method: FusionMethod = "zscore",
    dense_weight: float = 0.7,
    keyword_weight: float = 0.3,
    rrf_k: int = 60,
    dense_min_spread: float = 0.0,
) -> list[Scored]:
    """Merge two ranked lists into one, best first.

    - zscore: weighted sum of each side's z-normalised scores; an item missing from one side gets
      that side's lowest z-score, so appearing in both lists is rewarded. The dense side is
      divided by at least `dense_min_spread`: when its candidates' cosines lie in a narrow band,
      the retriever has no clear preference, and dividing by that band's own spread would blow
      differences of a few thousandths up into a strong vote (it outvoted a clear BM25 winner
      on an exact alias; BENCHMARKS.md, retrieval).
    - rrf: reciprocal rank fusion, sum of weight / (k + rank).
    - dbsf: distribution-based score fusion, as Qdrant does it: each side's scores mapped to
      [0, 1] between mean - 3 sd and mean + 3 sd (clipped), summed (weights apply); an item
      missing from a side gets 0 there.
    """
    if method == "dbsf":
        summed: dict[str, float] = {}
        for weight, ranked in ((dense_weight, dense), (keyword_weight, keyword)):
            for key, value in _dbsf(ranked).items():
                summed[key] = summed.get(key, 0.0) + weight * value
        return _ordered(summed)
    if method == "rrf":
        fused: dict[str, float] = {}
        for weight, ranked in ((dense_weight, dense), (keyword_weight, keyword)):
            for rank, item in enumerate(ranked, start=1):
                fused[item.key] = fused.get(item.key, 0.0) + weight / (rrf_k + rank)
        return _ordered(fused)

    sides = []
    for weight, ranked, least in (
        (dense_weight, dense, dense_min_spread),
        (keyword_weight, keyword, 0.0),
    ):
        z = _zscores(ranked, least)
        floor = min(z.values()) if z else 0.0
        sides.append((weight, z, floor))
    keys = {item.key for item in dense} | {item.key for item in keyword}
    return _ordered(
        {key: sum(weight * z.get(key, floor) for weight, z, floor in sides) for key in keys}
    )


def _zscores(ranked: Sequence[Scored], least_spread: float = 0.0) -> dict[str, float]:
    if not ranked:
        return {}
    scores = [item.score for item in ranked]
    mean = statistics.fmean(scores)
    spread = max(statistics.pstdev(scores), least_spread) or 1.0
    return {item.key: (item.score - mean) / spread for item in ranked}


def _dbsf(ranked: Sequence[Scored]) -> dict[str, float]:
    if not ranked:
        return {}
    scores = [item.score for item in ranked]
    mean, spread = statistics.fmean(scores), statistics.pstdev(scores)
    low, high = mean - 3 * spread, mean + 3 * spread
    if high == low:
        return {item.key: 0.5 for item in ranked}
    return {item.key: min(1.0, max(0.0, (item.score - low) / (high - low))) for item in ranked}


def _ordered(scores: dict[str, float]) -> list[Scored]:
    # Ties break on the key so the order is deterministic (workflow replay depends on it).
    return [Scored(k, v) for k, v in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))]


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


# Workflow code holds no tokenizer: the context budget uses a conservative estimate (English BPE
# averages ~4 characters per token). The LLM worker checks the exact count before generating.
CHARS_PER_TOKEN = 3


def estimate_tokens(text: str) -> int:
    return len(text) // CHARS_PER_TOKEN + 1


def assemble_context(
    passages: Sequence[tuple[str, str, float]],
    budget_tokens: int,
    count_tokens: Callable[[str], int],
) -> tuple[list[tuple[str, str]], int]:
    """Fit (key, text, score) passages into a token budget.

    The lowest-scoring passages are dropped first. A passage that alone exceeds what is left is cut
    at a sentence end, never mid-sentence; if not even its first sentence fits, it is dropped.
    Returns the kept (key, text) pairs in score order, and how many were dropped.
    """
    kept: list[tuple[str, str]] = []
    left = budget_tokens
    dropped = 0
    for key, text, _ in sorted(passages, key=lambda p: -p[2]):
        tokens = count_tokens(text)
        if tokens <= left:
            kept.append((key, text))
            left -= tokens
            continue
        sentences = _SENTENCE_END.split(text)
        fitted = ""
        for sentence in sentences:
            candidate = f"{fitted} {sentence}".strip()
            if count_tokens(candidate) > left:
                break
            fitted = candidate
        if fitted:
            kept.append((key, fitted))
            left -= count_tokens(fitted)
        else:
            dropped += 1
    return kept, dropped


SYSTEM_PROMPT = (
    "You answer questions using only the numbered passages given. Cite the passages you use with "
    "their numbers in square brackets, like [1]. If the passages do not contain the answer, say "
    "that you don't know."
)


REWRITE_PROMPT = (
    "Rewrite the user's question as a short search query for a document index. Keep every name, "
    "technical term and number; drop filler words. Reply with the query only, on one line."
)


SUMMARY_PROMPT = (
    "You keep the memory of a conversation. Merge the summary so far with the new turns into one "
    "short summary. Keep every name, number, date and fact the user stated, and what was "
    "answered. Write plain sentences, no preamble."
)


def clean_rewrite(text: str, question: str) -> str:
    """The model's rewrite, or the question itself when the model returned nothing usable."""
    lines = [line.strip().strip("\"'`").strip() for line in text.strip().splitlines()]
    query = next((line for line in lines if line), "")
    query = re.sub(r"^(search query|query)\s*:\s*", "", query, flags=re.I).strip()
    if not query or len(query) > max(200, 2 * len(question)):
        return question
    return query


BUILTIN_USER_TEMPLATE = "{history}Passages:\n\n{passages}\n\nQuestion: {question}\nAnswer:"


def build_prompt(
    question: str,
    context: Sequence[tuple[str, str]],
    summary: str = "",
    template: str = BUILTIN_USER_TEMPLATE,
) -> str:
    """The user message: a template's `user` text with its placeholders filled. One pass over the
    template, so braces inside a question or a passage are never read as placeholders."""
    values = {
        "history": f"Conversation so far:\n{summary}\n\n" if summary else "",
        "passages": "\n\n".join(f"[{n}] {text}" for n, (_, text) in enumerate(context, start=1)),
        "question": question,
    }
    return re.sub(r"\{(history|passages|question)\}", lambda m: values[m.group(1)], template)


_MARKER = re.compile(r"\[(\d{1,3})\]")
_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "for",
        "from",
        "has",
        "have",
        "in",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "that",
        "the",
        "this",
        "to",
        "was",
        "were",
        "which",
        "with",
        "who",
        "what",
        "when",
        "where",
        "why",
        "how",
    ]
)


def parse_citations(
    answer: str, context: Sequence[tuple[str, str]]
) -> tuple[list[str], Literal["markers", "overlap", "none"]]:
    """Keys of the context passages the answer cites.

    Citation markers [n] are used when the model wrote valid ones; numbers outside the context are
    ignored, so every citation points at a passage that was in the context. A model that cites
    nothing (small models often don't) gets the passages sharing the most content words with
    its answer.
    """
    keys: list[str] = []
    for match in _MARKER.finditer(answer):
        n = int(match.group(1))
        if 1 <= n <= len(context) and context[n - 1][0] not in keys:
            keys.append(context[n - 1][0])
    if keys:
        return keys, "markers"
    answer_words = _content_words(answer)
    if not answer_words:
        return [], "none"
    overlaps = [
        (len(answer_words & _content_words(text)), i) for i, (_, text) in enumerate(context)
    ]
    best = max((o for o, _ in overlaps), default=0)
    if best < 2:
        return [], "none"
    return [context[i][0] for o, i in overlaps if o >= max(2, best * 0.6)][:3], "overlap"


def _content_words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP and len(w) > 2}


def normalize_question(question: str) -> str:
    """The cache key form of a question: case, punctuation and spacing do not matter."""
    return " ".join(_WORD.findall(question.lower()))


def keyword_query(question: str) -> str:
    """A websearch_to_tsquery string matching any of the question's words (OR), so a natural
    question still finds passages that share only some of its terms; ts_rank orders them."""
    words = _WORD.findall(question.lower())
    return " or ".join(dict.fromkeys(words)) or question
