"""Real services for the test suite, started by the tests themselves.

- One embedded Postgres server per session on a free port (fsync off); each test that needs it
  gets a fresh database copied from one migrated once per session.
- One Temporal dev server per session (headless, SQLite file) on free ports.
- The packaged MiniLM embedder, loaded once.
If a service cannot start, the fixture fails loudly with the reason: no test is skipped for it.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import faulthandler
import functools
import os
import shutil
import signal
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy.orm import Session, sessionmaker
from temporalio.client import Client
from xdist.scheduler import LoadScopeScheduling

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Payloads are sealed by default (security_payload_encryption): every client, worker and process a
# test starts seals with this keyring unless the test gives its own. A fixed key for tests only.
os.environ.setdefault(
    "DURABLE_RAG_SECURITY_PAYLOAD_KEYS",
    "test:" + base64.b64encode(b"durable-rag test payload key 32b").decode(),
)

from durable_rag.stack.postgres import EmbeddedPostgres, migrate
from durable_rag.stack.process import free_port
from durable_rag.stack.temporal import TemporalDevServer
from ragkit import ids
from ragkit.db import make_sessionmaker
from ragkit.embedding import Embedder, load_embedder
from ragkit.index import VectorIndex, open_index
from ragkit.llm.engine import EngineConfig, VllmEngine
from ragkit.llm.models import PACKAGED_SMOLLM2, resolve_generator
from ragkit.settings import PACKAGED_MINILM, Settings
from ragkit.temporal import connect
from tests import reaper

pytest_plugins = ["tests.timing"]

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "corpus"


def copy_documents(names: list[str], folder: Path) -> Path:
    """Copy these documents of the bundled corpus (paths relative to it) into one folder. A test
    that needs a few documents ingests only those: MiniLM embeds ~6 chunks a second on 2 CPUs."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copy(CORPUS / name, folder / Path(name).name)
    return folder


# Fixtures that make a test end-to-end wherever it sits: the one real vLLM engine of the run.
E2E_FIXTURES = frozenset({"engine"})
# The time-skipping server (tests/workflows/conftest.py): a workflow's logic, activities stood in.
WORKFLOW_FIXTURES = frozenset({"env"})


# Under pytest-xdist a worker takes a whole module at a time (make test's first run: --dist
# loadfile; its second: --dist loadscope, scoped by `scope_of`). The longest go first (seconds on
# 2 CPUs, from tests/timing.py's table), so the workers end together instead of one running the
# hostile-document suite alone at the end.
LONGEST_FIRST = (
    "tests/ragkit/parsing/test_hostile.py",  # ~90 s
    "tests/cli/test_cli_fuzz.py",  # ~40 s
    "tests/ragkit/index/test_edge_optimize.py",  # ~35 s
    "tests/durable_rag/test_client_fuzz.py",  # ~18 s
    "tests/bench/test_reliability.py",  # ~340 s, the first of the vLLM group: see below
    "tests/evals/test_retrieval.py",  # ~170 s
    "tests/gateway/test_app.py",  # ~100 s
    "tests/workflows/test_rebuild.py",  # ~100 s
    "tests/workflows/test_ingest.py",  # ~90 s
    "tests/test_images.py",  # ~90 s
    "tests/workflows/test_search.py",  # ~65 s
    "tests/workflows/test_ingest_faults.py",  # ~60 s
    "tests/durable_rag/test_stack.py",  # ~55 s
)
# What runs a real vLLM engine shares one xdist worker: two engines on 2 CPUs would each take
# twice as long, and the session's takes ~50 s to load. Whole modules that start vLLM of their
# own, and the tests that ask for the session's `engine` (by module and name, parameters left
# out); the scripted tests beside them run on the other worker. The real-engine variants
# `make test-full` adds (`[vllm]`) join them. Collection fails if a test asks for `engine` and is
# not listed here.
VLLM_MODULES = frozenset(
    {
        "tests/bench/test_reliability.py",  # a process stack with its own LLM worker
        "tests/ragkit/test_openai_engine.py",  # vLLM's OpenAI server, in a process of its own
        "tests/test_traces.py",  # a process stack with its own LLM worker, tracing on
    }
)
VLLM_TESTS = frozenset(
    {
        "tests/evals/test_answers.py::test_the_generated_smoke_set_holds_its_baseline_on_the_real_engine",
        "tests/evals/test_answers.py::test_the_gate_holds_on_main_and_fails_on_a_five_point_retrieval_regression",
        "tests/gateway/test_codec_ui.py::test_the_temporal_ui_shows_a_sealed_question_decoded_through_the_codec_endpoint",
        "tests/gateway/test_overload.py::test_a_client_leaving_a_plain_answer_stops_generation_within_a_second",
        "tests/gateway/test_overload.py::test_a_client_leaving_a_conversation_turn_stops_it_and_the_record_stays_consistent",
        "tests/gateway/test_overload.py::test_a_model_at_its_bound_answers_429_with_retry_after_and_starts_no_workflow",
        "tests/gateway/test_overload.py::test_a_timed_out_request_cancels_its_workflow_and_the_engine_stops",
        "tests/gateway/test_overload.py::test_a_request_past_the_start_window_waits_its_turn_or_gets_429_and_starts_nothing",
        "tests/gateway/test_streaming.py::test_leaving_mid_stream_stops_generation_in_the_engine_within_a_second",
        "tests/ragkit/test_engine_contract.py::test_the_scripted_engine_counts_prompts_as_vllm_does",
        "tests/workflows/test_answer.py::test_answer_cites_the_document_it_comes_from",
        "tests/workflows/test_conversation.py::test_killing_the_orchestrator_mid_turn_loses_no_turn_and_the_reply_arrives",
    }
)  # fmt: skip
VLLM_GROUP = "vllm"


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def scope_of(nodeid: str) -> str:
    """A test's xdist scope in make test's second run: its module, or the one vLLM group for
    the modules and tests above and for the real-engine variants `make test-full` adds
    (`[vllm]`)."""
    module = module_of(nodeid)
    if module in VLLM_MODULES or nodeid.split("[", 1)[0] in VLLM_TESTS or "[vllm" in nodeid:
        return VLLM_GROUP
    return module


