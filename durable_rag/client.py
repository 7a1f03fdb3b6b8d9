"""Typed client helpers for backend services: start flows through the Temporal client.

rag = await RagClient.connect(Settings())
result = await rag.ingest(["docs/"], tenant="acme")
found = await rag.search("how do refunds work?", tenant="acme")
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from ragkit import ids, prompts
from ragkit.db import make_sessionmaker
from ragkit.settings import Settings
from ragkit.sources import Source
from ragkit.store import model_alias, served_models, uploads
from ragkit.store.history import read_history
from ragkit.temporal import connect
from schemas.answer import (
    DEFAULT_ANSWER_TOKENS,
    DEFAULT_TOP_K,
    Answer,
    AnswerPlan,
    AnswerWorkflowInput,
    AskRequest,
    ConversationWindow,
    RoutingPlan,
    ShadowPlan,
)
from schemas.common import DocumentFilter
from schemas.conversation import (
    DELETED_CONVERSATION,
    ChatReply,
    ChatRequest,
    ChatUpdate,
    ConversationHistory,
    ConversationInput,
    ConversationKey,
    TurnToCancel,
    WindowPlan,
)
from schemas.documents import DocumentDeleted, DocumentRef
from schemas.evaluation import EvalCase, EvalInput, EvalReport
from schemas.gateway import DocumentAccepted
from schemas.ingest import IngestProgress, IngestRequest, IngestResult, IngestWorkflowInput
from schemas.maintenance import CompactionInput, CompactionReport, TenantDeleted, TenantRef
from schemas.rebuild import RebuildInput, RebuildReport
from schemas.search import (
    RetrievalMode,
    RetrievalPlan,
    SearchRequest,
    SearchResponse,
    SearchWorkflowInput,
)
from workflows.answer import AnswerWorkflow
from workflows.compaction import CompactionWorkflow
from workflows.conversation import ConversationWorkflow
from workflows.delete_document import DeleteDocumentWorkflow
from workflows.delete_tenant import DeleteTenantWorkflow
from workflows.evaluation import EvaluationWorkflow
from workflows.ingest import IngestWorkflow
from workflows.rebuild import RebuildIndexWorkflow
from workflows.search import SearchWorkflow

log = logging.getLogger(__name__)


def failure_cause(exc: BaseException) -> BaseException:
    """The innermost cause of a failed workflow or update: the activity's ApplicationError, say."""
    cause = exc
    # WorkflowFailureError and WorkflowUpdateFailedError wrap the failure chain in `.cause` too.
    while isinstance(getattr(cause, "cause", None), BaseException):
        cause = cause.cause  # type: ignore[attr-defined]
    return cause


class IdempotencyConflict(ValueError):
    """An idempotency key reused with a different body."""


# Tokens of the system prompt, the passage numbering and the chat template around the passages.
PROMPT_OVERHEAD_TOKENS = 200
# How long a client trusts what it last read of the served models' context lengths: a worker
# restarted with another max_model_len is budgeted for within this many seconds.
SERVED_MODELS_TTL_SECONDS = 10.0
# How long the default model alias read from Postgres is reused. A swap waits a second after it
# switches the alias, then for every answer started up to two seconds after it, before it stops
# the old worker (durable_rag/model_swap.py): an answer started on a stale read is drained too.
DEFAULT_MODEL_TTL_SECONDS = 0.5
# Past its TTL, a read this much older is still used while the next read is on its way (a live
# request never waits for Postgres while the gateway's refresher keeps reading): within the
# swap's two-second margin, so an answer started on it is drained too.
DEFAULT_MODEL_STALE_SECONDS = 1.5


