"""Build B for the fault matrix's `deploy` row: a copy of this checkout whose answer and
conversation workflows run one more command first (a 1 ms timer), so that build A's histories
would not replay on it: the change a `workflow.patched` branch exists for, deployed here without
one. Its workers run from the copy (their working directory comes first on `sys.path`); it
computes a build id of its own (ragkit/deployments.py)."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# What a worker or the CLI imports from the checkout; the models stay where they are (.data).
PACKAGES = (
    "activities",
    "cli",
    "durable_rag",
    "evals",
    "gateway",
    "migrations",
    "ragkit",
    "schemas",
    "workers",
    "workflows",
)
CHANGED = {
    "workflows/answer.py": "AnswerWorkflow",
    "workflows/conversation.py": "ConversationWorkflow",
}
MARK = "await workflow.sleep(0.001)  # build B: a command build A's histories do not have"


def with_a_new_first_command(
    source: str, workflow_class: str, patch: str | None = None, commands: int = 1
) -> str:
    """`source` with MARK (`commands` times) as the first statements of `workflow_class.run`;
    with `patch`, behind `workflow.patched(patch)`, as a change that old runs must replay is
    made. Builds with another count of commands cannot replay each other's histories."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == workflow_class:
            for item in node.body:
                if isinstance(item, ast.AsyncFunctionDef) and item.name == "run":
                    body = item.body
                    docstring = (
                        isinstance(body[0], ast.Expr)
                        and isinstance(body[0].value, ast.Constant)
                        and isinstance(body[0].value.value, str)
                    )
                    first = body[1] if docstring and len(body) > 1 else body[0]
                    lines = source.splitlines(keepends=True)
                    indent = " " * first.col_offset
                    change = f"{indent}{MARK}\n" * commands
                    if patch is not None:
                        change = f"{indent}if workflow.patched({patch!r}):\n" + "".join(
                            f"    {line}" for line in change.splitlines(keepends=True)
                        )
                    lines.insert(first.lineno - 1, change)
                    return "".join(lines)
    raise ValueError(f"no `async def run` in a class {workflow_class}")


def next_build(into: Path, root: Path = ROOT, patch: str | None = None, commands: int = 1) -> Path:
    """A copy of `root`'s code at `into`, with the change (behind `patch`, if given); returns
    `into`."""
    into.mkdir(parents=True, exist_ok=True)
    for package in PACKAGES:
        shutil.copytree(
            root / package, into / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy(root / "alembic.ini", into / "alembic.ini")
    (into / ".data").symlink_to(root / ".data")
    for relative, workflow_class in CHANGED.items():
        path = into / relative
        path.write_text(with_a_new_first_command(path.read_text(), workflow_class, patch, commands))
    return into
