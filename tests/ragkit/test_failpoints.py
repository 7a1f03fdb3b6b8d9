"""Failpoints switch on and off from outside a running process, and raise what a real failure
would (disk full is a real ENOSPC, which the index activities report as retryable)."""

from __future__ import annotations

import errno
from collections.abc import Iterator
from pathlib import Path

import pytest

from activities.errors import index_error
from ragkit import failpoints


@pytest.fixture
def points(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "failpoints.json"
    failpoints.configure(path)
    yield path
    failpoints.configure(None)


def test_off_without_a_file_setting() -> None:
    failpoints.configure(None)
    assert not failpoints.enabled()
    failpoints.hit("embedding")  # nothing happens
    assert failpoints.delay_for("dense_search") == 0


def test_a_fault_is_switched_on_and_off_while_running(points: Path) -> None:
    failpoints.hit("embedding")  # no file yet: no fault
    failpoints.write(points, {"embedding": {"error": "model failing"}})
    with pytest.raises(failpoints.InjectedFault, match="model failing"):
        failpoints.hit("embedding")
    failpoints.hit("index")  # another point is untouched
    failpoints.write(points, {})
    failpoints.hit("embedding")


def test_disk_full_is_a_real_enospc_and_a_retryable_index_failure(points: Path) -> None:
    failpoints.write(points, {"index_write": {"error": "disk_full"}})
    with pytest.raises(OSError) as raised:
        failpoints.hit("index_write")
    assert raised.value.errno == errno.ENOSPC
    failure = index_error(raised.value)
    assert failure.type == "IndexDiskFull" and not failure.non_retryable


def test_activity_delays(points: Path) -> None:
    failpoints.write(points, {"activity:dense_search": {"delay_seconds": 8}})
    assert failpoints.delay_for("dense_search") == 8
    assert failpoints.delay_for("keyword_search") == 0


def test_a_broken_file_keeps_what_was_set(points: Path) -> None:
    failpoints.write(points, {"index": {"error": "down"}})
    with pytest.raises(failpoints.InjectedFault):
        failpoints.hit("index")
    points.write_text("{not json")
    with pytest.raises(failpoints.InjectedFault):
        failpoints.hit("index")
