"""bench/serving.py reads each answer's history into hops and counts: a workflow task that timed
out is reported with which task it was and how it timed out, since each one costs its answer the
task timeout."""

from __future__ import annotations

from temporalio.api.enums.v1 import TaskQueueKind, TimeoutType
from temporalio.api.history.v1 import HistoryEvent

from bench.hops import dispatch_counts, read_hops


def event(n: int, at: float) -> HistoryEvent:
    e = HistoryEvent(event_id=n)
    e.event_time.FromNanoseconds(int(at * 1e9))
    return e


def scheduled(n: int, at: float, kind: TaskQueueKind.ValueType) -> HistoryEvent:
    e = event(n, at)
    e.workflow_task_scheduled_event_attributes.task_queue.kind = kind
    return e


def started(n: int, at: float) -> HistoryEvent:
    e = event(n, at)
    e.workflow_task_started_event_attributes.scheduled_event_id = n - 1
    return e


def timed_out(n: int, at: float, timeout: TimeoutType.ValueType) -> HistoryEvent:
    e = event(n, at)
    e.workflow_task_timed_out_event_attributes.timeout_type = timeout
    return e


def test_a_task_that_never_started_counts_as_the_next_one_with_its_queue() -> None:
    history = [
        scheduled(1, 100.0, TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
        started(2, 100.01),
        # the second task, on the worker's sticky queue, is never picked up
        scheduled(3, 101.0, TaskQueueKind.TASK_QUEUE_KIND_STICKY),
        timed_out(4, 106.0, TimeoutType.TIMEOUT_TYPE_SCHEDULE_TO_START),
        scheduled(5, 106.0, TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
        started(6, 106.01),
    ]
    hops = read_hops(history, called_at=99.99, returned_at=107.0)
    assert hops.task_timeouts == 1
    assert hops.task_timeout_kinds == ["task 2 schedule_to_start (sticky)"]


def test_a_task_that_ran_over_counts_as_the_one_started_and_both_kinds_are_totalled() -> None:
    ran_over = read_hops(
        [
            scheduled(1, 100.0, TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
            started(2, 100.01),
            timed_out(3, 105.01, TimeoutType.TIMEOUT_TYPE_START_TO_CLOSE),
        ],
        called_at=99.99,
        returned_at=110.0,
    )
    assert ran_over.task_timeout_kinds == ["task 1 start_to_close (normal)"]
    clean = read_hops(
        [scheduled(1, 100.0, TaskQueueKind.TASK_QUEUE_KIND_NORMAL), started(2, 100.01)],
        called_at=99.99,
        returned_at=100.5,
    )
    counts = dispatch_counts([ran_over, ran_over, clean])
    assert counts["workflow_task_timeouts"] == 2
    assert counts["workflow_task_timeout_kinds"] == {"task 1 start_to_close (normal)": 2}