class ModuleScopes(LoadScopeScheduling):
    """xdist's loadscope, scoped by `scope_of`: each module's tests (and module fixtures) on one
    worker, every vLLM test on the same one. The vLLM group goes first (it is the longest)
    while the other worker takes the remaining modules, longest first. A worker asks for its
    next scope when two of its tests are left: the vLLM group's last module is short, so
    little waits behind it."""

    def _split_scope(self, nodeid: str) -> str:
        return scope_of(nodeid)

    def _reschedule(self, node: Any) -> None:
        """The worker that ran the vLLM group takes no other module while another worker is up:
        in that process a torch call from a new activity thread has crashed it with SIGSEGV
        (`set_grad_enabled`, under FlagEmbedding's encode, twice in CI, each time in a module
        after the group), losing the run. It stops when its group is done."""
        others = [n for n in self.nodes if n is not node and not n.shutting_down]
        if VLLM_GROUP in self.assigned_work.get(node, {}) and others:
            if not node.shutting_down and self._pending_of(self.assigned_work[node]) == 0:
                node.shutdown()
            return
        super()._reschedule(node)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getoption("dist") == "loadscope":
        return ModuleScopes(config, log)
    return None


_RANK = {module: rank for rank, module in enumerate(LONGEST_FIRST)}


def run_order(nodeid: str) -> tuple[bool, int]:
    return scope_of(nodeid) != VLLM_GROUP, _RANK.get(module_of(nodeid), len(_RANK))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test gets its tier mark (README, Development): `e2e` where it asks for the real
    engine or is marked so, `integration` where it needs services, `workflow` where it runs a
    workflow on the time-skipping server with its activities stood in, `unit` otherwise. So
    `-m "not e2e"` never loads vLLM, whatever a module forgot to say."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if names & E2E_FIXTURES and scope_of(item.nodeid) != VLLM_GROUP:
            raise pytest.UsageError(
                f"{item.nodeid} runs the session's vLLM engine: add it to VLLM_TESTS in "
                "tests/conftest.py, so that the engine loads on one worker"
            )
        if names & E2E_FIXTURES and item.get_closest_marker("e2e") is None:
            item.add_marker(pytest.mark.e2e)
        if item.get_closest_marker("e2e") and not item.get_closest_marker("integration"):
            item.add_marker(pytest.mark.integration)
        in_workflows = Path(str(item.fspath)).parent.name == "workflows"
        if (
            in_workflows
            and names & WORKFLOW_FIXTURES
            and not item.get_closest_marker("integration")
        ):
            item.add_marker(pytest.mark.workflow)
        if not any(item.get_closest_marker(t) for t in ("integration", "workflow", "e2e")):
            item.add_marker(pytest.mark.unit)
    if os.environ.get("PYTEST_XDIST_WORKER"):  # every worker sorts alike: xdist compares them
        items.sort(key=lambda item: run_order(item.nodeid))


