"""Hot model swap (R13): which served model answers by default, and switching it with no request
dropped or failed.

Each model has its own LLM queue (`llm-<served name>`). The alias `default` in Postgres names the
model new answers go to; clients read it for every request, so switching it is one committed row.
A swap:
1. waits until a worker polls the new model's queue (a worker polls only once its model is
   loaded); on timeout nothing changed;
2. switches the alias: every answer started from then on uses the new model;
3. waits until every answer started before the switch has closed (Temporal visibility): such an
   answer may still schedule its generation on the old queue, so that queue keeps its worker;
4. stops the old worker, which drains: it polls no more and finishes the generations it holds
   (`worker_drain_seconds`) before it exits.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import Session, sessionmaker
from temporalio.client import Client

from ragkit import policies
from ragkit.store import model_alias
from ragkit.temporal import queue_has_poller


class SwapError(RuntimeError):
    """The swap did not happen; the alias still names the old model."""


@dataclass(frozen=True)
class SwapReport:
    previous: str
    model: str
    waited_seconds: float  # until the new model's worker polled
    settled_seconds: float  # until the answers started before the switch had closed
    drained_seconds: float  # until the old worker had stopped


async def answers_started_before(client: Client, moment: datetime) -> int:
    """How many answers that started before `moment` are still running."""
    stamp = moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    found = await client.count_workflows(
        f"WorkflowType = 'AnswerWorkflow' AND ExecutionStatus = 'Running' AND StartTime < '{stamp}'"
    )
    return found.count


async def swap(
    client: Client,
    sessions: sessionmaker[Session],
    model: str,
    fallback: str,
    stop_old: Callable[[str], Awaitable[None]] | None = None,
    ready_timeout: float = 600.0,
    settle_timeout: float = 600.0,
) -> SwapReport:
    """Switch the default model to `model` once its worker polls, then stop the old worker
    (`stop_old(previous)` returns when it has drained)."""
    queue = policies.llm_queue(model)
    started = time.monotonic()
    while not await queue_has_poller(client, queue):
        if time.monotonic() - started > ready_timeout:
            raise SwapError(
                f"no worker polls {queue} after {ready_timeout:g} s: start one for {model!r} "
                "first; the default model is unchanged"
            )
        await asyncio.sleep(0.5)
    waited = time.monotonic() - started
    previous = await asyncio.to_thread(model_alias.activate, sessions, model, fallback)
    # A margin for clock skew and visibility lag: waiting for a few answers too many is harmless.
    switched = datetime.now(UTC) + timedelta(seconds=2)
    settling = time.monotonic()
    await asyncio.sleep(1.0)
    while await answers_started_before(client, switched) and (
        time.monotonic() - settling < settle_timeout
    ):
        await asyncio.sleep(0.5)
    settled = time.monotonic() - settling
    draining = time.monotonic()
    if stop_old is not None and previous != model:
        await stop_old(previous)
    return SwapReport(previous, model, waited, settled, time.monotonic() - draining)
