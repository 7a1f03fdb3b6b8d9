"""Deterministic ids: the same input always gives the same id, so retries never duplicate."""

from __future__ import annotations

import hashlib
import re
import uuid

_NAMESPACE = uuid.UUID("6f1c1c8e-3b0a-4c55-9a59-1d3f2f6a0c21")


def document_id(tenant: str, source: str) -> uuid.UUID:
    return uuid.uuid5(_NAMESPACE, f"document\x00{tenant}\x00{source}")


def chunk_id(document: uuid.UUID, version: int, ordinal: int) -> uuid.UUID:
    """Also the vector point id: a retried upsert overwrites, never adds."""
    return uuid.uuid5(_NAMESPACE, f"chunk\x00{document}\x00{version}\x00{ordinal}")


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def short_hash(*parts: str, length: int = 12) -> str:
    digest = hashlib.sha256("\x00".join(parts).encode()).hexdigest()
    return digest[:length]


def slug(text: str, length: int = 40) -> str:
    """A readable fragment for workflow ids: lowercase letters, digits and dashes."""
    cleaned = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return cleaned[:length].strip("-") or "x"


def conversation_id(tenant: str, conversation: str) -> uuid.UUID:
    return uuid.uuid5(_NAMESPACE, f"conversation\x00{tenant}\x00{conversation}")