_armed_handler: int | None = None


# Test data in memory: the embedded index flushes (fsyncs) each write, and on a disk that other
# processes write to, each fsync waited for their data too: 0.2-0.9 s per ingest batch on this
# 2-CPU machine during a run, against 0.4 ms on tmpfs. What a test keeps there is small (the
# largest, the session's sample index, is ~200 MB a worker). A SIGKILL of a process, which is
# what the tests do, loses nothing on tmpfs either.
TMPFS = Path("/dev/shm")
TMPFS_NEEDED = 4 << 30
BASETEMP_IN_MEMORY = pytest.StashKey[Path]()


@pytest.hookimpl(tryfirst=True)  # before pytest's tmp_path factory reads --basetemp
def pytest_configure(config: pytest.Config) -> None:
    """Without --basetemp, put pytest's temporary folders on tmpfs where the machine has one
    with 4 GiB free (DURABLE_RAG_TEST_TMPFS=0 keeps them on disk, kept after the run as pytest
    keeps them). xdist's workers get theirs inside the controller's."""
    if hasattr(config, "workerinput") or config.option.basetemp:
        return
    if os.environ.get("DURABLE_RAG_TEST_TMPFS", "1") == "0" or not TMPFS.is_dir():
        return
    free = shutil.disk_usage(TMPFS).free
    if free < TMPFS_NEEDED or not os.access(TMPFS, os.W_OK):
        return
    base = Path(tempfile.mkdtemp(prefix="durable-rag-pytest-", dir=TMPFS))
    config.option.basetemp = str(base)
    config.stash[BASETEMP_IN_MEMORY] = base


