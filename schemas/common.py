"""Types shared by every flow."""

from __future__ import annotations

import uuid
from typing import Annotated

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StringConstraints, model_validator

TenantId = Annotated[
    str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
]


class Contract(BaseModel):
    """Base of every schema. What workflows and activities pass each other crosses builds: with
    versioned workers a run pinned to an older build calls the LLM and index workers' current
    build, and an older build reads what a newer one wrote during a deploy. So a contract only
    gains optional fields, and a field this build does not know yet is ignored, not an error
    (tests/workflows/test_activity_contracts.py). What callers send over HTTP is a `Body`."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class Body(Contract):
    """A request body a caller sends: an unknown field is an error (422) that names it, not
    silently dropped, so a typo never passes for a setting."""

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


MetadataKey = Annotated[
    str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
]
MetadataValue = Annotated[str, StringConstraints(min_length=1, max_length=256)]
Metadata = Annotated[dict[MetadataKey, MetadataValue], Field(max_length=32)]


class DocumentFilter(Body):
    """Which documents a search may read, besides its tenant (R20): a time range on when a
    document was first ingested (`created_*`) or when its current version was (`updated_*`),
    and metadata key/value pairs given at ingest, all of which must match. Bounds are
    inclusive; times must carry a timezone. A `Body`: a caller's misspelt key must not pass for
    no filter at all (so a field added here reaches a run only on the build that added it)."""

    created_after: AwareDatetime | None = None
    created_before: AwareDatetime | None = None
    updated_after: AwareDatetime | None = None
    updated_before: AwareDatetime | None = None
    metadata: Metadata = Field(default_factory=dict)

    @model_validator(mode="after")
    def _ordered(self) -> DocumentFilter:
        for kind in ("created", "updated"):
            after, before = getattr(self, f"{kind}_after"), getattr(self, f"{kind}_before")
            if after is not None and before is not None and after > before:
                raise ValueError(f"{kind}_after ({after}) is later than {kind}_before ({before})")
        return self

    @property
    def empty(self) -> bool:
        return self == DocumentFilter()
