"""Gateway API keys: created, listed and revoked by operators; checked on every request.

A key is `drk_` + 43 URL-safe characters (32 random bytes). Postgres stores its SHA-256 and a
short prefix; the key is shown once, when it is created.
"""

from __future__ import annotations

import contextlib
import hashlib
import secrets
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import or_, select
from sqlalchemy.orm import Session, sessionmaker

from ragkit.db import ApiKey

KEY_PREFIX = "drk_"


@dataclass(frozen=True)
class KeyInfo:
    id: uuid.UUID
    tenant: str
    name: str
    prefix: str
    created_at: datetime
    revoked: bool


def key_hash(key: str) -> str:
    """What Postgres keeps of a key: its SHA-256, in hex."""
    return hashlib.sha256(key.encode()).hexdigest()


def _info(row: ApiKey) -> KeyInfo:
    return KeyInfo(
        row.id, row.tenant, row.name, row.prefix, row.created_at, row.revoked_at is not None
    )


def create_key(sessions: sessionmaker[Session], tenant: str, name: str = "") -> tuple[KeyInfo, str]:
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    with sessions.begin() as session:
        row = ApiKey(
            id=uuid.uuid4(), tenant=tenant, name=name, prefix=key[:12], key_hash=key_hash(key)
        )
        session.add(row)
        session.flush()
        session.refresh(row)
        return _info(row), key


def list_keys(sessions: sessionmaker[Session], tenant: str | None = None) -> list[KeyInfo]:
    with sessions() as session:
        query = select(ApiKey).order_by(ApiKey.created_at)
        if tenant:
            query = query.where(ApiKey.tenant == tenant)
        return [_info(row) for row in session.scalars(query)]


def revoke_key(sessions: sessionmaker[Session], id_or_prefix: str) -> KeyInfo | None:
    """Revoke by id or by the prefix shown in listings; None when nothing (unique) matches."""
    with sessions.begin() as session:
        conditions = [ApiKey.prefix == id_or_prefix]
        with contextlib.suppress(ValueError):
            conditions.append(ApiKey.id == uuid.UUID(id_or_prefix))
        rows = session.scalars(select(ApiKey).where(or_(*conditions))).all()
        if len(rows) != 1:
            return None
        row = rows[0]
        if row.revoked_at is None:
            row.revoked_at = datetime.now(UTC)
        return _info(row)


def tenant_for(sessions: sessionmaker[Session], key: str) -> str | None:
    """The tenant of a valid, unrevoked key; None otherwise."""
    if not key.startswith(KEY_PREFIX) or len(key) > 128:
        return None
    hashed = key_hash(key)
    return tenants_of(sessions, [hashed]).get(hashed)


def tenants_of(sessions: sessionmaker[Session], hashes: list[str]) -> dict[str, str]:
    """hash -> tenant for those of the key hashes that belong to a valid, unrevoked key."""
    if not hashes:
        return {}
    query = select(ApiKey.key_hash, ApiKey.tenant).where(
        ApiKey.key_hash.in_(hashes), ApiKey.revoked_at.is_(None)
    )
    with sessions() as session:
        return {found: tenant for found, tenant in session.execute(query)}
