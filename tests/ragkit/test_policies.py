"""The activity policy table is complete, and operators can override it."""

from __future__ import annotations

import ast
import inspect
from datetime import timedelta
from pathlib import Path

import pytest

from ragkit import policies
from ragkit.settings import Settings
from workers import index, llm, orchestrator

ROOT = Path(__file__).resolve().parents[2]


def activities_called_by_workflows() -> set[str]:
    """Every `Class.method` passed to `call(...)` in workflows/."""
    names: set[str] = set()
    for path in (ROOT / "workflows").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "call":
                target = node.args[0]
                assert isinstance(target, ast.Attribute), ast.unparse(node)
                names.add(target.attr)
            # No workflow may call execute_activity directly: the table would be bypassed.
            if isinstance(node, ast.Attribute) and node.attr.startswith("execute_activity"):
                assert path.name == "calls.py", f"{path.name} calls {node.attr} directly"
    return names


def activities_registered_by_workers() -> set[str]:
    names: set[str] = set()
    for module in (orchestrator, index, llm):
        source = inspect.getsource(module.build_worker)
        tree = ast.parse(source.strip())
        # The activities are listed in list displays (`activities=[...]`, or lists the
        # orchestrator composes into its bulk and live workers).
        for node in ast.walk(tree):
            if isinstance(node, ast.List):
                names |= {elt.attr for elt in node.elts if isinstance(elt, ast.Attribute)}
    return names


def test_every_called_activity_has_a_policy_row() -> None:
    called = activities_called_by_workflows()
    assert called, "found no activity calls: the scan is broken"
    assert called <= set(policies.DECLARED), called - set(policies.DECLARED)


def test_every_registered_activity_has_a_policy_row_and_vice_versa() -> None:
    assert activities_registered_by_workers() == set(policies.DECLARED)


def test_every_row_declares_a_fallback_and_bounded_retries() -> None:
    for name, policy in policies.DECLARED.items():
        assert isinstance(policy.fallback, policies.Fallback), name
        assert policy.retry.maximum_attempts > 0, f"{name} would retry forever"
        assert set(policies.PERMANENT) <= set(policy.retry.non_retryable_error_types or []), name
        assert policy.expected_latency, name


def test_long_activities_heartbeat() -> None:
    for name, policy in policies.DECLARED.items():
        if policy.start_to_close > timedelta(minutes=10):
            assert policy.heartbeat is not None, f"{name} runs long without a heartbeat"


def test_settings_override_a_row_and_the_queue_names() -> None:
    settings = Settings(
        activity_policies={"index_documents": {"heartbeat_seconds": 5, "maximum_attempts": 3}},
        index_task_queue="gpu-index",
    )
    table = policies.PolicyTable.from_settings(settings)
    policy = table.policy_for("index_documents")
    assert policy.heartbeat == timedelta(seconds=5)
    assert policy.retry.maximum_attempts == 3
    assert policy.start_to_close == policies.DECLARED["index_documents"].start_to_close
    assert table.queue_name(policy.queue) == "gpu-index"
    # The declared table is untouched, and a table cannot be changed once built.
    assert (
        policies.PolicyTable.declared().policy_for("index_documents")
        == (policies.DECLARED["index_documents"])
    )
    with pytest.raises(TypeError):
        table.rows["index_documents"] = policy  # type: ignore[index]


def test_override_of_an_unknown_activity_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown activity 'nope'"):
        policies.PolicyTable.from_settings(
            Settings(activity_policies={"nope": {"heartbeat_seconds": 5}})
        )


def test_policy_override_values_are_validated() -> None:
    with pytest.raises(ValueError):
        Settings(activity_policies={"stage_batch": {"maximum_attempts": -1}})


def test_local_activities_run_where_the_workflows_run() -> None:
    """A local activity runs in the worker of the calling workflow: the orchestrator's."""
    source = inspect.getsource(orchestrator.build_worker)
    local = [name for name, policy in policies.DECLARED.items() if policy.local]
    assert local, "no local activity declared: the scan is broken"
    for name in local:
        policy = policies.DECLARED[name]
        assert policy.queue is policies.Queue.WORKFLOW, name
        assert policy.heartbeat is None and policy.schedule_to_start is None, name
        assert f".{name}," in source, f"{name} is not registered by the orchestrator worker"
