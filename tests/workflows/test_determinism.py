"""Workflow code reads no clock, no randomness and no environment, and opens nothing: the orchestrator
passes the `workflows` package through the sandbox (workers/common.workflow_runner), so this test,
the import contracts and the replay test (under the full sandbox) are what keep it deterministic."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

WORKFLOWS = sorted((Path(__file__).resolve().parents[2] / "workflows").glob("*.py"))

# module -> attributes workflow code must not touch (workflow.now(), workflow.time(),
# workflow.random() and workflow.uuid4() are the deterministic ones).
FORBIDDEN = {
    "time": {"time", "monotonic", "perf_counter", "sleep", "time_ns", "process_time"},
    "datetime": {"now", "utcnow", "today"},
    "date": {"today"},
    "random": None,  # anything
    "uuid": {"uuid1", "uuid4"},
    "os": None,
    "threading": None,
    "subprocess": None,
    "socket": None,
}
FORBIDDEN_CALLS = {"open", "input", "print"}


def offences(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            banned = FORBIDDEN.get(node.value.id, set())
            if banned is None or node.attr in banned:
                found.append(f"{path.name}:{node.lineno} {node.value.id}.{node.attr}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in FORBIDDEN_CALLS:
                found.append(f"{path.name}:{node.lineno} {node.func.id}()")
        elif isinstance(node, ast.ImportFrom) and node.module in FORBIDDEN:
            banned = FORBIDDEN[node.module]
            for alias in node.names:
                if banned is None or alias.name in banned:
                    found.append(
                        f"{path.name}:{node.lineno} from {node.module} import {alias.name}"
                    )
    return found


@pytest.mark.parametrize("path", WORKFLOWS, ids=[p.name for p in WORKFLOWS])
def test_workflow_code_reads_no_clock_randomness_or_environment(path: Path) -> None:
    assert offences(path) == []


def test_the_scan_finds_what_it_forbids(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import time, os\nfrom uuid import uuid4\nx = time.time()\nos.getenv('A')\n")
    assert len(offences(bad)) == 3
