"""The cpu image, built and run here (issue 19): `make images` builds it with podman; the
orchestrator, index and gateway run as containers of it against the embedded Temporal server and
Postgres, on the host network, with the LLM worker on the host (in the test's process; the
engine is not what this test is about, so `make test` runs it on the scripted engine and
`make test-full` on the run's vLLM engine as well); a document is ingested and a question answered
through the containerized gateway; then the containers stop.

The build is the first step of the test, not a precondition: a machine where the image cannot be
built fails here with the build's output.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest
from temporalio.client import Client

from bench.stack import ProcessStack, quiet_runtime
from durable_rag.stack.postgres import migrate
from durable_rag.stack.process import free_port
from durable_rag.stack.workers import worker_queue
from ragkit.db import make_sessionmaker
from ragkit.llm.engine import LLMEngine
from ragkit.store import keys
from ragkit.temporal import connect, queue_has_poller
from schemas.answer import Answer
from schemas.ingest import IngestResult
from tests.conftest import ROOT
from workers import llm as llm_worker

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.slow]

IMAGE = "localhost/durable-rag:cpu"
BUILD_TIMEOUT = 3600  # a first build installs the lock (~5 GB); later ones reuse its layer
PARTS = {
    "orchestrator": ["worker", "orchestrator"],
    "index": ["worker", "index"],
    "gateway": ["gateway"],
}


def podman(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CONTAINERS_CONF": str(ROOT / ".data" / "images" / "containers.conf")}
    return subprocess.run(
        ["podman", *args], env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def image() -> str:
    built = subprocess.run(
        ["bash", "scripts/images.sh", "cpu"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
    )
    assert built.returncode == 0, (
        f"scripts/images.sh cpu (make images) failed:\n{built.stdout[-4000:]}{built.stderr[-4000:]}"
    )
    assert podman("image", "exists", IMAGE).returncode == 0
    return IMAGE


@pytest.fixture
def host_stack() -> Iterator[ProcessStack]:
    """Temporal and Postgres on the host, as processes."""
    stack = ProcessStack("images")
    try:
        stack.temporal.start()
        stack.postgres.start()
        stack.postgres.ensure_database(stack.settings.postgres.database)
        migrate(stack.settings.postgres.sqlalchemy_url)
        yield stack
    finally:
        stack.close()


def container_env(stack: ProcessStack, data: str, gateway_port: int) -> list[str]:
    """The stack's settings, as the host processes have them, with the containers' own data
    folder and the gateway's port."""
    values = {k: v for k, v in stack.env.items() if k.startswith("DURABLE_RAG_")}
    values.pop("DURABLE_RAG_FAILPOINTS_FILE", None)  # a host path; no faults here
    values.pop("DURABLE_RAG_LLM_MODEL", None)  # a host path; the LLM worker runs there
    values.update(
        DURABLE_RAG_DATA_DIR=data,
        DURABLE_RAG_GATEWAY_HOST="127.0.0.1",
        DURABLE_RAG_GATEWAY_PORT=str(gateway_port),
        HF_HUB_OFFLINE="1",
    )
    return [arg for k, v in values.items() for arg in ("--env", f"{k}={v}")]


async def wait_polled(client: Client, queue: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not await queue_has_poller(client, queue, None):
        assert time.monotonic() < deadline, f"nobody polls {queue} after {timeout:.0f} s"
        await asyncio.sleep(1)


async def test_the_containerized_gateway_ingests_a_document_and_answers_from_it(
    image: str, host_stack: ProcessStack, llm_engine: LLMEngine
) -> None:
    stack = host_stack
    data = stack.work / "containers"
    data.mkdir()
    data.chmod(0o777)  # the image runs as its own user (uid 10001)
    port = free_port()
    env = container_env(stack, "/data", port)
    tag = uuid.uuid4().hex[:6]
    names = {part: f"durable-rag-test-{tag}-{part}" for part in PARTS}
    host_workers = contextlib.AsyncExitStack()
    try:
        for command in PARTS.values():
            started = podman(
                "run", "--detach", "--name", names[command[-1]], "--network", "host",
                "--volume", f"{data}:/data", *env, image, *command,
            )  # fmt: skip
            assert started.returncode == 0, started.stderr
        client = await connect(stack.settings, quiet_runtime())
        # In this process, on the session's engine: unversioned (the containers' workers are
        # versioned and make their builds current themselves).
        unversioned = stack.settings.model_copy(update={"worker_versioning": False})
        llm = llm_worker.build_worker(
            client, unversioned, llm_engine, task_queue=worker_queue(stack.settings, "llm")
        )
        await host_workers.enter_async_context(llm)
        await wait_polled(client, stack.settings.temporal.workflow_task_queue)
        await wait_polled(client, stack.settings.temporal.index_task_queue)
        base = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(base_url=base, timeout=120) as http:
            deadline = time.monotonic() + 120
            while True:  # ready: every queue an answer needs has a poller
                try:
                    if (await http.get("/readyz")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, podman("logs", names["gateway"]).stderr[-3000:]
                await asyncio.sleep(1)

            sessions = make_sessionmaker(stack.settings.postgres.sqlalchemy_url)
            try:
                _, key = keys.create_key(sessions, "acme", "container test")
            finally:
                sessions.kw["bind"].dispose()
            auth = {"Authorization": f"Bearer {key}"}
            word = f"quorvane{tag}"
            posted = await http.post(
                "/v1/documents",
                json={
                    "name": "lighthouse.md",
                    "text": f"# The {word} lighthouse\n\nThe {word} lighthouse was built in "
                    "1848 on a granite reef. Its keeper lit the lamp every night at dusk.\n",
                },
                headers=auth,
            )
            assert posted.status_code == 202, posted.text
            workflow_id = posted.json()["workflow_id"]
            handle = client.get_workflow_handle(workflow_id, result_type=IngestResult)
            ingested = await handle.result()
            assert ingested.totals.documents_ingested == 1, ingested

            asked = await http.post(
                "/v1/ask",
                json={
                    "question": f"When was the {word} lighthouse built?",
                    "max_answer_tokens": 32,
                },
                headers=auth,
            )
            assert asked.status_code == 200, asked.text
            answer = Answer.model_validate(asked.json())
        assert answer.route == "primary" and not answer.degradations, answer.degradations
        assert answer.answer.strip()
        assert answer.citations, answer
        assert {c.source for c in answer.citations} == {"upload:lighthouse.md"}, answer.citations
        for part, name in names.items():
            running = podman("container", "inspect", "--format", "{{.State.Running}}", name)
            assert running.stdout.strip() == "true", (part, podman("logs", name).stderr[-3000:])
        for name in names.values():
            stopped = podman("stop", "--time", "15", name)
            assert stopped.returncode == 0, stopped.stderr
    finally:
        for name in names.values():
            podman("rm", "--force", name)
        await host_workers.aclose()
