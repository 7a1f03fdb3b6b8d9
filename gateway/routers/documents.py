"""Documents: ingest one (as text, or an uploaded file) and delete one. Ingestion is accepted
(202) and runs as a workflow; a delete returns once no retrieval path sees the document."""

import asyncio
import json
import uuid
from typing import Annotated

from fastapi import APIRouter, File, Form, Header, HTTPException, UploadFile
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError

from durable_rag.client import IdempotencyConflict, RagClient, failure_cause
from gateway.deps import AppSettings, Rag, Tenant
from gateway.errors import http_error
from ragkit import parsing, policies
from schemas.documents import DocumentDeleted
from schemas.gateway import DocumentAccepted, DocumentBody

router = APIRouter()
# What POST /v1/documents takes as JSON text; the other formats come as uploads.
TEXT_TYPES = {"markdown", "text", "html", "csv", "tsv"}


def readable_type(name: str) -> str:
    """The content type a document of this name is read as; 415 with the reason (and what to
    convert it to) for a format we do not read, before anything is stored or started."""
    try:
        return parsing.content_type_for(name)
    except parsing.DocumentError as exc:
        raise HTTPException(415, f"{exc.kind}: {exc.message}") from exc


IdempotencyKey = Annotated[
    str | None,
    Header(
        pattern=r"^[A-Za-z0-9_.:-]{1,128}$",
        description="A retried POST with the same key starts nothing new.",
    ),
]


@router.post("/v1/documents", response_model=DocumentAccepted, status_code=202)
async def post_document(
    body: DocumentBody, tenant: Tenant, rag: Rag, idempotency_key: IdempotencyKey = None
) -> DocumentAccepted:
    """Ingest a document sent as text. The name is its identity: the same name again
    replaces it. With an `Idempotency-Key`, a retried POST starts nothing new."""
    if readable_type(body.name) not in TEXT_TYPES:
        raise HTTPException(
            415,
            f"{body.name!r} is a binary format: send the file to POST /v1/documents/upload",
        )
    return await accept_document(
        rag, tenant, body.name, body.text.encode(), idempotency_key, body.metadata
    )


@router.post("/v1/documents/upload", response_model=DocumentAccepted, status_code=202)
async def upload_document(
    file: Annotated[
        UploadFile,
        File(
            description="A Markdown, text, HTML, PDF, Word (.docx), PowerPoint (.pptx), Excel "
            "(.xlsx), CSV or TSV file."
        ),
    ],
    tenant: Tenant,
    rag: Rag,
    idempotency_key: IdempotencyKey = None,
    name: Annotated[str | None, Form(max_length=200)] = None,
    metadata: Annotated[
        str | None, Form(max_length=20_000, description='A JSON object: {"key": "value", ...}.')
    ] = None,
) -> DocumentAccepted:
    """Ingest an uploaded file (multipart/form-data, field `file`; `name` overrides the
    file's name; `metadata`, a JSON object of strings, gives it key/value pairs)."""
    data = await file.read()
    try:
        checked = DocumentBody.model_validate(
            {
                "name": name or file.filename or "",
                "text": "-",
                "metadata": json.loads(metadata) if metadata else {},
            }
        )
    except ValueError as exc:  # json.JSONDecodeError is one too
        raise HTTPException(422, str(exc)) from exc
    if not data:
        raise HTTPException(422, "the uploaded file is empty")
    readable_type(checked.name)
    return await accept_document(rag, tenant, checked.name, data, idempotency_key, checked.metadata)


async def accept_document(
    rag: RagClient,
    tenant: str,
    name: str,
    data: bytes,
    idempotency_key: str | None,
    metadata: dict[str, str],
) -> DocumentAccepted:
    try:
        return await rag.ingest_document(tenant, name, data, idempotency_key, metadata)
    except IdempotencyConflict as exc:
        raise HTTPException(409, str(exc)) from exc
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from exc


@router.delete("/v1/documents/{document_id}", response_model=DocumentDeleted)
async def delete_document(
    document_id: uuid.UUID, tenant: Tenant, rag: Rag, settings: AppSettings
) -> DocumentDeleted:
    """Delete a document: from the moment this returns, no retrieval path sees it."""
    timeout = settings.access_timeout_seconds
    try:
        return await asyncio.wait_for(rag.delete_document(document_id, tenant), timeout=timeout)
    except TimeoutError as exc:
        raise HTTPException(504, f"the delete did not finish within {timeout:g} s") from exc
    except WorkflowFailureError as exc:
        cause = failure_cause(exc)
        if isinstance(cause, ApplicationError) and cause.type == policies.NOT_FOUND:
            raise HTTPException(404, f"no document {document_id}") from exc
        raise http_error(exc) from exc