def pytest_sessionstart(session: pytest.Session) -> None:
    """Whatever this process starts dies with it, and what it keeps in memory goes when it
    does (tests/reaper.py). xdist's controller too: its workers die with it, and then their
    servers with them."""
    reaper.guard()
    if base := session.config.stash.get(BASETEMP_IN_MEMORY, None):
        reaper.remove_when_gone(base)
    basetemp = session.config.option.basetemp
    if basetemp and Path(basetemp).resolve().is_relative_to(TMPFS):
        # tempfile's folders too (the session's Postgres, a process stack's data): beside
        # basetemp, which pytest empties when it first hands out a tmp_path.
        tempfile.tempdir = tempfile.mkdtemp(prefix="durable-rag-scratch-", dir=TMPFS)
        reaper.remove_when_gone(Path(tempfile.tempdir))


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Keep faulthandler first in line for SIGSEGV.

    vLLM loads tvm_ffi (through xgrammar), whose library constructor replaces the SIGSEGV handler
    with one that allocates while symbolizing a native backtrace, and writes it to the captured
    stderr: a native crash then ends the run with a bare "Segmentation fault". Re-arming puts
    faulthandler back in front (every thread's Python stack, to pytest's uncaptured stderr), and
    it chains to tvm's handler for the native frames.
    """
    global _armed_handler
    from _pytest.faulthandler import fault_handler_stderr_fd_key

    fd = item.config.stash.get(fault_handler_stderr_fd_key, None)
    if fd is None:
        return
    libc = ctypes.CDLL(None)
    libc.signal.restype = ctypes.c_void_p
    libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
    current = libc.signal(signal.SIGSEGV, None)  # reads it (and sets SIG_DFL for a moment)
    libc.signal(signal.SIGSEGV, current)
    if current == _armed_handler:
        return
    faulthandler.disable()  # enable() is a no-op while enabled, and would not see tvm's handler
    libc.signal(signal.SIGSEGV, current)
    faulthandler.enable(file=fd, all_threads=True)
    _armed_handler = libc.signal(signal.SIGSEGV, None)
    libc.signal(signal.SIGSEGV, _armed_handler)


TEST_POSTGRES_SETTINGS = ("fsync=off", "synchronous_commit=off", "full_page_writes=off")
# Migrated once per session; each test's fresh database is a copy of it (CREATE DATABASE ...
# TEMPLATE), not another run of every migration.
MIGRATED_TEMPLATE = "t_migrated_template"


@pytest.fixture(scope="session")
def pg_server() -> Iterator[EmbeddedPostgres]:
    # Outside pytest's temporary root: each new pytest session makes that root 0700, and the
    # server of a session still running (it runs as its own user when we are root) would lose
    # its data directory.
    root = Path(tempfile.mkdtemp(prefix="durable-rag-test-pg-"))
    reaper.remove_when_gone(root)
    # A test server's data is thrown away: nothing waits on fsync (Postgres' own advice for
    # throwaway data), and a crash of the machine loses nothing a test needs.
    server = EmbeddedPostgres(root / "data", free_port(), settings=TEST_POSTGRES_SETTINGS)
    try:
        server.start()
        server.ensure_database(MIGRATED_TEMPLATE)
        template = server.url(MIGRATED_TEMPLATE)
        migrate(template)
        with psycopg.connect(template.replace("postgresql+psycopg", "postgresql")) as conn:
            # A template is copied only while nobody is connected to it.
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        yield server
    finally:
        server.stop()  # also one that started but never became ready
        shutil.rmtree(root, ignore_errors=True)


@dataclass
class Database:
    url: str
    name: str
    sessions: sessionmaker[Session]

    def scalar(self, sql: str, *params: Any) -> Any:
        with psycopg.connect(self.url.replace("postgresql+psycopg", "postgresql")) as conn:
            row = conn.execute(sql, params).fetchone()
            return row[0] if row else None

    def execute(self, sql: str, *params: Any) -> None:
        with psycopg.connect(self.url.replace("postgresql+psycopg", "postgresql")) as conn:
            conn.execute(sql, params)

    def rows(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.url.replace("postgresql+psycopg", "postgresql")) as conn:
            return conn.execute(sql, params).fetchall()

    def _admin(self, *statements: str) -> None:
        """Run statements on the server's `postgres` database, this one's connections closed."""
        self.sessions.kw["bind"].dispose()
        admin = self.url.replace("postgresql+psycopg", "postgresql").rsplit("/", 1)[0]
        with psycopg.connect(f"{admin}/postgres", autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                (self.name,),
            )
            for statement in statements:
                conn.execute(statement)  # type: ignore[arg-type]

    def copy_to(self, name: str) -> None:
        """A new database `name` with this one's contents (a template for later copies)."""
        self._admin(f'CREATE DATABASE "{name}" TEMPLATE "{self.name}"')

    def replace_with_copy_of(self, name: str) -> None:
        """This database's contents become a copy of `name`'s (its url and name stay)."""
        self._admin(
            f'DROP DATABASE "{self.name}" WITH (FORCE)',
            f'CREATE DATABASE "{self.name}" TEMPLATE "{name}"',
        )


@contextlib.contextmanager
def fresh_database(pg_server: EmbeddedPostgres) -> Iterator[Database]:
    """A new, migrated database on the session's Postgres server."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    pg_server.ensure_database(name, template=MIGRATED_TEMPLATE)
    url = pg_server.url(name)
    db = Database(url, name, make_sessionmaker(url))
    yield db
    db.sessions.kw["bind"].dispose()


@pytest.fixture
def database(pg_server: EmbeddedPostgres) -> Iterator[Database]:
    with fresh_database(pg_server) as db:
        yield db


@pytest.fixture(scope="module")
def module_database(pg_server: EmbeddedPostgres) -> Iterator[Database]:
    """One migrated database for a test module (its tests share what they ingest)."""
    with fresh_database(pg_server) as db:
        yield db


@pytest.fixture(scope="session")
def temporal_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TemporalDevServer]:
    server = TemporalDevServer(tmp_path_factory.mktemp("temporal"), free_port(), None, free_port())
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
async def client(temporal_server: TemporalDevServer) -> Client:
    return await connect(Settings(temporal_address=temporal_server.address))


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    return load_embedder(PACKAGED_MINILM, "cpu", max_length=512, batch_size=32)


@functools.cache
def query_embedder() -> Embedder:
    """The orchestrators' own copy of the model, as in the stack: a query never waits for the
    index worker's embedder, which an ingest may hold."""
    return load_embedder(PACKAGED_MINILM, "cpu", max_length=512, batch_size=32)


@pytest.fixture(
    scope="module",
    params=[
        "scripted",
        pytest.param("vllm", marks=[pytest.mark.full, pytest.mark.e2e, pytest.mark.integration]),
    ],
)
def llm_engine(request: pytest.FixtureRequest) -> Any:
    """The engine of a test whose point is not the engine: the scripted one (tests/engines.py)
    in `make test`, and the session's vLLM engine as well in `make test-full`, so each such test
    still runs on the real engine before an issue that touches inference is resolved."""
    if request.param == "vllm":
        return request.getfixturevalue("engine")
    from tests.engines import ScriptedEngine

    return ScriptedEngine()


