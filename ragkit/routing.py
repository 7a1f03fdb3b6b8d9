"""Model routing (R27): simple questions to a small model's queue, hard ones to a large model's.

Pure, so the answer workflow calls it deterministically, and its rules are unit-tested. The rules,
in order (the first that fires decides):
1. `long_question`: more words than `max_simple_words`;
2. `hard_question`: a reasoning cue (`why`, `compare`, `explain`, ...: `hard_words`);
3. `low_confidence`: the best vector match's similarity is under `min_confidence` (retrieval is
   unsure, so the answer needs the stronger model); skipped when vector search did not serve;
4. otherwise `simple`: the small model.
"""

from __future__ import annotations

import re

from schemas.answer import ModelChoice, RoutingPlan

_WORD = re.compile(r"[\w'-]+")


def choose_model(question: str, top_similarity: float | None, plan: RoutingPlan) -> ModelChoice:
    words = _WORD.findall(question.lower())
    if len(words) > plan.max_simple_words:
        return ModelChoice(
            model=plan.large_model,
            rule="long_question",
            reason=f"{len(words)} words, over {plan.max_simple_words}",
        )
    text = " " + " ".join(words) + " "
    cue = next((w for w in plan.hard_words if f" {w.lower()} " in text), None)
    if cue is not None:
        return ModelChoice(
            model=plan.large_model, rule="hard_question", reason=f"reasoning cue {cue!r}"
        )
    if top_similarity is not None and top_similarity < plan.min_confidence:
        return ModelChoice(
            model=plan.large_model,
            rule="low_confidence",
            reason=f"best passage similarity {top_similarity:.2f}, under {plan.min_confidence:g}",
        )
    return ModelChoice(
        model=plan.small_model,
        rule="simple",
        reason=f"{len(words)} words, no reasoning cue"
        + ("" if top_similarity is None else f", similarity {top_similarity:.2f}"),
    )
