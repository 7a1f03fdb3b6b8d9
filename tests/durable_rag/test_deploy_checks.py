"""A deploy's health check reads the new build's metrics as its workers serve them: the SDK's
workflow task failures (the text below is what temporalio's Prometheus exporter printed for a
workflow whose task raised) and our activity attempts by outcome; and its ramp is validated."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from durable_rag.deploy import Health, parse_ramp, read_health
from ragkit.ids import conversation_of, conversation_workflow_id

SDK = """# HELP temporal_workflow_task_execution_failed Count of workflow task execution failures
# TYPE temporal_workflow_task_execution_failed counter
temporal_workflow_task_execution_failed{failure_reason="WorkflowError",namespace="default",\
service_name="temporal-core-sdk",task_queue="q",workflow_type="Bad"} 2
temporal_workflow_task_execution_failed{failure_reason="NonDeterminismError",namespace="default",\
service_name="temporal-core-sdk",task_queue="q",workflow_type="AnswerWorkflow"} 1
"""


def ours(completed: int, failed: int) -> str:
    registry = CollectorRegistry()
    seconds = Histogram(
        "durable_rag_activity_seconds", "", ["activity", "outcome"], registry=registry
    )
    for _ in range(completed):
        seconds.labels("generate", "completed").observe(0.1)
    for _ in range(failed):
        seconds.labels("generate", "failed").observe(0.1)
    return generate_latest(registry).decode()


def test_health_reads_task_failures_and_the_activity_error_rate() -> None:
    health = read_health([SDK, ours(18, 2)])
    assert (health.workflow_task_failures, health.nondeterminism) == (3, 1)
    assert (health.activities, health.activities_failed) == (20, 2)
    assert health.problems(0.2) == ["3 workflow task failure(s), 1 of them non-determinism"]
    step = read_health([ours(18, 2)]).since(read_health([ours(10, 0)]))
    assert step.error_rate == pytest.approx(0.2)
    assert step.problems(0.05) == ["activity error rate 20% (2 of 10) over 5%"]
    assert step.problems(0.25) == []
    assert Health(unreachable=("http://x/metrics",)).problems(1) == [
        "metrics unreachable at http://x/metrics"
    ]


def test_a_ramp_is_increasing_percentages_between_0_and_100() -> None:
    assert parse_ramp("10,50") == [10, 50]
    assert parse_ramp("") == []
    assert parse_ramp("5, 25.5 ,90") == [5, 25.5, 90]
    for bad in ("50,10", "0,50", "10,100", "10,10", "ten"):
        with pytest.raises(ValueError, match="--ramp"):
            parse_ramp(bad)


def test_a_conversations_workflow_id_gives_back_its_tenant_and_id() -> None:
    workflow_id = conversation_workflow_id("acme", "corp:42")
    assert conversation_of(workflow_id) == ("acme", "corp:42")
    assert conversation_of("answer-abc") is None
    assert conversation_of("conversation-legacy-id") is None
