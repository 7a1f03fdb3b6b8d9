"""How long a deleted run's text stays on the Temporal server: the stack's settings against the
dev server's defaults.

    .venv/bin/python bench/forget.py [--runs N] [--json PATH]

Deletion that forgets (ForgetRunsWorkflow) asks the server to delete a closed run; the server
removes its history and visibility record in the background, once the run's close tasks are
acknowledged, and the queues persist their acknowledgements every 30 s by default. On each of two
fresh dev servers (one as `durable-rag up` starts it, `durable_rag/stack/temporal.py`
DYNAMIC_CONFIG; one with the server's defaults), N runs that carry a planted string close, are
deleted at once, and are polled until neither their history nor their visibility record can be
read. Prints, per server, how long the text stayed (P50 and max) and the ratio.
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
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from temporalio import workflow  # noqa: E402
from temporalio.api.common.v1 import WorkflowExecution  # noqa: E402
from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest  # noqa: E402
from temporalio.client import Client  # noqa: E402
from temporalio.service import RPCError  # noqa: E402
from temporalio.worker import UnsandboxedWorkflowRunner, Worker  # noqa: E402

from durable_rag.stack import process, temporal  # noqa: E402

DEADLINE_S = 300.0  # a run still readable after this counts as this long


@workflow.defn
class Carry:
    @workflow.run
    async def run(self, text: str) -> str:
        return text


async def readable(client: Client, workflow_id: str, run_id: str) -> bool:
    """The run's history or its visibility record can still be read."""
    try:
        await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        return True
    except RPCError:
        pass
    async for _ in client.list_workflows(f"WorkflowId = '{workflow_id}'"):
        return True
    return False


async def forgotten_after(client: Client, workflow_id: str, run_id: str) -> float:
    """Delete a closed run; seconds until nothing of it can be read."""
    began = time.monotonic()
    await client.workflow_service.delete_workflow_execution(
        DeleteWorkflowExecutionRequest(
            namespace=client.namespace,
            workflow_execution=WorkflowExecution(workflow_id=workflow_id, run_id=run_id),
        )
    )
    while await readable(client, workflow_id, run_id):
        if time.monotonic() - began > DEADLINE_S:
            break
        await asyncio.sleep(0.2)
    return time.monotonic() - began


async def measure(dynamic_config: tuple[str, ...], runs: int) -> list[float]:
    """Seconds each run's text stayed after its delete, on a fresh dev server."""
    data = Path(tempfile.mkdtemp(prefix="forget-"))
    server = temporal.TemporalDevServer(
        data, process.free_port(), None, process.free_port(), dynamic_config=dynamic_config
    )
    await asyncio.to_thread(server.start)
    try:
        client = await Client.connect(server.address)
        queue = f"carry-{uuid.uuid4().hex[:8]}"
        async with Worker(
            client, task_queue=queue, workflows=[Carry], workflow_runner=UnsandboxedWorkflowRunner()
        ):
            closed = []
            for i in range(runs):
                handle = await client.start_workflow(
                    Carry.run, f"planted-{uuid.uuid4().hex}", id=f"carry-{i}", task_queue=queue
                )
                await handle.result()
                closed.append((handle.id, handle.result_run_id or ""))
            # Deleted as ForgetRunsWorkflow does, right after they closed, all at once.
            return list(await asyncio.gather(*(forgotten_after(client, *r) for r in closed)))
    finally:
        await asyncio.to_thread(server.stop)
        shutil.rmtree(data, ignore_errors=True)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")

    variants = {
        "durable-rag dev server settings": temporal.DYNAMIC_CONFIG,
        "dev server defaults": (),
    }
    rows: list[dict[str, Any]] = []
    for label, config in variants.items():
        seconds = await measure(config, args.runs)
        rows.append({
            "server": label,
            "dynamic config": ", ".join(config) or "(none)",
            "runs": len(seconds),
            "text_gone_p50_s": statistics.median(seconds),
            "text_gone_max_s": max(seconds),
        })  # fmt: skip
    ratio = rows[0]["text_gone_p50_s"] / rows[1]["text_gone_p50_s"]

    print(f"\nForget benchmark: {args.runs} closed runs deleted at once per server, "
          f"{os.cpu_count()} CPUs: seconds until history and visibility record are gone")  # fmt: skip
    print(f"{'server':34}{'P50 s':>10}{'max s':>10}")
    for row in rows:
        print(f"{row['server']:34}{row['text_gone_p50_s']:>10.1f}{row['text_gone_max_s']:>10.1f}")
    print(f"\nratio settings/defaults at P50: {ratio:.2f}")
    if args.json:
        args.json.write_text(json.dumps({"name": "forget", "rows": rows, "ratio_p50": ratio},
                                        indent=2))  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())
