"""THE activity policy table: timeouts, retries, task queue and fallback of every activity.

Workflows never write a timeout or a retry policy inline: they call `workflows.calls.call`, which
looks the activity up in its worker's `PolicyTable`. Operators override rows with
`DURABLE_RAG_ACTIVITY_POLICIES` (JSON); each worker builds its table from its settings, once.

A test checks that every activity a workflow calls has a row, and that every row's fallback is one
the workflow implements.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from functools import cache
from types import MappingProxyType

from temporalio.common import RetryPolicy

from ragkit.settings import ActivityPolicyOverride, Settings


class Queue(StrEnum):
    """Which worker hosts an activity. Names of the queues come from settings."""

    WORKFLOW = "workflow"  # orchestrator worker: Postgres and file access
    INDEX = "index"  # index worker: vector index and embedding model
    LLM = "llm"  # an LLM worker: the queue is llm-<model>, chosen per call


class Fallback(StrEnum):
    """What the calling workflow does once retries are exhausted."""

    FAIL_FLOW = "fail the flow: nothing is stored half-way, the caller gets the error"
    FAIL_BATCH = (
        "report the batch's documents as failed and go on with the next batch; "
        "their previous versions stay active"
    )
    OTHER_RETRIEVER = (
        "the other retriever (vector or keyword) serves alone and the degradation is reported"
    )
    FALLBACK_MODEL = (
        "the fallback model's queue; then a cached answer; then a default reply saying the "
        "service is degraded. The answer says which path answered"
    )
    KEEP_ORDER = "keep the retrieval order and report the degradation"
    RULES_REWRITE = "use the rule-based rewrite of the question and report the degradation"
    FAIL_TURN = "fail this turn: the caller gets the error; the stored turns stay as they were"
    KEEP_TURNS = (
        "keep the turns verbatim (the prompt is trimmed oldest-first to its budget) and try "
        "summarizing again after the next turn"
    )
    DEFAULT_REPLY = "the default reply that says the service is degraded"
    NOT_CACHED = "return the answer uncached; a later LLM outage finds no cached answer for it"
    OLD_GENERATION_SERVES = (
        "fail the rebuild and drop the half-built generation: the active one never stopped "
        "serving; run the rebuild again"
    )
    RERUN_LATER = (
        "fail the run: what is left is invisible to readers already; the next run (the "
        "nightly schedule, or `durable-rag compact`) goes on from there"
    )
    TOMBSTONE_HIDES = (
        "fail the delete run: the tombstone already hides the document from every retrieval "
        "path; deleting again (or compaction) removes what is left"
    )
    RERUN_DELETE = (
        "fail the tenant deletion: its keys are revoked and its documents tombstoned, so "
        "nothing of it is served; running the deletion again removes what is left"
    )
    SKIP = (
        "go on without it and record a degradation; what it would have cleaned is invisible "
        "to readers and removed by the next ingest or compaction"
    )


# Errors that retrying cannot fix. Activities raise ApplicationError(type=...) with these.
INVALID_INPUT = "InvalidInput"
INDEX_CONFIG = "IndexConfigError"
MODEL_CONFIG = "ModelLoadError"
PROMPT_TOO_LONG = "PromptTooLong"
NOT_CONFIGURED = "NotConfigured"
NOT_FOUND = "NotFound"
PERMANENT = [INVALID_INPUT, INDEX_CONFIG, MODEL_CONFIG, PROMPT_TOO_LONG, NOT_FOUND]


@dataclass(frozen=True)
class ActivityPolicy:
    queue: Queue
    start_to_close: timedelta
    retry: RetryPolicy
    fallback: Fallback
    heartbeat: timedelta | None = None
    schedule_to_close: timedelta | None = None
    # Time a task may wait for a worker before the fallback takes over (a queue nobody polls).
    schedule_to_start: timedelta | None = None
    # A local activity runs inside the orchestrator worker that runs the workflow: no task queue
    # round trip. Right for short Postgres reads on the answer path; only for Queue.WORKFLOW.
    local: bool = False
    expected_latency: str = ""  # documentation for operators (R1)


def _retry(
    initial: float = 1.0, maximum: float = 30.0, attempts: int = 10, backoff: float = 2.0
) -> RetryPolicy:
    return RetryPolicy(
        initial_interval=timedelta(seconds=initial),
        backoff_coefficient=backoff,
        maximum_interval=timedelta(seconds=maximum),
        maximum_attempts=attempts,
        non_retryable_error_types=list(PERMANENT),
    )


DECLARED: Mapping[str, ActivityPolicy] = MappingProxyType(
    {
        # --- ingest -------------------------------------------------------------------------------
        "discover_files": ActivityPolicy(
            queue=Queue.WORKFLOW,
            start_to_close=timedelta(minutes=2),
            retry=_retry(attempts=5),
            fallback=Fallback.FAIL_FLOW,
            expected_latency="ms per thousand files",
        ),
        "stage_batch": ActivityPolicy(
            queue=Queue.WORKFLOW,
            start_to_close=timedelta(minutes=10),
            heartbeat=timedelta(seconds=30),
            retry=_retry(),
            fallback=Fallback.FAIL_BATCH,
            expected_latency="parse + chunk: ~50 ms per 10 KB document",
        ),
        "index_documents": ActivityPolicy(
            queue=Queue.INDEX,
            start_to_close=timedelta(minutes=30),
            heartbeat=timedelta(seconds=60),
            retry=_retry(attempts=20, maximum=60),
            fallback=Fallback.FAIL_BATCH,
            expected_latency="embedding bound: ~20-100 chunks/s on 2 CPU cores",
        ),
        "commit_batch": ActivityPolicy(
            queue=Queue.WORKFLOW,
            # One transaction: a worker killed mid-commit is retried after this, not minutes.
            start_to_close=timedelta(seconds=30),
            retry=_retry(),
            fallback=Fallback.FAIL_BATCH,
            expected_latency="one transaction: ~10 ms",
        ),
        "purge_superseded": ActivityPolicy(
            queue=Queue.INDEX,
            start_to_close=timedelta(minutes=2),
            retry=_retry(attempts=5),
            fallback=Fallback.SKIP,
            expected_latency="~10 ms per document",
        ),
        "discard_pending": ActivityPolicy(
            queue=Queue.WORKFLOW,
            start_to_close=timedelta(seconds=30),
            retry=_retry(attempts=5),
            fallback=Fallback.SKIP,
            expected_latency="one transaction: ~10 ms",
        ),
        # --- search -------------------------------------------------------------------------------
        # Runs started before live retrieval (workflow patch "live-retrieval") call this one.
        "dense_search": ActivityPolicy(
            queue=Queue.INDEX,
            start_to_close=timedelta(seconds=5),
            schedule_to_close=timedelta(seconds=10),
            retry=_retry(initial=0.2, maximum=2, attempts=3),
            fallback=Fallback.OTHER_RETRIEVER,
            expected_latency="embed ~10-30 ms + search P99 < 50 ms (R3)",
        ),
        "search_vectors": ActivityPolicy(
            queue=Queue.WORKFLOW,
            local=True,
            # R9: a retrieval past its timeout falls back to keyword search; two short tries
            # stay well inside the answer's budget.
            start_to_close=timedelta(seconds=2),
            schedule_to_close=timedelta(seconds=4),  # within the live workflow task's 5 s
            retry=_retry(initial=0.1, maximum=1, attempts=3),
            fallback=Fallback.OTHER_RETRIEVER,
            expected_latency="embed ~10-40 ms in the orchestrator + search ~1-5 ms (R3)",
        ),
        "keyword_search": ActivityPolicy(
            queue=Queue.WORKFLOW,
            local=True,
            start_to_close=timedelta(seconds=5),
            schedule_to_close=timedelta(seconds=10),
            retry=_retry(initial=0.2, maximum=2, attempts=3),
            fallback=Fallback.OTHER_RETRIEVER,
            expected_latency="~5-20 ms (Postgres full text, GIN index)",
        ),
        "rerank": ActivityPolicy(
            queue=Queue.INDEX,
            start_to_close=timedelta(seconds=15),
            schedule_to_close=timedelta(seconds=20),
            retry=_retry(initial=0.2, maximum=2, attempts=2),
            fallback=Fallback.KEEP_ORDER,
            expected_latency="~50-300 ms for 10 passages on CPU",
        ),
        "rewrite_query": ActivityPolicy(
            queue=Queue.LLM,
            start_to_close=timedelta(seconds=10),
            # An optional refinement: never wait long for a busy or absent model.
            schedule_to_start=timedelta(seconds=2),
            retry=_retry(initial=0.5, maximum=1, attempts=1),
            fallback=Fallback.RULES_REWRITE,
            expected_latency="~48 tokens: CPU SmolLM2 ~1-5 s; GPU ~100-300 ms",
        ),
        "generate": ActivityPolicy(
            queue=Queue.LLM,
            start_to_close=timedelta(minutes=3),
            schedule_to_start=timedelta(seconds=10),
            heartbeat=timedelta(seconds=10),
            retry=_retry(initial=1, maximum=5, attempts=2),
            fallback=Fallback.FALLBACK_MODEL,
            expected_latency="CPU SmolLM2-135M ~9 tok/s per sequence; GPU: model dependent",
        ),
        "lookup_cached_answer": ActivityPolicy(
            queue=Queue.WORKFLOW,
            local=True,
            start_to_close=timedelta(seconds=5),
            retry=_retry(initial=0.2, maximum=1, attempts=2),
            fallback=Fallback.DEFAULT_REPLY,
            expected_latency="~5 ms (two indexed reads)",
        ),
        "store_answer": ActivityPolicy(
            queue=Queue.WORKFLOW,
            local=True,
            start_to_close=timedelta(seconds=5),
            retry=_retry(initial=0.2, maximum=1, attempts=2),
            fallback=Fallback.NOT_CACHED,
            expected_latency="~5 ms (one upsert)",
        ),
        # --- conversations ------------------------------------------------------------------------
        "load_conversation": ActivityPolicy(
            queue=Queue.WORKFLOW,
            local=True,
            start_to_close=timedelta(seconds=5),
            retry=_retry(initial=0.2, maximum=2, attempts=10),  # ~13 s: a Postgres restart
            fallback=Fallback.FAIL_TURN,
            expected_latency="~5 ms (summary + recent turns)",
        ),
        "append_turn": ActivityPolicy(
            queue=Queue.WORKFLOW,
            local=True,
            start_to_close=timedelta(seconds=5),
            retry=_retry(initial=0.2, maximum=5, attempts=10),
            fallback=Fallback.FAIL_TURN,
            expected_latency="~5 ms (one idempotent insert)",
        ),
        "save_summary": ActivityPolicy(
            queue=Queue.WORKFLOW,
            local=True,
            start_to_close=timedelta(seconds=5),
            retry=_retry(initial=0.2, maximum=2, attempts=5),
            fallback=Fallback.KEEP_TURNS,
            expected_latency="~5 ms",
        ),
        "summarize": ActivityPolicy(
            queue=Queue.LLM,
            # Background work: on a loaded CPU a 160-token summary takes minutes; the heartbeat,
            # not a short timeout, tells a lost worker from a slow one.
            start_to_close=timedelta(minutes=5),
            heartbeat=timedelta(seconds=10),
            schedule_to_start=timedelta(seconds=30),
            retry=_retry(initial=1, maximum=10, attempts=3),
            fallback=Fallback.KEEP_TURNS,
            expected_latency="CPU SmolLM2 ~5-20 s for 128 tokens; GPU < 1 s",
        ),
        "delete_conversation": ActivityPolicy(
            queue=Queue.WORKFLOW,
            local=True,
            start_to_close=timedelta(seconds=10),
            retry=_retry(initial=0.2, maximum=2, attempts=5),
            fallback=Fallback.FAIL_FLOW,
            expected_latency="~10 ms",
        ),
        "forget_conversation": ActivityPolicy(
            queue=Queue.WORKFLOW,
            local=True,
            start_to_close=timedelta(seconds=10),
            retry=_retry(initial=0.2, maximum=2, attempts=5),
            fallback=Fallback.FAIL_FLOW,
            expected_latency="~20 ms",
        ),
        "forget_runs": ActivityPolicy(
            queue=Queue.WORKFLOW,
            # Waits (StillOpen, retried) for the conversation that asked to close, then deletes
            # one execution per RPC: a long conversation's answers take a while, and a deleted
            # tenant's runs are found by a scan of the namespace (heartbeats show it going on).
            start_to_close=timedelta(minutes=30),
            heartbeat=timedelta(seconds=30),
            retry=_retry(initial=1, maximum=10, attempts=30),
            fallback=Fallback.FAIL_FLOW,
            expected_latency="~5 ms per run, after the conversation closes",
        ),
        "wait_for_open_answers": ActivityPolicy(
            queue=Queue.WORKFLOW,
            # StillOpen, retried, until the answers running at a document's tombstone have
            # finished: an answer runs for minutes at most (generate: 3 min, 2 attempts).
            start_to_close=timedelta(seconds=30),
            retry=_retry(initial=1, maximum=10, attempts=120),
            fallback=Fallback.TOMBSTONE_HIDES,
            expected_latency="~5 ms a look; done when the answers in flight are",
        ),
        "record_cost": ActivityPolicy(
            queue=Queue.WORKFLOW,
            local=True,
            start_to_close=timedelta(seconds=5),
            retry=_retry(initial=0.2, maximum=2, attempts=3),
            fallback=Fallback.SKIP,
            expected_latency="~5 ms",
        ),
        "record_shadow": ActivityPolicy(
            queue=Queue.WORKFLOW,
            local=True,
            start_to_close=timedelta(seconds=5),
            retry=_retry(initial=0.2, maximum=2, attempts=3),
            fallback=Fallback.SKIP,
            expected_latency="~5 ms",
        ),
        "store_eval_report": ActivityPolicy(
            queue=Queue.WORKFLOW,
            local=True,
            start_to_close=timedelta(seconds=10),
            retry=_retry(initial=0.2, maximum=2, attempts=5),
            fallback=Fallback.FAIL_FLOW,
            expected_latency="~10 ms",
        ),
        # --- delete -------------------------------------------------------------------------------
        "tombstone_document": ActivityPolicy(
            queue=Queue.WORKFLOW,
            start_to_close=timedelta(seconds=30),
            retry=_retry(initial=0.2, maximum=5, attempts=10),
            fallback=Fallback.FAIL_FLOW,
            expected_latency="one transaction: ~5 ms",
        ),
        "forget_document_answers": ActivityPolicy(
            queue=Queue.WORKFLOW,
            start_to_close=timedelta(minutes=2),
            retry=_retry(attempts=10),
            fallback=Fallback.TOMBSTONE_HIDES,
            expected_latency="one transaction: ~10 ms per hundred answers",
        ),
        "delete_document_points": ActivityPolicy(
            queue=Queue.INDEX,
            start_to_close=timedelta(minutes=2),
            retry=_retry(attempts=20, maximum=60),
            fallback=Fallback.TOMBSTONE_HIDES,
            expected_latency="~10 ms per document",
        ),
        "purge_document": ActivityPolicy(
            queue=Queue.WORKFLOW,
            start_to_close=timedelta(minutes=2),
            retry=_retry(attempts=10),
            fallback=Fallback.TOMBSTONE_HIDES,
            expected_latency="one transaction: ~10 ms per thousand chunks",
        ),
        "close_tenant": ActivityPolicy(
            queue=Queue.WORKFLOW,
            start_to_close=timedelta(seconds=30),
            retry=_retry(initial=0.2, maximum=5, attempts=10),
            fallback=Fallback.FAIL_FLOW,
            expected_latency="one transaction: ~5 ms",
        ),
        "delete_tenant_points": ActivityPolicy(
            queue=Queue.INDEX,
            start_to_close=timedelta(minutes=5),
            retry=_retry(attempts=20, maximum=60),
            fallback=Fallback.RERUN_DELETE,
            expected_latency="~10 ms per thousand points",
        ),
        "purge_tenant": ActivityPolicy(
            queue=Queue.WORKFLOW,
            start_to_close=timedelta(minutes=5),
            retry=_retry(attempts=10),
            fallback=Fallback.RERUN_DELETE,
            expected_latency="one transaction: ~10 ms per thousand rows",
        ),
        # --- compaction ---------------------------------------------------------------------------
        "index_stats": ActivityPolicy(
            queue=Queue.INDEX,
            start_to_close=timedelta(minutes=1),
            retry=_retry(attempts=10, maximum=30),
            fallback=Fallback.RERUN_LATER,
            expected_latency="~1 ms (an exact count)",
        ),
        "chunk_stats": ActivityPolicy(
            queue=Queue.WORKFLOW,
            start_to_close=timedelta(minutes=5),
            retry=_retry(attempts=10, maximum=30),
            fallback=Fallback.RERUN_LATER,
            expected_latency="one scan of chunks: ~100 ms per 100k rows",
        ),
        "purge_dead_chunks": ActivityPolicy(
            queue=Queue.WORKFLOW,
            start_to_close=timedelta(minutes=5),
            retry=_retry(attempts=10, maximum=60),
            fallback=Fallback.RERUN_LATER,
            expected_latency="~50 ms per 1000 rows",
        ),
        "sweep_index": ActivityPolicy(
            queue=Queue.INDEX,
            start_to_close=timedelta(hours=2),
            heartbeat=timedelta(minutes=2),
            retry=_retry(attempts=10, maximum=60),
            fallback=Fallback.RERUN_LATER,
            expected_latency="~1 s per 10k points",
        ),
        "optimize_index": ActivityPolicy(
            queue=Queue.INDEX,
            start_to_close=timedelta(hours=1),
            # The build runs in a child process (ragkit/index/edge.py), so heartbeats go on; a
            # lost worker is noticed in 2 min.
            heartbeat=timedelta(minutes=2),
            retry=_retry(attempts=3, maximum=60),
            fallback=Fallback.SKIP,
            expected_latency="about 1 min per 100k points (Qdrant Edge, in a child process); "
            "none on the server",
        ),
        "vacuum_chunks": ActivityPolicy(
            queue=Queue.WORKFLOW,
            start_to_close=timedelta(hours=1),
            heartbeat=timedelta(minutes=2),
            retry=_retry(attempts=3, maximum=60),
            fallback=Fallback.SKIP,
            expected_latency="seconds per million rows",
        ),
        "rewrite_tables": ActivityPolicy(
            queue=Queue.WORKFLOW,
            start_to_close=timedelta(hours=1),
            heartbeat=timedelta(minutes=2),
            retry=_retry(attempts=3, maximum=60),
            fallback=Fallback.SKIP,
            expected_latency="seconds per GB rewritten",
        ),
        "purge_transcripts": ActivityPolicy(
            queue=Queue.WORKFLOW,
            start_to_close=timedelta(minutes=5),
            retry=_retry(attempts=3, maximum=60),
            fallback=Fallback.SKIP,
            expected_latency="~10 ms per thousand rows",
        ),
        "purge_expired": ActivityPolicy(
            queue=Queue.WORKFLOW,
            start_to_close=timedelta(minutes=30),
            heartbeat=timedelta(minutes=1),
            retry=_retry(attempts=3, maximum=60),
            fallback=Fallback.SKIP,
            expected_latency="~10 ms per thousand rows; a heartbeat per batch",
        ),
        # --- rebuild ------------------------------------------------------------------------------
        "begin_generation": ActivityPolicy(
            queue=Queue.INDEX,
            start_to_close=timedelta(minutes=2),
            retry=_retry(attempts=10, maximum=30),
            fallback=Fallback.OLD_GENERATION_SERVES,
            expected_latency="~50 ms (one row, an empty index)",
        ),
        "copy_chunks": ActivityPolicy(
            queue=Queue.INDEX,
            start_to_close=timedelta(minutes=10),
            retry=_retry(attempts=20, maximum=60),
            fallback=Fallback.OLD_GENERATION_SERVES,
            expected_latency="embedding bound: a 256-chunk batch in ~3-10 s on 2 CPU cores",
        ),
        "verify_generation": ActivityPolicy(
            queue=Queue.INDEX,
            start_to_close=timedelta(minutes=30),
            heartbeat=timedelta(minutes=2),
            retry=_retry(attempts=5, maximum=60),
            fallback=Fallback.OLD_GENERATION_SERVES,
            expected_latency="~1 s per 10k points, plus what it has to add",
        ),
        "activate_generation": ActivityPolicy(
            queue=Queue.INDEX,
            start_to_close=timedelta(minutes=1),
            retry=_retry(attempts=20, maximum=30),
            fallback=Fallback.FAIL_FLOW,
            expected_latency="one transaction: ~5 ms",
        ),
        "drop_generation": ActivityPolicy(
            queue=Queue.INDEX,
            start_to_close=timedelta(minutes=10),
            retry=_retry(attempts=10, maximum=60),
            fallback=Fallback.SKIP,
            expected_latency="~100 ms (files or a collection deleted)",
        ),
        "hydrate_hits": ActivityPolicy(
            queue=Queue.WORKFLOW,
            local=True,
            start_to_close=timedelta(seconds=5),
            # No answer without the passages: ~13 s of retries ride out a Postgres restart
            # (bench/faults.py postgres_restart) instead of failing every answer in flight.
            retry=_retry(initial=0.2, maximum=2, attempts=10),
            fallback=Fallback.FAIL_FLOW,
            expected_latency="~5 ms",
        ),
    }
)


@dataclass(frozen=True)
class PolicyTable:
    """The policies in effect in one process: the declared rows with the operator's overrides
    (`DURABLE_RAG_ACTIVITY_POLICIES`) and the task queue names, both from its settings. A worker
    builds it once (`from_settings`) and hands it to the workflows it runs (workflows/calls.py);
    nothing changes it afterwards."""

    rows: Mapping[str, ActivityPolicy]
    queues: Mapping[Queue, str]

    @classmethod
    def from_settings(cls, settings: Settings) -> PolicyTable:
        table = dict(DECLARED)
        for name, override in settings.worker.activity_policies.items():
            if name not in table:
                known = ", ".join(sorted(table))
                raise ValueError(
                    f"activity_policies names unknown activity {name!r}; known: {known}"
                )
            table[name] = _apply(table[name], override)
        queues = {
            Queue.WORKFLOW: settings.temporal.workflow_task_queue,
            Queue.INDEX: settings.temporal.index_task_queue,
            Queue.LLM: llm_queue(settings.llm.name),
        }
        return cls(MappingProxyType(table), MappingProxyType(queues))

    @classmethod
    def declared(cls) -> PolicyTable:
        """The declared rows and the default queue names: what a workflow runs with where no
        worker gave it a table (the replayer, which schedules nothing)."""
        return _declared()

    def policy_for(self, activity_name: str) -> ActivityPolicy:
        try:
            return self.rows[activity_name]
        except KeyError:
            raise KeyError(f"activity {activity_name!r} has no row in ragkit.policies") from None

    def queue_name(self, queue: Queue) -> str:
        return self.queues[queue]


@cache
def _declared() -> PolicyTable:
    return PolicyTable.from_settings(Settings.model_construct())


def _apply(policy: ActivityPolicy, o: ActivityPolicyOverride) -> ActivityPolicy:
    def seconds(value: float | None, default: timedelta) -> timedelta:
        return default if value is None else timedelta(seconds=value)

    def maybe(value: float | None, default: timedelta | None) -> timedelta | None:
        return default if value is None else timedelta(seconds=value)

    r = policy.retry
    retry = dataclasses.replace(
        r,
        initial_interval=seconds(o.initial_interval_seconds, r.initial_interval),
        backoff_coefficient=o.backoff_coefficient or r.backoff_coefficient,
        maximum_interval=maybe(o.maximum_interval_seconds, r.maximum_interval),
        maximum_attempts=r.maximum_attempts if o.maximum_attempts is None else o.maximum_attempts,
    )
    return dataclasses.replace(
        policy,
        start_to_close=seconds(o.start_to_close_seconds, policy.start_to_close),
        schedule_to_close=maybe(o.schedule_to_close_seconds, policy.schedule_to_close),
        schedule_to_start=maybe(o.schedule_to_start_seconds, policy.schedule_to_start),
        heartbeat=maybe(o.heartbeat_seconds, policy.heartbeat),
        retry=retry,
    )


def llm_queue(model: str) -> str:
    """Task queue of the LLM workers hosting a model."""
    return f"llm-{model}"
