"""CPU isolation for a CPU engine: the split a setting asks for, its errors, and real processes
pinned by it (a spawned child, and the threads of one that bound some of its own)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from durable_rag.stack.process import Process
from ragkit import cpus
from ragkit.cpus import (
    CpuIsolationError,
    CpuSplit,
    bind_engine,
    engine_split,
    isolate_engine,
    session_niceness,
    split_cpus,
)
from ragkit.settings import Settings

MACHINE = sorted(os.sched_getaffinity(0))
# What these tests hold to is how Linux weighs sessions: they fail where it does not say.
NO_AUTOGROUP = "no /proc/<pid>/autogroup: this kernel has no autogroup scheduling"


def test_cpu_lists_parse_and_format_both_ways() -> None:
    assert cpus.parse_cpus("0-2,5") == (0, 1, 2, 5)
    assert cpus.parse_cpus("3,1,1") == (1, 3)
    assert cpus.format_cpus((0, 1, 2, 5, 7, 8)) == "0-2,5,7-8"
    for bad in ("", "a", "1-", "-1", "1,,2", "0 1"):
        with pytest.raises(CpuIsolationError, match="not a CPU list"):
            cpus.parse_cpus(bad)
    with pytest.raises(CpuIsolationError, match="runs backwards"):
        cpus.parse_cpus("3-1")


def test_the_setting_rejects_what_is_not_auto_off_or_a_cpu_list() -> None:
    assert Settings(llm_cpu_engine_cpus="0-3,6").llm.cpu_engine_cpus == "0-3,6"
    for bad in ("all", "0-", "0;1"):
        with pytest.raises(ValidationError, match="cpu_engine_cpus"):
            Settings(llm_cpu_engine_cpus=bad)


def test_an_explicit_list_gets_the_rest_for_serving_and_must_fit_the_machine() -> None:
    assert split_cpus("0-2", range(8)) == CpuSplit((0, 1, 2), (3, 4, 5, 6, 7))
    assert split_cpus("0-2", range(8)).omp_bind == "0,1,2"  # type: ignore[union-attr]
    assert split_cpus("off", range(8)) is None
    with pytest.raises(CpuIsolationError, match="names CPUs 8-9, which this process may not use"):
        split_cpus("6-9", range(8))
    with pytest.raises(CpuIsolationError, match="leaves no CPU for the serving parts"):
        split_cpus("0-7", range(8))


def test_auto_keeps_a_quarter_of_one_nodes_cores_one_thread_per_core_for_the_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 16 CPUs: 2 nodes x 4 cores x 2 threads; CPU n and n+8 are siblings.
    def topology(cpu: int) -> tuple[int, int, int]:
        core = cpu % 8
        return (core // 4, core // 4, core)

    monkeypatch.setattr(cpus, "_topology", topology)
    two_nodes = split_cpus("auto", range(16))
    assert two_nodes is not None
    assert two_nodes.engine == (0, 1, 2, 3)  # node 0, no siblings: node 1 serves
    assert two_nodes.serving == (4, 5, 6, 7, *range(8, 16))
    one_node = split_cpus("auto", [0, 1, 2, 3, 8, 9, 10, 11])
    assert one_node == CpuSplit((0, 1, 2), (3, 8, 9, 10, 11))
    # Two hyperthreads of one core, as a small VM shows them: still apart.
    monkeypatch.setattr(cpus, "_topology", lambda cpu: (0, 0, 0))
    assert split_cpus("auto", [0, 1]) == CpuSplit((0,), (1,))
    assert split_cpus("auto", [3]) is None  # one CPU: nothing to keep apart


def test_only_a_cpu_engine_in_the_embedded_profile_is_isolated() -> None:
    assert engine_split(Settings(llm_cpu_engine_cpus="off")) is None
    assert engine_split(Settings(llm_device="cuda")) is None
    assert engine_split(Settings(llm_backend="openai")) is None
    if len(MACHINE) >= 2:
        split = engine_split(Settings(llm_cpu_engine_cpus=str(MACHINE[0])))
        assert split == CpuSplit((MACHINE[0],), tuple(MACHINE[1:]))


def affinities(pid: int) -> dict[int, frozenset[int]]:
    return {
        int(t): frozenset(os.sched_getaffinity(int(t))) for t in os.listdir(f"/proc/{pid}/task")
    }


def test_a_part_spawned_on_cpus_runs_there_and_so_does_what_it_forks(tmp_path: Path) -> None:
    process = Process("sleeper", tmp_path / "sleeper.pid", tmp_path / "sleeper.log")
    pid = process.spawn(["sh", "-c", "sleep 30 & sleep 30"], cpus=[MACHINE[-1]])
    try:
        deadline = time.monotonic() + 10
        while not (children := Path(f"/proc/{pid}/task/{pid}/children").read_text().split()):
            assert time.monotonic() < deadline, "the shell never forked"
            time.sleep(0.05)
        for each in (pid, *map(int, children)):
            assert set(affinities(each).values()) == {frozenset([MACHINE[-1]])}
    finally:
        process.stop(timeout=5)
    assert os.sched_getaffinity(0) == set(MACHINE)  # the launcher itself is left as it was


def niceness(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16])


def test_a_part_spawned_behind_the_gateway_runs_niced_and_so_does_what_it_forks(
    tmp_path: Path,
) -> None:
    """Temporal, Postgres and the orchestrator start this way beside a CPU engine
    (WorkerSettings.backend_nice): the gateway's event loop runs first on the serving CPUs."""
    process = Process("sleeper", tmp_path / "sleeper.pid", tmp_path / "sleeper.log")
    pid = process.spawn(["sh", "-c", "sleep 30 & sleep 30"], cpus=[MACHINE[-1]], nice=5)
    try:
        deadline = time.monotonic() + 10
        while not (children := Path(f"/proc/{pid}/task/{pid}/children").read_text().split()):
            assert time.monotonic() < deadline, "the shell never forked"
            time.sleep(0.05)
        mine = os.nice(0)
        assert {niceness(each) for each in (pid, *map(int, children))} == {mine + 5}
        # The part leads a session of its own: where the kernel shares the CPU between
        # sessions first, the session's niceness is the one that weighs against the gateway's.
        assert session_niceness(pid) == mine + 5, NO_AUTOGROUP
    finally:
        process.stop(timeout=5)
    assert cpus.spawn_on(None) is None  # nothing to do: the child starts as the launcher is


