"""Documents sent through the gateway: kept in Postgres by name, ingested as the source
`Source.upload(name)` (ragkit/sources.py).

The ingest reads an upload as it reads a file, so versioning, idempotency and failures work the
same way; workers need no shared disk with the gateway.
"""

from __future__ import annotations

import hashlib
import uuid

from sqlalchemy import delete as sa_delete
from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session, sessionmaker

from ragkit.db import Upload


def store(sessions: sessionmaker[Session], tenant: str, name: str, data: bytes) -> str:
    """Keep the bytes as the latest content of (tenant, name); returns their SHA-256."""
    digest = hashlib.sha256(data).hexdigest()
    statement = insert(Upload).values(
        id=uuid.uuid4(), tenant=tenant, name=name, content=data, sha256=digest
    )
    with sessions.begin() as session:
        session.execute(
            statement.on_conflict_do_update(
                constraint="uq_uploads_tenant_name",
                set_={"content": statement.excluded.content, "sha256": digest},
            )
        )
    return digest


def read(session: Session, tenant: str, name: str) -> bytes | None:
    return session.scalar(
        select(Upload.content).where(Upload.tenant == tenant, Upload.name == name)
    )


def delete(session: Session, tenant: str, name: str) -> None:
    session.execute(sa_delete(Upload).where(Upload.tenant == tenant, Upload.name == name))
