"""The workers' sandbox answers the SDK's per-payload context lookups without `exec`: the
answers must be the ones the SDK's own sandbox gives, for every recorded history."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer, WorkflowInstance, WorkflowInstanceDetails
from temporalio.worker.workflow_sandbox._runner import _Instance as SdkInstance

from workers.common import _DirectContextInstance, _Sandbox, workflow_runner
from workers.orchestrator import WORKFLOWS

HISTORIES = sorted((Path(__file__).parents[1] / "workflows" / "histories").glob("*.json"))


class _Compared(_DirectContextInstance):
    """Answers each lookup both ways and keeps what each gave."""

    seen: ClassVar[list[tuple[str, Any, Any]]] = []

    def get_serialization_context(self, command_info: Any) -> Any:
        ours = super().get_serialization_context(command_info)
        self.seen.append(
            ("serialization", ours, SdkInstance.get_serialization_context(self, command_info))
        )
        return ours

    def get_external_store_context(self, command_info: Any) -> Any:
        ours = super().get_external_store_context(command_info)
        self.seen.append(
            ("store", ours, SdkInstance.get_external_store_context(self, command_info))
        )
        return ours


class _ComparingSandbox(_Sandbox):
    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return _Compared(det, self.runner_class, self.restrictions)


def test_the_workers_run_workflows_in_the_sandbox() -> None:
    runner = workflow_runner()
    assert isinstance(runner, _Sandbox)
    assert "workflows" in runner.restrictions.passthrough_modules


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_context_lookups_match_the_sdks_sandbox(path: Path) -> None:
    recorded = json.loads(path.read_text())
    history = WorkflowHistory.from_json(recorded.pop("workflowId", path.stem), recorded)
    base = workflow_runner()
    runner = _ComparingSandbox(restrictions=base.restrictions)
    _Compared.seen = []
    replayer = Replayer(
        workflows=WORKFLOWS, data_converter=pydantic_data_converter, workflow_runner=runner
    )
    await replayer.replay_workflow(history)
    # The SDK still asks (a renamed hook would leave ours unused and this list empty).
    assert {kind for kind, _, _ in _Compared.seen} == {"serialization", "store"}
    assert [(kind, ours) for kind, ours, _ in _Compared.seen] == [
        (kind, sdk) for kind, _, sdk in _Compared.seen
    ]
