"""Every id the project makes: deterministic record ids (documents, chunks, conversations: the same
input always gives the same id, so retries never duplicate) and every workflow id."""

from __future__ import annotations

import hashlib
import json
import os
import re
import uuid
from collections.abc import Mapping
from pathlib import Path

from schemas.documents import DocumentRef
from schemas.ingest import IngestRequest

_NAMESPACE = uuid.UUID("6f1c1c8e-3b0a-4c55-9a59-1d3f2f6a0c21")


def document_id(tenant: str, source: str) -> uuid.UUID:
    return uuid.uuid5(_NAMESPACE, f"document\x00{tenant}\x00{source}")


def chunk_id(document: uuid.UUID, version: int, ordinal: int) -> uuid.UUID:
    """Also the vector point id: a retried upsert overwrites, never adds."""
    return uuid.uuid5(_NAMESPACE, f"chunk\x00{document}\x00{version}\x00{ordinal}")


def content_hash(data: bytes, metadata: Mapping[str, str] | None = None) -> str:
    """A document version's identity: its bytes, and its metadata when it has any (so a
    document ingested without metadata keeps the hash it always had)."""
    digest = hashlib.sha256(data).hexdigest()
    if not metadata:
        return digest
    pairs = json.dumps(dict(sorted(metadata.items())), ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(f"{digest}\n{pairs}".encode()).hexdigest()


def short_hash(*parts: str, length: int = 12) -> str:
    digest = hashlib.sha256("\x00".join(parts).encode()).hexdigest()
    return digest[:length]


def slug(text: str, length: int = 40) -> str:
    """A readable fragment for workflow ids: lowercase letters, digits and dashes."""
    cleaned = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return cleaned[:length].strip("-") or "x"


def conversation_id(tenant: str, conversation: str) -> uuid.UUID:
    return uuid.uuid5(_NAMESPACE, f"conversation\x00{tenant}\x00{conversation}")


# --- workflow ids ---------------------------------------------------------------------------------
# Every workflow id is built here, named for what the run does, so the Temporal UI reads like a
# log. An id with a caller's key or a content hash is stable: a retried start finds the run it
# started before (USE_EXISTING or REJECT_DUPLICATE) instead of starting a second one.
#
# Ids are injective in what they are built from: two different (tenant, caller input) pairs never
# share a workflow, whatever the caller puts in either part (tests/ragkit/test_ids.py proves it).
# A tenant name never contains TENANT_END (schemas.common.TenantId), so `<tenant>:` ends where the
# first `:` is; what follows may contain anything, and a fixed-width part (a uuid, a hash) or a
# trailing ordinal after the last `-` parses back the same way.
TENANT_END = ":"


def tenant_scoped(tenant: str, rest: str) -> str:
    """`<tenant>:<rest>`: the tenant cannot be read two ways, so neither can the pair."""
    if TENANT_END in tenant:
        raise ValueError(f"a tenant name cannot contain {TENANT_END!r}: {tenant!r}")
    return f"{tenant}{TENANT_END}{rest}"


def trace_id(tenant: str, request_key: str | None, fresh: str) -> str:
    """The trace id of a live request, made here, never taken from the caller: with the caller's
    idempotency key (X-Request-ID), a hash of the tenant and the key, so a retried request finds
    its own run and the same key from another tenant names another run; without one, `fresh`."""
    if request_key:
        return short_hash("trace", tenant, request_key, length=32)
    return fresh


def ingest_workflow_id(request: IngestRequest) -> str:
    """`ingest-<tenant>:<source>-<hash>`: the same request maps to the same id, so a retried start
    attaches to the running ingest instead of starting a second one."""
    sources = sorted(os.path.abspath(Path(p).expanduser()) for p in request.paths)
    name = slug(Path(sources[0]).name, 24) if len(sources) == 1 else f"{len(sources)}-paths"
    # Other metadata is another ingest: it must not attach to a run giving the files other pairs.
    pairs = [f"{key}\x00{value}" for key, value in sorted(request.metadata.items())]
    digest = short_hash("ingest", request.tenant, *sources, *pairs, length=16)
    return f"ingest-{tenant_scoped(request.tenant, f'{name}-{digest}')}"


def upload_workflow_id(tenant: str, name: str, idempotency_key: str | None, fresh: str) -> str:
    """With an idempotency key, `ingest-<tenant>:upload:<hash of the key>`: a retried upload
    finds its run. Without one, every upload is a new run: `...:upload:<name>-<fresh>`. (A slug
    has no `:`, so no path ingest is ever named like an upload.)"""
    if idempotency_key:
        digest = short_hash("upload", tenant, idempotency_key, length=16)
        return f"ingest-{tenant_scoped(tenant, f'upload:{digest}')}"
    return f"ingest-{tenant_scoped(tenant, f'upload:{slug(name, 24)}-{fresh}')}"


def search_workflow_id(trace_id: str) -> str:
    return f"search-{trace_id}"


def answer_workflow_id(trace_id: str) -> str:
    """The trace id is the answer's workflow id, minus this prefix."""
    return f"answer-{trace_id}"


def shadow_workflow_id(live_trace_id: str) -> str:
    """The candidate run beside a sampled answer (R28)."""
    return f"shadow-{live_trace_id}"


def conversation_workflow_id(tenant: str, conversation_id: str) -> str:
    """`conversation-<tenant>:<id>`: tenant `acme` with conversation `corp-42` and tenant
    `acme-corp` with conversation `42` are two workflows."""
    return f"conversation-{tenant_scoped(tenant, conversation_id)}"


def conversation_of(workflow_id: str) -> tuple[str, str] | None:
    """(tenant, conversation id) of a `conversation_workflow_id`; None for any other id."""
    prefix = "conversation-"
    if not workflow_id.startswith(prefix) or TENANT_END not in workflow_id:
        return None
    tenant, _, conversation = workflow_id[len(prefix) :].partition(TENANT_END)
    return (tenant, conversation) if tenant and conversation else None


def legacy_conversation_workflow_id(tenant: str, conversation_id: str) -> str:
    """The id conversations had before ids were injective: runs started then keep naming their
    children after it (workflows/conversation.py)."""
    return f"conversation-{tenant}-{conversation_id}"


def turn_answer_workflow_id(conversation_workflow: str, ordinal: int) -> str:
    """The answer of a conversation's turn `ordinal` (the user's message): a child of the
    conversation's workflow, so a retried turn finds its answer."""
    return f"answer-{conversation_workflow}-{ordinal}"


def summary_trace_id(conversation_workflow: str, through_ordinal: int) -> str:
    """The engine request that folds a conversation's turns up to `through_ordinal`."""
    return f"{conversation_workflow}-{through_ordinal}"


def forget_workflow_id(workflow_id: str, run_id: str) -> str:
    """The deletion of the executions a run's text reached, started by that run (a conversation
    deleted again in a later lifetime is another run, so another forget). The whole run id, in
    a hash: run ids are UUIDv7, whose first characters are a timestamp, so two runs a minute
    apart shared a prefix (a second delete of a document then failed to start its forget)."""
    return f"forget-{workflow_id}-{short_hash('run', run_id, length=12)}"


def delete_workflow_id(ref: DocumentRef) -> str:
    return f"delete-{tenant_scoped(ref.tenant, str(ref.document_id))}"


def delete_tenant_workflow_id(tenant: str) -> str:
    """`delete-tenant-<tenant>`: no `:`, so never a document's delete (`delete-<tenant>:<id>`)
    and never taken for one of the tenant's own runs (tenant_of)."""
    tenant_scoped(tenant, "")  # refuses a tenant with the separator
    return f"delete-tenant-{tenant}"


# The kinds whose ids carry the tenant (`<kind>-<tenant>:`), with the prefixes the runs derived
# from them add: a conversation's turn answers, their shadows, and a deleted conversation's forget.
_TENANT_SCOPED = re.compile(
    r"^(?:forget-)?(?:shadow-)?(?:answer-)?(?:ingest|delete|conversation)-([A-Za-z0-9_.-]+):"
)


def tenant_of(workflow_id: str) -> str | None:
    """The tenant a workflow id names, for the kinds built with tenant_scoped (and the runs
    derived from them); None for the others (answers and searches keep it in their memo)."""
    match = _TENANT_SCOPED.match(workflow_id)
    return match.group(1) if match else None


def rebuild_workflow_id(collection: str) -> str:
    """One rebuild at a time per collection."""
    return f"rebuild-{collection}"


# A schedule's runs: Temporal appends the scheduled time (compact-2026-12-01T03:00:00Z).
SCHEDULED_COMPACTION = "compact"


def compaction_workflow_id(fresh: str) -> str:
    return f"{SCHEDULED_COMPACTION}-{fresh}"


def eval_workflow_id(set_name: str, fresh: str) -> str:
    return f"eval-{set_name}-{fresh}"


def eval_case_workflow_id(eval_workflow: str, case_id: str) -> str:
    """One case of an evaluation run: the answer child, and the trace id of a failed case."""
    return f"{eval_workflow}-{case_id}"
