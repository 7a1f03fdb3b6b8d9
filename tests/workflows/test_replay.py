"""Every workflow replays its recorded histories: a code change that breaks determinism fails here.

Histories live in tests/workflows/histories/ and are recorded by running the integration tests with
DURABLE_RAG_RECORD_HISTORIES=1 (see README, "Changing a workflow").
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from ragkit import tracing
from tests.spans import recorded
from workers.orchestrator import WORKFLOWS

pytestmark = pytest.mark.workflow

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


def workflow_type(history: dict) -> str:  # type: ignore[type-arg]
    first = history["events"][0]
    return first["workflowExecutionStartedEventAttributes"]["workflowType"]["name"]


def test_every_workflow_has_a_recorded_history() -> None:
    recorded = {workflow_type(json.loads(p.read_text())) for p in HISTORIES}
    registered = {w.__name__ for w in WORKFLOWS}
    assert registered <= recorded, f"no recorded history for {registered - recorded}"


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_history_replays(path: Path) -> None:
    recorded = json.loads(path.read_text())
    history = WorkflowHistory.from_json(recorded.pop("workflowId", path.stem), recorded)
    replayer = Replayer(workflows=WORKFLOWS, data_converter=pydantic_data_converter)
    await replayer.replay_workflow(history)


async def test_a_replayed_history_emits_no_spans() -> None:
    """With tracing on, a worker that replays a run (after a restart, on a cache eviction) must
    not emit its workflow spans again: Temporal's interceptor skips them on replay, and nothing
    of ours is made in workflow code. Every recorded history, through the same interceptor the
    workers get (ragkit/tracing.py)."""
    with recorded() as exporter:
        interceptors = tracing.interceptors()
        assert [type(i).__name__ for i in interceptors] == ["TracingInterceptor"]
        replayer = Replayer(
            workflows=WORKFLOWS, data_converter=pydantic_data_converter, interceptors=interceptors
        )
        for path in HISTORIES:
            saved = json.loads(path.read_text())
            history = WorkflowHistory.from_json(saved.pop("workflowId", path.stem), saved)
            await replayer.replay_workflow(history)
    assert exporter.get_finished_spans() == ()