# Runs as a session's leader, as an operator's shell or a test runner started by one is: the
# launcher this test runs in may sit in the kernel's default group (a CI runner's process tree
# under a PID 1 that never called setsid), whose niceness /proc does not show.
IN_ITS_OWN_SESSION = """
import os, subprocess
from ragkit import cpus
from ragkit.cpus import session_niceness
before = session_niceness()
assert before is not None, "a session leader without an autogroup"
subprocess.run(["true"], check=True, preexec_fn=cpus.spawn_on(None, 3))
assert session_niceness() == before, (before, session_niceness())
with subprocess.Popen(["sleep", "30"]) as follower:  # in this session, not leading it
    try:
        assert not cpus.nice_session(9, follower.pid)
        assert session_niceness(follower.pid) == before
    finally:
        follower.kill()
print("session niceness", before)
"""


def test_a_niced_child_in_its_launchers_session_leaves_that_sessions_niceness_alone() -> None:
    """pg_ctl and the edge index's helpers start so: renicing their session would renice the
    launcher's (the test run, an operator's shell) with them."""
    assert Path("/proc/self/autogroup").exists(), NO_AUTOGROUP
    ran = subprocess.run(
        [sys.executable, "-c", IN_ITS_OWN_SESSION],
        start_new_session=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("session niceness"), ran.stdout


def test_only_the_parts_beside_a_cpu_engine_are_niced() -> None:
    from durable_rag.stack.workers import backend_nice

    settings = Settings(worker_backend_nice=7)
    assert backend_nice(settings, (1,)) == 7
    assert backend_nice(settings, None) == 0  # nothing pinned: nothing shares the serving CPUs
    assert backend_nice(Settings(), (1,)) == 5


# A process like vLLM's: one thread bound inside the engine's CPUs, others on every CPU, and a
# child process of its own.
CHILD = """
import os, subprocess, sys, threading, time
engine = int(sys.argv[1])
bound = threading.Event()
def worker():
    os.sched_setaffinity(0, {engine})
    bound.set()
    time.sleep(60)
threading.Thread(target=worker, daemon=True).start()
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
bound.wait()
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print("ready", flush=True)
time.sleep(60)
"""


def test_isolating_moves_every_thread_but_the_engines_own_and_what_it_started() -> None:
    assert len(MACHINE) >= 2, f"isolation keeps two CPUs apart; this process may use {MACHINE}"
    split = CpuSplit((MACHINE[0],), tuple(MACHINE[1:]))
    with subprocess.Popen(
        [sys.executable, "-c", CHILD, str(MACHINE[0])], stdout=subprocess.PIPE, text=True
    ) as child:
        try:
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"
            grandchild = int(Path(f"/proc/{child.pid}/task/{child.pid}/children").read_text())
            moved = isolate_engine(split, child.pid)
            masks = list(affinities(child.pid).values())
            assert masks.count(frozenset({MACHINE[0]})) == 1  # the bound thread stayed
            assert masks.count(frozenset(split.serving)) == len(masks) - 1
            assert set(affinities(grandchild).values()) == {frozenset(split.serving)}
            assert moved == len(masks) - 1 + 1
        finally:
            child.kill()
    assert os.sched_getaffinity(0) == set(MACHINE)


def test_the_engine_is_bound_from_the_setting_unless_the_operator_exported_a_binding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert len(MACHINE) >= 2, f"isolation keeps two CPUs apart; this process may use {MACHINE}"
    settings = Settings(llm_cpu_engine_cpus=str(MACHINE[0]))
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    assert bind_engine(settings) == CpuSplit((MACHINE[0],), tuple(MACHINE[1:]))
    assert os.environ["VLLM_CPU_OMP_THREADS_BIND"] == str(MACHINE[0])
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    assert bind_engine(settings) is None  # the operator's binding stands; nothing is moved
    assert os.environ["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
