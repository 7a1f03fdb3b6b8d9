"""The patch discipline, checked (README, *Changing a workflow*): a change to a workflow's code is
another build, and a history recorded on the old code replays on the new one only if the change
is patched. Build B (bench/next_build.py: a new first command in the answer and conversation
workflows) is written beside this tree three ways and replayed there, in a process of its own
(its modules are not this process's): unpatched, the replay gate fails with a non-determinism
error; behind `workflow.patched`, it passes; either way the build id changed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.next_build import next_build
from ragkit.deployments import computed_build_id

pytestmark = pytest.mark.workflow

HISTORIES = Path(__file__).parent / "histories"
REPLAYED = ("answer.json", "conversation.json")
REPLAY = """
import asyncio, json, os, sys
from pathlib import Path
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer
from workers.orchestrator import WORKFLOWS

async def main():
    found = {}
    for path in map(Path, sys.argv[1:]):
        recorded = json.loads(path.read_text())
        history = WorkflowHistory.from_json(recorded.pop("workflowId", path.stem), recorded)
        replayer = Replayer(workflows=WORKFLOWS, data_converter=pydantic_data_converter)
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        failure = result.replay_failure
        found[path.name] = type(failure).__name__ + ": " + str(failure) if failure else "ok"
    print(json.dumps(found), flush=True)

asyncio.run(main())
# Out without the interpreter's finalization: the SDK's core threads may still hand the GIL
# back then, which once aborted the process (PyGILState_Release) after its answer was printed.
os._exit(0)
"""


def replayed(root: Path) -> dict[str, str]:
    done = subprocess.run(
        [sys.executable, "-c", REPLAY, *(str(HISTORIES / name) for name in REPLAYED)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, str] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_an_unpatched_change_is_a_new_build_and_fails_the_replay_gate(tmp_path: Path) -> None:
    root = next_build(tmp_path / "b")
    assert computed_build_id(root) != computed_build_id()
    for name, outcome in replayed(root).items():
        assert outcome.startswith("NondeterminismError"), (name, outcome)


def test_the_same_change_behind_a_patch_replays_the_old_histories(tmp_path: Path) -> None:
    root = next_build(tmp_path / "b", patch="build-b-first-timer")
    assert computed_build_id(root) != computed_build_id()
    assert replayed(root) == {name: "ok" for name in REPLAYED}
