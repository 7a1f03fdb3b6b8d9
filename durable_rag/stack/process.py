"""Detached child processes tracked by PID files: start, health, stop by PID (and what a crashed
one left behind in its process group)."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from ragkit.cpus import spawn_on


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


PAIR_PORTS_FROM = 20_000


def free_port_pair() -> int:
    """A free port whose next port is free too (a worker serves the SDK's metrics there), taken
    below the kernel's ephemeral range. A worker binds both only once its model is loaded (about
    a minute for vLLM), and meanwhile any outgoing connection, vLLM's own sockets among them, may
    be given a port of that range as its local port: the exporter then failed with 'Address
    already in use'. Nothing is given a port below the range unless it asks for it."""
    low = ephemeral_low()
    if low <= PAIR_PORTS_FROM + 2:  # an unusual range: take the chance as before
        while port_in_use((port := free_port()) + 1):
            pass
        return port
    draw = random.Random()
    while True:
        port = draw.randrange(PAIR_PORTS_FROM, low - 1)
        if bindable(port) and bindable(port + 1):
            return port


def ephemeral_low() -> int:
    """The first of the kernel's local ports for outgoing connections (Linux's default else)."""
    with contextlib.suppress(OSError, ValueError):
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    return 32_768


def bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


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


def tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return "(no log)"
    return "\n".join("    " + line for line in text)


def venv_bin(name: str) -> str:
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
        self,
        argv: list[str],
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        cpus: Collection[int] | None = None,
        nice: int = 0,
    ) -> int:
        """Start `argv` detached; with `cpus`, pinned to them (ragkit/cpus.py); at niceness
        `nice`."""
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
                preexec_fn=spawn_on(cpus, nice),
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

    def wait_ready(
        self, ready: Callable[[], bool], timeout: float, every: float, unready: str
    ) -> None:
        """Until `ready()` holds; StackError with the log's tail if the process exits first, or
        saying `unready` ("did not become healthy") after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running():
                raise self.fail("exited while starting")
            if ready():
                return
            time.sleep(every)
        raise self.fail(f"{unready} within {timeout:.0f}s")

    def fail(self, what: str) -> StackError:
        return StackError(
            f"{self.name} {what}. Last lines of {self.log_file}:\n{tail(self.log_file)}"
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
