"""The Temporal connection every process makes, and what it asks the server about workers.

One place builds a client: the pydantic data converter on every client, worker and replayer, with
the payload codec when encryption is on (ragkit/codec.py), and the settings' address and namespace.
"""

from __future__ import annotations

import dataclasses

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import PollerInfo, TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter
from temporalio.runtime import Runtime
from temporalio.service import RPCError

from ragkit import tracing
from ragkit.codec import codec_for
from ragkit.settings import Settings


def data_converter(settings: Settings) -> DataConverter:
    """Pydantic payloads, sealed by the payload codec when encryption is on."""
    codec = codec_for(settings)
    if codec is None:
        return pydantic_data_converter
    return dataclasses.replace(pydantic_data_converter, payload_codec=codec)


async def connect(settings: Settings, runtime: Runtime | None = None) -> Client:
    return await Client.connect(
        settings.temporal.address,
        namespace=settings.temporal.namespace,
        data_converter=data_converter(settings),
        runtime=runtime or Runtime.default(),
        # With tracing on, every client and the workers built on it trace (ragkit/tracing.py).
        interceptors=tracing.interceptors(),
    )


async def pollers(client: Client, queue: str) -> list[PollerInfo]:
    """The workers polling `queue` now, for workflow or activity tasks."""
    found: list[PollerInfo] = []
    for kind in (TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY):
        response = await client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=client.namespace, task_queue=TaskQueue(name=queue), task_queue_type=kind
            )
        )
        found += response.pollers
    return found


async def queue_has_poller(client: Client, queue: str, pid: int | None = None) -> bool:
    """Whether a worker polls `queue` for activity or workflow tasks (with `pid`: that process).
    A worker polls only once its model is loaded, so this is what readiness checks."""
    try:
        polling = await pollers(client, queue)
    except RPCError:
        return False
    return any(pid is None or p.identity.startswith(f"{pid}@") for p in polling)