@pytest.fixture(scope="session")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmEngine]:
    """One vLLM (CPU) engine on the packaged SmolLM2 for the whole session: it takes ~50 s to
    start and most of a GiB; every test that generates shares it."""
    settings = Settings()
    model = resolve_generator(PACKAGED_SMOLLM2, settings.data_dir.resolve())
    engine = VllmEngine(
        EngineConfig(
            model=model,
            served_name=settings.llm.name,
            max_model_len=settings.llm.max_model_len,
            max_num_seqs=4,
            gpu_memory_utilization=settings.llm.gpu_memory_utilization,
            tensor_parallel_size=1,
            dtype="float32",
            enforce_eager=True,
        )
    )
    yield engine
    engine.close()


def answer_of(tenant: str, request_id: str) -> str:
    """The workflow id of the answer a gateway request with this X-Request-ID started: the
    server makes trace ids from the tenant and the caller's key (ragkit.ids.trace_id)."""
    return ids.answer_workflow_id(ids.trace_id(tenant, request_id, ""))


def make_settings(**overrides: Any) -> Settings:
    """Settings for a test: uuid task queues, so tests never see each other's tasks."""
    values: dict[str, Any] = {
        "workflow_task_queue": f"wf-{uuid.uuid4().hex[:8]}",
        "index_task_queue": f"ix-{uuid.uuid4().hex[:8]}",
        "live_task_queue": f"live-{uuid.uuid4().hex[:8]}",
        # A test's workers stop when it ends: a short drain keeps a stuck activity from holding it.
        "worker_drain_seconds": 5,
        # In-process workers are unversioned: hundreds of tests' uuid queues would all join one
        # deployment version. Process stacks run versioned, as `durable-rag up` does.
        "worker_versioning": False,
    }
    values.update(overrides)
    return Settings(**values)


@dataclass
class Stack:
    """In-process workers over the real services, for one test."""

    settings: Settings
    client: Client
    database: Database
    index: VectorIndex
    embedder: Embedder

    async def rag(self) -> Any:
        from durable_rag.client import RagClient

        return RagClient(self.client, self.settings)


@asynccontextmanager
async def running_stack(
    client: Client,
    database: Database,
    embedder: Embedder,
    data_dir: Path,
    with_index_worker: bool = True,
    reranker: Any = None,
    with_orchestrator: bool = True,
    **overrides: Any,
) -> AsyncIterator[Stack]:
    from ragkit.index.generations import Generations
    from workers import index as index_worker
    from workers import orchestrator
    from workers.common import open_reader

    settings = make_settings(
        database_url=database.url, data_dir=data_dir, qdrant_collection="chunks", **overrides
    )
    index = open_index(settings, embedder.dimension)
    generations = Generations(
        settings, database.sessions, embedder.name, embedder.dimension, opened=index
    )
    # The index worker serves the orchestrator's live searches on its read socket, as in the
    # stack; without an index worker nobody answers there, as when it is down.
    reads = index_worker.serve_reads(settings, generations) if with_index_worker else None
    reader = open_reader(settings, database.sessions, query_embedder())
    try:
        with ThreadPoolExecutor(8) as executor, ThreadPoolExecutor(16) as live_executor:
            workers = []
            if with_orchestrator:
                workers += orchestrator.build_workers(
                    client,
                    settings,
                    database.sessions,
                    query_embedder(),
                    reader,
                    executor,
                    live_executor,
                )
            if with_index_worker:
                workers.append(
                    index_worker.build_worker(
                        client,
                        settings,
                        generations,
                        embedder,
                        database.sessions,
                        executor,
                        reranker=reranker,
                    )
                )
            async with contextlib.AsyncExitStack() as running:
                for worker in workers:
                    await running.enter_async_context(worker)
                yield Stack(settings, client, database, index, embedder)
    finally:
        reader.close()
        if reads is not None:
            reads.close()
        index.close()


@pytest.fixture
async def stack(
    client: Client, database: Database, embedder: Embedder, tmp_path: Path
) -> AsyncIterator[Stack]:
    async with running_stack(client, database, embedder, tmp_path / "data") as s:
        yield s
