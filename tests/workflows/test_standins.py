"""Every stand-in activity of the workflow tests has the name and types of the real one."""

from __future__ import annotations

import re
from pathlib import Path

import tests.workflows.test_calls
import tests.workflows.test_ingest_fallbacks
import tests.workflows.test_rebuild  # noqa: F401  (their stand-ins register at import)
from activities.documents import DocumentActivities
from schemas.ingest import DiscoverInput, StageBatchInput, StageBatchOutput
from tests.workflows.standins import STAND_INS, activity_name, contract, stand_in


def test_every_stand_in_has_the_real_activitys_name_and_types() -> None:
    assert len(STAND_INS) >= 12, "the workflow tests' stand-ins did not register"
    for fake, real in STAND_INS:
        assert activity_name(fake) == activity_name(real), fake.__qualname__
        assert contract(fake) == contract(real), (fake.__qualname__, real.__qualname__)


def test_a_drifted_stand_in_is_caught() -> None:
    @stand_in(DocumentActivities.stage_batch)
    def stage_batch(request: DiscoverInput) -> StageBatchOutput:  # the wrong input type
        raise NotImplementedError

    @stand_in(DocumentActivities.stage_batch)
    def right(request: StageBatchInput) -> StageBatchOutput:
        raise NotImplementedError

    try:
        assert contract(stage_batch) != contract(DocumentActivities.stage_batch)
        assert contract(right) == contract(DocumentActivities.stage_batch)
        assert activity_name(right) == "stage_batch"
    finally:
        del STAND_INS[-2:]


def test_no_test_registers_an_activity_by_a_bare_name() -> None:
    """An activity defined by a bare name in a test (not through `stand_in`) escapes the check."""
    tests = Path(__file__).resolve().parents[1]
    bare = [
        f"{path.relative_to(tests)}:{n}"
        for path in tests.rglob("*.py")
        for n, line in enumerate(path.read_text().splitlines(), start=1)
        if re.search(r"@activity\.defn\(name=", line)
    ]
    assert bare == [], bare
