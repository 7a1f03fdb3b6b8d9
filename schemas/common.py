"""Types shared by every flow."""

from __future__ import annotations

import uuid
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

TenantId = Annotated[
    str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
]


class Contract(BaseModel):
    """Base of every schema: unknown fields are an error, not silently dropped."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class DocumentVersion(Contract):
    document_id: uuid.UUID
    version: int = Field(ge=0)
    source: str = ""


class DocumentFailure(Contract):
    """Why one document was not ingested. `kind` is stable: see ragkit.parsing."""

    source: str
    kind: str
    message: str
