"""bench/load.py reads an answer's degradations back into kinds: every fallback a workflow can
record has its row there, or the reliability suite would count it as "other"."""

from __future__ import annotations

import ast
from pathlib import Path

from bench.load import DEGRADATION_KINDS


def _kinds(node: ast.expr) -> set[str]:
    """The names a `kind` argument can take: a literal, or either branch of a conditional."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.IfExp):
        return _kinds(node.body) | _kinds(node.orelse)
    return set()


def test_every_kind_an_answer_can_degrade_by_is_recognised_from_its_message() -> None:
    """bench/load.degradation_kinds reads the kind back from the message in Answer.degradations:
    a fallback added to the answer's workflows needs its row there, or it counts as "other"."""
    recorded: set[str] = set()
    for module in ("retrieve.py", "answer.py"):
        tree = ast.parse((Path(__file__).parents[2] / "workflows" / module).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                position = {"degrade": 1, "best_effort": 2}.get(node.func.id)
                if position is not None and len(node.args) > position:
                    recorded |= _kinds(node.args[position])
    recognised = {kind for _, kind in DEGRADATION_KINDS} | {"fallback_model", "no_model"}
    assert recorded and recorded <= recognised, recorded - recognised
