"""Where a document's bytes come from: a file, or an upload sent through the gateway.

A document's source is stored as one string (`documents.source`, `Passage.source`, citations):
the file's absolute path, or `upload:<name>` for bytes kept in Postgres (ragkit/store/uploads.py).
`Source` is the only code that knows that spelling.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath

UPLOAD_PREFIX = "upload:"


@dataclass(frozen=True)
class Source:
    location: str  # the file's path, or the upload's name
    is_upload: bool = False

    @classmethod
    def parse(cls, stored: str) -> Source:
        """A source from its stored string."""
        if stored.startswith(UPLOAD_PREFIX):
            return cls(stored.removeprefix(UPLOAD_PREFIX), is_upload=True)
        return cls(stored)

    @classmethod
    def upload(cls, name: str) -> Source:
        return cls(name, is_upload=True)

    def __str__(self) -> str:
        """The stored string."""
        return f"{UPLOAD_PREFIX}{self.location}" if self.is_upload else self.location

    @property
    def file_name(self) -> str:
        """The last part of the path or name (`guide.md`): how evaluation sets name documents."""
        return self.location.replace("\\", "/").rsplit("/", 1)[-1]

    @property
    def stem(self) -> str:
        """The file name without its suffix: the title of a document that states none."""
        return PurePath(self.location).stem