class RagClient:
    def __init__(
        self, client: Client, settings: Settings, sessions: sessionmaker[Session] | None = None
    ) -> None:
        self.client = client
        self.settings = settings
        # Reads of the record (conversation history) go straight to Postgres; made on first use.
        self._sessions = sessions
        # model -> the context length its LLM worker announced (ragkit/store/served_models.py)
        self._served: dict[str, int] = {}
        self._served_read_at = float("-inf")
        self._default_model = ""
        self._default_read_at = float("-inf")
        self._default_reading: asyncio.Future[str] | None = None  # the read in flight

    @property
    def sessions(self) -> sessionmaker[Session]:
        if self._sessions is None:
            self._sessions = make_sessionmaker(self.settings.postgres.sqlalchemy_url)
        return self._sessions

    def close(self) -> None:
        if self._sessions is not None:
            self._sessions.kw["bind"].dispose()
            self._sessions = None

    @classmethod
    async def connect(
        cls, settings: Settings, sessions: sessionmaker[Session] | None = None
    ) -> RagClient:
        return cls(await connect(settings), settings, sessions)

    def ingest_request(
        self,
        paths: Sequence[str],
        tenant: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> IngestRequest:
        try:
            absolute = [os.path.abspath(Path(p).expanduser()) for p in paths]
        except RuntimeError as exc:  # `~user/...` of a user this machine does not know
            raise ValueError(f"cannot expand a path: {exc}") from exc
        return IngestRequest(
            tenant=tenant or self.settings.default_tenant,
            paths=absolute,
            batch_documents=self.settings.ingest.batch_documents,
            batches_per_run=self.settings.ingest.batches_per_run,
            metadata=dict(metadata or {}),
        )

    async def start_ingest(
        self, request: IngestRequest
    ) -> WorkflowHandle[IngestWorkflow, IngestResult]:
        return await self.client.start_workflow(
            IngestWorkflow.run,
            IngestWorkflowInput(request=request),
            id=ids.ingest_workflow_id(request),
            task_queue=self.settings.temporal.workflow_task_queue,
            memo={"tenant": request.tenant},
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            static_summary=f"ingest {len(request.paths)} path(s) for tenant {request.tenant}",
        )

    async def ingest(
        self,
        paths: Sequence[str],
        tenant: str | None = None,
        on_progress: Callable[[IngestProgress], Awaitable[None]] | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> IngestResult:
        """Ingest files and folders; `metadata` pairs go to every document (searches filter on
        them)."""
        request = self.ingest_request(paths, tenant, metadata)
        handle = await self.start_ingest(request)
        if on_progress is None:
            return await handle.result()
        result_task = asyncio.ensure_future(handle.result())
        while not result_task.done():
            # A query can fail between runs (continue-as-new); the next one works.
            with contextlib.suppress(Exception):
                await on_progress(await handle.query(IngestWorkflow.progress, request.tenant))
            await asyncio.wait({result_task}, timeout=0.5)
        return result_task.result()

    async def ingest_document(
        self,
        tenant: str,
        name: str,
        data: bytes,
        idempotency_key: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> DocumentAccepted:
        """Keep the bytes in Postgres and start ingesting them as the document `upload:<name>`,
        with its `metadata` pairs. With an idempotency key, a retried call starts nothing new
        (and a different body under the same key is an IdempotencyConflict)."""
        if len(data) > self.settings.ingest.max_document_bytes:
            raise ValueError(
                f"{len(data)} bytes is over the document limit of "
                f"{self.settings.ingest.max_document_bytes} bytes (DURABLE_RAG_MAX_DOCUMENT_BYTES)"
            )
        source = str(Source.upload(name))
        document_id = ids.document_id(tenant, source)
        digest = ids.content_hash(data, metadata)  # other pairs under the same key: a conflict
        workflow_id = ids.upload_workflow_id(tenant, name, idempotency_key, uuid.uuid4().hex[:12])
        if idempotency_key:
            seen = await self._seen_ingest(workflow_id, digest)
            if seen:
                return DocumentAccepted(
                    workflow_id=workflow_id, document_id=document_id, duplicate=True
                )
        await asyncio.to_thread(uploads.store, self.sessions, tenant, name, data)
        request = IngestRequest(
            tenant=tenant,
            paths=[source],
            batch_documents=self.settings.ingest.batch_documents,
            batches_per_run=self.settings.ingest.batches_per_run,
            metadata=dict(metadata or {}),
        )
        try:
            await self.client.start_workflow(
                IngestWorkflow.run,
                IngestWorkflowInput(request=request),
                id=workflow_id,
                task_queue=self.settings.temporal.workflow_task_queue,
                memo={"tenant": tenant, "sha256": digest},
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                static_summary=f"ingest the upload {name} for tenant {tenant}",
            )
        except WorkflowAlreadyStartedError:  # the same key, concurrently: one run
            await self._seen_ingest(workflow_id, digest)
            return DocumentAccepted(
                workflow_id=workflow_id, document_id=document_id, duplicate=True
            )
        return DocumentAccepted(workflow_id=workflow_id, document_id=document_id)

    async def _seen_ingest(self, workflow_id: str, digest: str) -> bool:
        try:
            described = await self.client.get_workflow_handle(workflow_id).describe()
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return False
            raise
        if (await described.memo()).get("sha256") != digest:
            raise IdempotencyConflict(
                f"this Idempotency-Key was used for another document body (run {workflow_id})"
            )
        return True

    async def delete_document(
        self, document_id: uuid.UUID, tenant: str | None = None
    ) -> DocumentDeleted:
        """Delete a document; from the moment this returns no retrieval path sees it. Raises
        WorkflowFailureError with a NotFound cause for a document the tenant does not have."""
        ref = DocumentRef(tenant=tenant or self.settings.default_tenant, document_id=document_id)
        return await self.client.execute_workflow(
            DeleteDocumentWorkflow.run,
            ref,
            id=ids.delete_workflow_id(ref),
            task_queue=self.settings.temporal.workflow_task_queue,
            memo={"tenant": ref.tenant},
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            static_summary=f"delete document {document_id} of tenant {ref.tenant}",
        )

    async def delete_tenant(self, tenant: str) -> TenantDeleted:
        """Delete a tenant whole (DeleteTenantWorkflow): its keys, documents, index points,
        conversations, answers' records and every Temporal run that carried its text. A deletion
        already running is joined; one that ended can be run again (it removes what is left)."""
        ref = TenantRef(tenant=tenant)
        return await self.client.execute_workflow(
            DeleteTenantWorkflow.run,
            ref,
            id=ids.delete_tenant_workflow_id(ref.tenant),
            task_queue=self.settings.temporal.workflow_task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            static_summary=f"delete tenant {ref.tenant} whole",
        )

    async def evaluate(
        self,
        set_name: str,
        cases: Sequence[EvalCase],
        tenant: str,
        concurrency: int = 4,
        max_answer_tokens: int = 64,
    ) -> EvalReport:
        """Run a case set through the real answer flow (EvaluationWorkflow) and score it."""
        plan = self.answer_plan(max_answer_tokens, DEFAULT_TOP_K, await self.default_model())
        return await self.client.execute_workflow(
            EvaluationWorkflow.run,
            EvalInput(
                set_name=set_name,
                tenant=tenant,
                cases=list(cases),
                plan=plan,
                max_answer_tokens=max_answer_tokens,
                concurrency=concurrency,
            ),
            id=ids.eval_workflow_id(set_name, uuid.uuid4().hex[:8]),
            task_queue=self.settings.temporal.workflow_task_queue,
            memo={"tenant": tenant},
            static_summary=f"evaluate {set_name} ({len(cases)} cases)",
        )

    async def compact(self, batch_size: int | None = None) -> CompactionReport:
        """Run a compaction now (the schedule runs it nightly)."""
        request = CompactionInput(
            batch_size=batch_size or self.settings.maintenance.compaction_batch_size,
            transcript_retention_days=self.settings.answer.transcript_retention_days,
            cost_retention_days=self.settings.maintenance.cost_retention_days,
            shadow_retention_days=self.settings.maintenance.shadow_retention_days,
            answer_cache_retention_days=self.settings.maintenance.answer_cache_retention_days,
            eval_report_retention_days=self.settings.maintenance.eval_report_retention_days,
            rewrite_max_mb=self.settings.maintenance.rewrite_max_mb,
        )
        return await self.client.execute_workflow(
            CompactionWorkflow.run,
            request,
            id=ids.compaction_workflow_id(uuid.uuid4().hex[:12]),
            task_queue=self.settings.temporal.workflow_task_queue,
            static_summary="compaction, started by hand",
        )

    def rebuild_input(self, grace_seconds: float | None = None) -> RebuildInput:
        s = self.settings
        return RebuildInput(
            batch_size=s.maintenance.rebuild_batch_size,
            hnsw_m=s.index.hnsw_m,
            hnsw_ef_construct=s.index.hnsw_ef_construct,
            grace_seconds=s.maintenance.rebuild_grace_seconds
            if grace_seconds is None
            else grace_seconds,
        )

    async def start_rebuild(
        self, grace_seconds: float | None = None
    ) -> WorkflowHandle[RebuildIndexWorkflow, RebuildReport]:
        """Start a rebuild, or attach to the one running (one at a time per collection)."""
        return await self.client.start_workflow(
            RebuildIndexWorkflow.run,
            self.rebuild_input(grace_seconds),
            id=ids.rebuild_workflow_id(self.settings.index.collection),
            task_queue=self.settings.temporal.workflow_task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            static_summary=f"rebuild the index {self.settings.index.collection}",
        )

    def _live_start(self) -> dict[str, Any]:
        """How a live question starts: on the live queue, eagerly where this process hosts a
        live worker on the same client (the first workflow task comes back in the start
        response; elsewhere the server dispatches it as usual), with a short task timeout so a
        lost first task is handed on quickly."""
        t = self.settings.temporal
        return {
            "task_queue": t.live_task_queue,
            "request_eager_start": t.eager_start,
            "task_timeout": timedelta(seconds=t.live_task_timeout_seconds),
        }

    def retrieval_plan(self, top_k: int = 1) -> RetrievalPlan:
        s = self.settings
        return RetrievalPlan(
            mode=s.retrieval.mode,
            candidates=max(s.retrieval.candidates, top_k),
            fusion_method=s.retrieval.fusion_method,
            dense_weight=s.retrieval.fusion_dense_weight,
            keyword_weight=s.retrieval.fusion_keyword_weight,
            dense_min_spread=s.retrieval.fusion_dense_min_spread,
            keyword=s.retrieval.keyword,
            rrf_k=s.retrieval.fusion_rrf_k,
        )

    async def _start_live(
        self,
        run: Any,
        arg: Any,
        workflow_id: str,
        tenant: str,
        request_key: str | None,
        fingerprint: str,
        summary: str,
        result_type: type,
    ) -> WorkflowHandle[Any, Any]:
        """Start a live flow. With the caller's idempotency key (its id is then a hash of the
        tenant and the key: ragkit.ids.trace_id), a retried request attaches to the run the
        first one started, open or closed, and the same key with another body is an
        IdempotencyConflict; the run keeps the key as a label in its memo."""
        memo = {"tenant": tenant}
        if request_key:
            memo |= {"request_key": request_key, "request_hash": fingerprint}
        try:
            return await self.client.start_workflow(
                run,
                arg,
                id=workflow_id,
                memo=memo,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE
                if request_key
                else WorkflowIDReusePolicy.ALLOW_DUPLICATE,
                static_summary=summary,
                **self._live_start(),
            )
        except WorkflowAlreadyStartedError:
            if not request_key:
                raise
        handle = self.client.get_workflow_handle(workflow_id, result_type=result_type)
        described = await handle.describe()
        if (await described.memo()).get("request_hash") != fingerprint:
            raise IdempotencyConflict(
                f"this X-Request-ID was used for another request (run {workflow_id})"
            )
        return handle

    async def search(
        self,
        query: str,
        tenant: str | None = None,
        top_k: int = 5,
        request_key: str | None = None,
        mode: RetrievalMode | None = None,
        documents: DocumentFilter | None = None,
    ) -> SearchResponse:
        """`request_key`: the caller's idempotency key (a retried search attaches to its run);
        `documents`: a time range and metadata pairs the documents searched must match."""
        request = SearchRequest(
            tenant=tenant or self.settings.default_tenant,
            query=query,
            top_k=top_k,
            mode=mode,
            filter=documents or DocumentFilter(),
        )
        trace = ids.trace_id(request.tenant, request_key, uuid.uuid4().hex)
        handle = await self._start_live(
            SearchWorkflow.run,
            SearchWorkflowInput(request=request, plan=self.retrieval_plan(top_k)),
            ids.search_workflow_id(trace),
            request.tenant,
            request_key,
            ids.short_hash(request.model_dump_json(), length=32),
            f"search: {query[:80]}",
            SearchResponse,
        )
        result: SearchResponse = await handle.result()
        return result

    def shadowed(self, workflow_id: str) -> bool:
        """Whether this answer is in the shadow sample: a hash of its id, so a retried start of
        the same request decides the same way."""
        rate = self.settings.shadow.sample_rate
        if rate <= 0:
            return False
        digest = int.from_bytes(hashlib.sha256(workflow_id.encode()).digest()[:8], "big")
        return digest / 2**64 < rate

    async def default_model(self, fresh: bool = False) -> str:
        """The model new answers go to: the `default` alias a swap sets, else the settings'.
        Read at most every DEFAULT_MODEL_TTL_SECONDS unless `fresh`: a live request's path has
        no database round trip of its own before its workflow starts. One read at a time: the
        requests that find the alias stale share it (a burst of 600 once queued 600 reads in the
        worker threads, half a second for each request's admission), and wait for it only when
        the last read is over DEFAULT_MODEL_STALE_SECONDS old."""
        await self.refresh_served_models()
        age = time.monotonic() - self._default_read_at
        if not fresh and age < DEFAULT_MODEL_TTL_SECONDS:
            return self._default_model
        if self._default_reading is None or self._default_reading.done():
            self._default_reading = asyncio.ensure_future(self._read_default_model())
        if not fresh and age < DEFAULT_MODEL_STALE_SECONDS:
            return self._default_model  # the read refreshes it for the requests after this one
        # Shielded: a request that is cancelled while it waits leaves the read to the others.
        return await asyncio.shield(self._default_reading)

    async def admission_model(self) -> str:
        """The default model as last read, for admission at the gateway's door: never waits for
        Postgres once it has been read (a read is started if this one is past its TTL). A burst's
        refusal once waited 1.8 s behind a read on a Postgres starved by the admitted work, and
        the served models' read every SERVED_MODELS_TTL_SECONDS held one request each time.
        Stale by up to a slow read: an admitted request still starts on the model
        `default_model` gives when it starts (its admission only counted its cost there)."""
        if not self._default_model:
            return await self.default_model()  # never read: this gateway's first request
        if time.monotonic() - self._default_read_at >= DEFAULT_MODEL_TTL_SECONDS and (
            self._default_reading is None or self._default_reading.done()
        ):
            self._default_reading = asyncio.ensure_future(self._read_default_model())
        return self._default_model

    async def _read_default_model(self) -> str:
        began = time.monotonic()  # fresh from the read's start: a swap's wait counts from it
        try:
            model = await asyncio.to_thread(
                model_alias.active, self.sessions, self.settings.llm.name
            )
        except SQLAlchemyError as exc:
            # Answering needs Postgres anyway; this keeps the error where it belongs.
            log.warning("cannot read the default model (%s); using %s", exc, self.settings.llm.name)
            return self.settings.llm.name
        self._default_model, self._default_read_at = model, began
        return model

    async def refresh_served_models(self, force: bool = False) -> None:
        """Read the context length each LLM worker announced, at most every
        SERVED_MODELS_TTL_SECONDS (every live entry point calls this before it plans)."""
        now = time.monotonic()
        if not force and now - self._served_read_at < SERVED_MODELS_TTL_SECONDS:
            return
        # Stamped before the read: requests arriving meanwhile use the last lengths rather than
        # each reading the table again.
        self._served_read_at = now
        try:
            self._served = await asyncio.to_thread(served_models.context_lengths, self.sessions)
        except SQLAlchemyError as exc:
            log.warning("cannot read the served models' context lengths (%s)", exc)

    def max_model_len(self, model: str = "") -> int:
        """The context every model an answer to `model` may call has: the smallest of the model,
        the fallback, the router's models and the shadow's, each as its worker announced it. A
        model no worker announced yet counts with the settings' DURABLE_RAG_LLM_MAX_MODEL_LEN."""
        s = self.settings
        models = {model or s.llm.name, s.llm.fallback_model}
        if s.router.small_model:
            models |= {s.router.small_model, s.router.large_model}
        if s.shadow.sample_rate > 0:
            models.add(s.shadow.model)
        return min(self._served.get(m, s.llm.max_model_len) for m in models if m)

    def context_tokens(self, max_answer_tokens: int, model: str = "") -> int:
        """What the context of the models that may answer (max_model_len) leaves for the question,
        history and passages once an answer of `max_answer_tokens` fits. ValueError when the
        answer is over the limit or leaves no room: every entry point checks this before it
        starts anything."""
        s = self.settings
        if max_answer_tokens > s.llm.max_answer_tokens:
            raise ValueError(
                f"max_answer_tokens {max_answer_tokens} is over the limit of "
                f"{s.llm.max_answer_tokens} (DURABLE_RAG_LLM_MAX_ANSWER_TOKENS)"
            )
        length = self.max_model_len(model)
        context = length - max_answer_tokens - PROMPT_OVERHEAD_TOKENS
        if context < 64:
            raise ValueError(
                f"an answer of {max_answer_tokens} tokens leaves no room for context in "
                f"the model's {length} tokens"
            )
        return context

    def answer_plan(self, max_answer_tokens: int, top_k: int, model: str = "") -> AnswerPlan:
        """How to answer (from settings): `model` is the request's model or the default alias;
        empty, the settings' model."""
        s = self.settings
        return AnswerPlan(
            model=model or s.llm.name,
            fallback_model=s.llm.fallback_model,
            context_tokens=self.context_tokens(max_answer_tokens, model),
            retrieval=self.retrieval_plan(top_k),
            cache_answers=s.answer.cache,
            keep_transcript=s.answer.transcripts,
            rewrite_model=s.answer.query_rewrite_model,
            rerank=bool(s.retrieval.reranker_model),
            rerank_candidates=s.retrieval.rerank_candidates,
            prompt=prompts.load(s.answer.prompt),
            routing=RoutingPlan(
                small_model=s.router.small_model,
                large_model=s.router.large_model,
                max_simple_words=s.router.max_simple_words,
                hard_words=s.router.hard_words,
                min_confidence=s.router.min_confidence,
            )
            if s.router.small_model
            else None,
        )

    async def start_ask(
        self,
        request: AskRequest,
        request_key: str | None = None,
        stream_id: str = "",
        history: ConversationWindow | None = None,
        model: str | None = None,
    ) -> WorkflowHandle[AnswerWorkflow, Answer]:
        """Start an answer and return its handle (cancel it to stop generation). `request_key`:
        the caller's idempotency key (X-Request-ID): a retried request attaches to its run, the
        same key with another question is an IdempotencyConflict. With a `stream_id`, the text
        is published on that token stream as it is generated; `history` carries earlier turns
        of a conversation the caller keeps itself. `model`: the model the caller already
        resolved for this request (the gateway's admission did), so the default alias is not
        read twice."""
        trace = ids.trace_id(request.tenant, request_key, uuid.uuid4().hex)
        workflow_id = ids.answer_workflow_id(trace)
        await self.refresh_served_models()
        plan = self.answer_plan(
            request.max_answer_tokens,
            request.top_k,
            request.model or model or await self.default_model(),
        )
        if self.shadowed(workflow_id):
            s = self.settings
            retrieval = plan.retrieval.model_copy(
                update={
                    "mode": s.shadow.retrieval_mode or plan.retrieval.mode,
                    "candidates": max(
                        s.shadow.retrieval_candidates or plan.retrieval.candidates, request.top_k
                    ),
                    "fusion_method": s.shadow.fusion_method or plan.retrieval.fusion_method,
                }
            )
            candidate = ShadowPlan(
                model=s.shadow.model or plan.model,
                prompt=prompts.load(s.shadow.prompt or s.answer.prompt),
                retrieval=retrieval if retrieval != plan.retrieval else None,
            )
            plan = plan.model_copy(update={"shadow": candidate})
        # What makes a retry the same request: the question and the history, not the stream
        # it listens on or the model the default alias named at the time.
        fingerprint = ids.short_hash(
            request.model_dump_json(), history.model_dump_json() if history else "", length=32
        )
        return await self._start_live(
            AnswerWorkflow.run,
            AnswerWorkflowInput(request=request, plan=plan, history=history, stream_id=stream_id),
            workflow_id,
            request.tenant,
            request_key,
            fingerprint,
            f"answer: {request.question[:80]}",
            Answer,
        )

    async def ask(self, request: AskRequest, request_key: str | None = None) -> Answer:
        handle = await self.start_ask(request, request_key)
        return await handle.result()

    # --- conversations ----------------------------------------------------------------------------

    def conversation_input(self, tenant: str, conversation_id: str) -> ConversationInput:
        s = self.settings
        return ConversationInput(
            tenant=tenant,
            conversation_id=conversation_id,
            plan=self.answer_plan(DEFAULT_ANSWER_TOKENS, DEFAULT_TOP_K),
            window=WindowPlan(
                history_tokens=s.conversation.history_tokens,
                summary_tokens=s.conversation.summary_tokens,
                summary_model=s.conversation.summary_model or s.llm.name,
                idle_seconds=s.conversation.idle_seconds,
                turns_per_run=s.conversation.turns_per_run,
                fold_headroom=s.conversation.fold_headroom,
                fold_wait_seconds=s.conversation.fold_wait_seconds,
            ),
        )

    def _conversation_start(self, tenant: str, conversation_id: str) -> WithStartWorkflowOperation:
        return WithStartWorkflowOperation(
            ConversationWorkflow.run,
            self.conversation_input(tenant, conversation_id),
            id=ids.conversation_workflow_id(tenant, conversation_id),
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            task_queue=self.settings.temporal.live_task_queue,
            task_timeout=timedelta(seconds=self.settings.temporal.live_task_timeout_seconds),
            memo={"tenant": tenant},
            static_summary=f"conversation {conversation_id} of tenant {tenant}",
        )

    async def chat(
        self,
        conversation_id: str,
        message: str,
        tenant: str | None = None,
        message_id: str | None = None,
        top_k: int = 5,
        max_answer_tokens: int = 256,
        stream_id: str = "",
    ) -> ChatReply:
        """Send one message; the conversation's workflow starts if it is not running. Messages
        to one conversation are applied one at a time, in order. A retried call with the same
        `message_id` is applied once."""
        model = await self.default_model()
        # The limits of ask, before anything starts; the passages' budget is this message's.
        context_tokens = self.context_tokens(max_answer_tokens, model)
        request = ChatRequest(
            tenant=tenant or self.settings.default_tenant,
            conversation_id=conversation_id,
            message=message,
            message_id=message_id or uuid.uuid4().hex,
            top_k=top_k,
            max_answer_tokens=max_answer_tokens,
            stream_id=stream_id,
            model=model,
            context_tokens=context_tokens,
        )
        reply: ChatReply = await self._to_conversation(
            request.tenant,
            conversation_id,
            lambda start: self.client.execute_update_with_start_workflow(
                ConversationWorkflow.send,
                ChatUpdate(request=request),
                start_workflow_operation=start,
                id=request.message_id,
            ),
        )
        return reply

    async def _to_conversation(
        self, tenant: str, conversation_id: str, send: Callable[[Any], Awaitable[Any]]
    ) -> Any:
        """An update to a conversation, started if need be. One deleted a moment ago is still
        closing and refuses it: the update then starts the conversation again once closed."""
        for attempt in range(2):
            try:
                return await send(self._conversation_start(tenant, conversation_id))
            except WorkflowUpdateFailedError as exc:
                if attempt or DELETED_CONVERSATION not in str(failure_cause(exc)):
                    raise
                await self._closed(ids.conversation_workflow_id(tenant, conversation_id))
        raise AssertionError("unreachable")

    async def _closed(self, workflow_id: str, timeout: float = 30.0) -> None:
        handle = self.client.get_workflow_handle(workflow_id)
        deadline = asyncio.get_running_loop().time() + timeout
        while asyncio.get_running_loop().time() < deadline:
            described = await handle.describe()
            if described.status != WorkflowExecutionStatus.RUNNING:
                return
            await asyncio.sleep(0.1)

    async def cancel_turn(self, conversation_id: str, tenant: str | None, message_id: str) -> bool:
        """Stop the turn of `message_id` (its answer and generation; a turn still waiting is
        skipped): its `chat` fails with TurnCancelled. The user turn stays stored if it was, no
        assistant turn is. False when the conversation's workflow is not running."""
        turn = TurnToCancel(
            tenant=tenant or self.settings.default_tenant,
            conversation_id=conversation_id,
            message_id=message_id,
        )
        workflow_id = ids.conversation_workflow_id(turn.tenant, conversation_id)
        try:
            await self.client.get_workflow_handle(workflow_id).signal(
                ConversationWorkflow.cancel_turn, turn
            )
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return False
            raise
        return True

    async def history(
        self, conversation_id: str, tenant: str | None = None
    ) -> ConversationHistory | None:
        """The stored conversation (Postgres is the record), or None."""
        key = ConversationKey(
            tenant=tenant or self.settings.default_tenant, conversation_id=conversation_id
        )

        def read() -> ConversationHistory | None:
            with self.sessions() as session:
                return read_history(session, key)

        return await asyncio.to_thread(read)  # a blocking read must not stall the event loop

    async def delete_conversation(self, conversation_id: str, tenant: str | None = None) -> int:
        """Delete a conversation with its turns and summaries (after any turn in flight);
        returns the number of turns removed."""
        key = ConversationKey(
            tenant=tenant or self.settings.default_tenant, conversation_id=conversation_id
        )
        removed: int = await self._to_conversation(
            key.tenant,
            conversation_id,
            lambda start: self.client.execute_update_with_start_workflow(
                ConversationWorkflow.delete, key, start_workflow_operation=start
            ),
        )
        return removed
