"""Servers a test process started die with it, even when it is SIGKILLed.

The session's Temporal dev server, Postgres and the reliability tests' process stack run in
sessions of their own (started by PID, as the launcher starts them), so a pytest process killed
by a timeout, a crashed xdist worker or a Ctrl-C at the wrong moment left them running: a few
hundred MB each, ports held, and the next run slower. `guard()` marks this process's environment
with a token that every child inherits, and starts a watchdog; when this process is gone, the
watchdog SIGKILLs every process still carrying the token and removes the folders registered with
`remove_when_gone`. A run that ends normally stops its servers itself and the watchdog finds
nothing.

The watchdog is this module run as a script: `python tests/reaper.py OWNER_PID TOKEN PATHS_FILE`.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

MARK = "DURABLE_RAG_TEST_OWNER"
_paths_file: Path | None = None


def guard() -> None:
    """Mark this process's future children and watch it; once per process (a no-op after)."""
    global _paths_file
    token = f"{os.getpid()}:{uuid.uuid4().hex}"
    if _paths_file is not None and os.environ.get(MARK, "").startswith(f"{os.getpid()}:"):
        return
    fd, name = tempfile.mkstemp(prefix="durable-rag-reaper-", suffix=".paths")
    os.close(fd)
    _paths_file = Path(name)
    # Set before the watchdog starts, and not passed to it: it must not count itself.
    os.environ[MARK] = token
    env = {k: v for k, v in os.environ.items() if k != MARK}
    subprocess.Popen(
        [sys.executable, __file__, str(os.getpid()), token, name],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # a Ctrl-C to the test run's group must not stop it first
    )


def remove_when_gone(path: Path) -> None:
    """Have the watchdog remove `path` if this process dies without cleaning up."""
    if _paths_file is None:
        raise RuntimeError("reaper.guard() first")
    with _paths_file.open("a") as f:
        f.write(f"{path}\n")


# durable_rag.stack.process.pid_alive says the same; the watchdog does not import it: this module
# stays stdlib-only so that the watchdog starts in milliseconds, not the ~2 s the package takes.
def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")  # a zombie has died; only its parent has not noticed yet


def marked(token: str) -> list[int]:
    """Live processes whose environment carries `token`."""
    needle = f"{MARK}={token}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def reap(token: str, paths_file: Path) -> list[int]:
    """SIGKILL every process marked with `token` (twice over: a killed server's children may be
    forking), then remove the registered folders. Returns the pids killed."""
    killed: list[int] = []
    for _ in range(3):
        pids = [p for p in marked(token) if p not in killed or alive(p)]
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
        time.sleep(0.5)
    if paths_file.exists():
        for line in paths_file.read_text().splitlines():
            if line.strip():
                shutil.rmtree(line.strip(), ignore_errors=True)
        paths_file.unlink(missing_ok=True)
    return killed


def watch(owner: int, token: str, paths_file: Path, every: float = 1.0) -> None:
    while alive(owner):
        time.sleep(every)
    reap(token, paths_file)


if __name__ == "__main__":
    watch(int(sys.argv[1]), sys.argv[2], Path(sys.argv[3]))
