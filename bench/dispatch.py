"""Task dispatch on the embedded Temporal dev server: the stack's settings against the defaults.

    .venv/bin/python bench/dispatch.py [--workflows N] [--activities K] [--json PATH]

A workflow runs K no-op activities one after the other, on another task queue than its own (as the
flows do: the orchestrator runs the workflow, the index and LLM workers the activities). Nothing
else runs, so its duration is the server's dispatch: each activity is two trips through the
history shard's transfer queue (the activity task, then the next workflow task). Two dev servers
are started, one after the other, each on a fresh SQLite file: one as `durable-rag up` starts it
(`durable_rag/stack/temporal.py`: SQLITE_PRAGMAS and DYNAMIC_CONFIG), one with the server's own dynamic
config. Prints P50/P99 per workflow and per activity for both, and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from temporalio import activity, workflow  # noqa: E402
from temporalio.client import Client  # noqa: E402
from temporalio.worker import UnsandboxedWorkflowRunner, Worker  # noqa: E402

from bench.load import percentile  # noqa: E402
from durable_rag.stack import process, temporal  # noqa: E402

WARMUP = 5


@activity.defn
async def nothing(step: int) -> int:
    return step


@workflow.defn
class Chain:
    @workflow.run
    async def run(self, queue: str, steps: int) -> int:
        for step in range(steps):
            await workflow.execute_activity(
                nothing, step, task_queue=queue, start_to_close_timeout=timedelta(seconds=10)
            )
        return steps


async def measure(dynamic_config: tuple[str, ...], workflows: int, steps: int) -> list[float]:
    """Milliseconds per workflow, on a fresh dev server with `dynamic_config`."""
    data = Path(tempfile.mkdtemp(prefix="dispatch-"))
    server = temporal.TemporalDevServer(
        data, process.free_port(), None, process.free_port(), dynamic_config=dynamic_config
    )
    await asyncio.to_thread(server.start)
    try:
        client = await Client.connect(server.address)
        own, other = f"chain-{uuid.uuid4().hex[:8]}", f"steps-{uuid.uuid4().hex[:8]}"
        # The sandbox is left out: it is the server's dispatch being measured, and the sandbox
        # made no difference to these figures (350 ms either way, before the change).
        async with (
            Worker(client, task_queue=own, workflows=[Chain],
                   workflow_runner=UnsandboxedWorkflowRunner()),
            Worker(client, task_queue=other, activities=[nothing]),
        ):  # fmt: skip
            times: list[float] = []
            for i in range(WARMUP + workflows):
                began = time.perf_counter()
                await client.execute_workflow(
                    Chain.run, args=[other, steps], id=f"chain-{i}", task_queue=own
                )
                times.append((time.perf_counter() - began) * 1000)
        return times[WARMUP:]
    finally:
        await asyncio.to_thread(server.stop)
        shutil.rmtree(data, ignore_errors=True)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workflows", type=int, default=30)
    parser.add_argument("--activities", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    if args.workflows < 2 or args.activities < 1:
        parser.error("--workflows must be at least 2 and --activities at least 1")

    configured = temporal.DYNAMIC_CONFIG
    variants = {"durable-rag dev server settings": configured, "dev server defaults": ()}
    rows = []
    for label, config in variants.items():
        times = await measure(config, args.workflows, args.activities)
        rows.append({
            "server": label,
            "dynamic config": ", ".join(config) or "(none)",
            "workflows": len(times),
            "p50_ms": statistics.median(times),
            "p99_ms": percentile(times, 0.99),
            "per_activity_p50_ms": statistics.median(times) / args.activities,
        })  # fmt: skip
    ratio = rows[0]["p50_ms"] / rows[1]["p50_ms"]

    print(f"\nDispatch benchmark: workflows of {args.activities} no-op activities on another "
          f"task queue, {args.workflows} per server, {os.cpu_count()} CPUs")  # fmt: skip
    print(f"{'server':34}{'P50 ms':>10}{'P99 ms':>10}{'per activity':>14}")
    for row in rows:
        print(f"{row['server']:34}{row['p50_ms']:>10.1f}{row['p99_ms']:>10.1f}"
              f"{row['per_activity_p50_ms']:>14.1f}")  # fmt: skip
    print(f"\nratio settings/defaults at P50: {ratio:.2f}")
    if args.json:
        args.json.write_text(json.dumps({
            "name": "dispatch", "rows": rows, "activities": args.activities,
            "ratio_p50": ratio,
        }, indent=2))  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())
