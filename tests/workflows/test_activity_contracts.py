"""Every activity input and result recorded in the replay histories still decodes with today's
schemas, and with a field a newer build added. With versioned workers a run pinned to an older
build calls activities on the LLM and index queues, which today's build of those workers runs,
and an older build reads what a newer one wrote during a deploy (ARCHITECTURE.md, *Versioned
workers*); a run moved onto a new build replays its recorded results there. So a contract may
only gain optional fields, and ignores those it does not know: a new required field, a renamed
or retyped one fails here."""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import pkgutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio import activity
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter

import activities

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


@functools.cache
def activity_types() -> dict[str, tuple[list[Any], Any]]:
    """Activity name -> (its input types, its result type), from the activity classes."""
    found: dict[str, tuple[list[Any], Any]] = {}
    for info in pkgutil.iter_modules(activities.__path__):
        module = importlib.import_module(f"activities.{info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != module.__name__:
                continue
            for _, method in inspect.getmembers(cls, inspect.isfunction):
                definition = activity._Definition.from_callable(method)
                if definition is not None:
                    found[definition.name] = (list(definition.arg_types or []), definition.ret_type)
    return found


def recorded_calls(path: Path) -> list[tuple[str, Any, Any]]:
    """(activity name, its input payloads, its result payloads) of one history: None where
    the history does not hold them (a local activity's input, an unfinished call's result)."""
    recorded = json.loads(path.read_text())
    history = WorkflowHistory.from_json(recorded.pop("workflowId", path.stem), recorded)
    scheduled: dict[int, tuple[str, Any]] = {}
    calls = []
    for event in history.events:
        if event.HasField("activity_task_scheduled_event_attributes"):
            attributes = event.activity_task_scheduled_event_attributes
            scheduled[event.event_id] = (attributes.activity_type.name, attributes.input.payloads)
        elif event.HasField("activity_task_completed_event_attributes"):
            completed = event.activity_task_completed_event_attributes
            name, inputs = scheduled.pop(completed.scheduled_event_id)
            calls.append((name, inputs, completed.result.payloads))
        elif event.HasField("marker_recorded_event_attributes"):
            # A local activity (the live path's): its marker keeps the result, not the input.
            marker = event.marker_recorded_event_attributes
            if marker.marker_name == "core_local_activity" and "result" in marker.details:
                data = json.loads(marker.details["data"].payloads[0].data)
                calls.append((data["activity_type"], None, marker.details["result"].payloads))
    calls += [(name, inputs, None) for name, inputs in scheduled.values()]
    return calls


def test_the_histories_record_most_activities() -> None:
    """The check below sees what the histories hold: most of today's activities."""
    seen = {name for path in HISTORIES for name, _, _ in recorded_calls(path)}
    assert len(seen) >= len(activity_types()) // 2, sorted(seen)
    assert seen <= set(activity_types()), seen - set(activity_types())


def decode_all(path: Path, written: Callable[[Any], Any] = list) -> None:
    """Every recorded input and result of `path`, as `written` turns its payloads, decoded with
    today's types."""
    types = activity_types()
    converter = pydantic_data_converter.payload_converter
    for name, inputs, result in recorded_calls(path):
        arg_types, ret_type = types[name]
        if inputs is not None:
            decoded = converter.from_payloads(written(inputs), arg_types)
            assert len(decoded) == len(arg_types), name
        if result and ret_type is not type(None):
            converter.from_payloads(written(result), [ret_type])


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
def test_recorded_activity_inputs_and_results_decode_with_todays_schemas(path: Path) -> None:
    decode_all(path)


def with_a_newer_field(payloads: Any) -> list[Any]:
    """The payloads as a newer build would write them: one field more in each JSON object."""
    out = []
    for payload in payloads:
        value = json.loads(payload.data)
        if isinstance(value, dict):
            value["added_by_a_newer_build"] = {"n": 1}
        copy = type(payload)()
        copy.CopyFrom(payload)
        copy.data = json.dumps(value).encode()
        out.append(copy)
    return out


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
def test_an_older_build_reads_what_a_newer_one_wrote(path: Path) -> None:
    decode_all(path, with_a_newer_field)
