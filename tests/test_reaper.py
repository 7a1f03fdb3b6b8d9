"""A test process SIGKILLed takes its servers with it (tests/reaper.py); one that ends normally
leaves nothing behind, the watchdog included."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tests import reaper

ROOT = Path(__file__).resolve().parent.parent

# An owner as a test session is one: guarded, then a server in a session of its own (as
# Process.spawn starts them) and a folder to remove. It prints what it made, then waits.
OWNER = """
import subprocess, sys, time
from pathlib import Path
from tests import reaper
reaper.guard()
server = subprocess.Popen(["sleep", "300"], start_new_session=True)
folder = Path(sys.argv[1]); folder.mkdir()
reaper.remove_when_gone(folder)
print(server.pid, reaper._paths_file, flush=True)
if sys.argv[2] == "wait":
    time.sleep(300)
server.kill(); server.wait()
"""


def owner(folder: Path, mode: str) -> tuple[subprocess.Popen[str], int, Path]:
    proc = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(folder), mode],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if k != reaper.MARK},
    )
    assert proc.stdout is not None
    pid, paths = proc.stdout.readline().split()
    return proc, int(pid), Path(paths)


def eventually(check: Callable[[], bool], seconds: float = 15.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return check()


def test_a_killed_owners_server_and_folder_are_gone(tmp_path: Path) -> None:
    proc, server, paths = owner(tmp_path / "data", "wait")
    try:
        assert reaper.alive(server) and (tmp_path / "data").is_dir()
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert eventually(lambda: not reaper.alive(server)), "the server outlived its owner"
        assert eventually(lambda: not (tmp_path / "data").exists())
        assert eventually(lambda: not paths.exists())
    finally:
        if reaper.alive(server):
            os.kill(server, signal.SIGKILL)


def test_an_owner_ending_normally_leaves_no_watchdog(tmp_path: Path) -> None:
    proc, server, paths = owner(tmp_path / "data", "exit")
    assert proc.wait(timeout=30) == 0
    # The watchdog notices within a second, finds nothing of the owner's running, and goes.
    assert eventually(lambda: not paths.exists())
    assert not reaper.alive(server)


def test_only_processes_carrying_the_token_are_marked() -> None:
    env = {**os.environ, reaper.MARK: "1:token-a"}
    a = subprocess.Popen(["sleep", "30"], env=env)
    b = subprocess.Popen(["sleep", "30"], env={**env, reaper.MARK: "1:token-b"})
    try:
        assert a.pid in reaper.marked("1:token-a")
        assert b.pid not in reaper.marked("1:token-a")
    finally:
        a.kill(), b.kill()
        a.wait(), b.wait()
