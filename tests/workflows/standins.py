"""Stand-in activities for workflow tests, held to the real ones.

A workflow test registers stand-ins by name, as Temporal's own samples do. A stand-in that drifts
from the activity it replaces (another name, another input or output type) would let the test
pass against a contract the workflow no longer has. `stand_in(Real.method)` takes the name from
the real activity and records the pair; tests/workflows/test_standins.py compares their types.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any, TypeVar

from temporalio import activity

F = TypeVar("F", bound=Callable[..., Any])

# (stand-in, real activity) for every stand-in defined so far (each module's at import).
STAND_INS: list[tuple[Callable[..., Any], Callable[..., Any]]] = []


def activity_name(real: Callable[..., Any]) -> str:
    definition = activity._Definition.from_callable(real)
    if definition is None:
        raise TypeError(f"{real.__qualname__} is not an activity")
    return definition.name


def contract(fn: Callable[..., Any]) -> tuple[list[Any], Any]:
    """An activity's input types (its parameters but `self`) and its result type."""
    hints = typing.get_type_hints(fn)
    names = [n for n in inspect.signature(fn).parameters if n != "self"]
    return [hints.get(n) for n in names], hints.get("return")


def stand_in(real: Callable[..., Any]) -> Callable[[F], F]:
    """`@stand_in(DocumentActivities.stage_batch)`: an activity under the real one's name."""

    def register(fn: F) -> F:
        STAND_INS.append((fn, real))
        return activity.defn(name=activity_name(real))(fn)

    return register
