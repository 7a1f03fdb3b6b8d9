"""The vector index behind one small interface, with two adapters that pass the same contract tests.

- `EdgeIndex`: qdrant-edge in process (embedded profile). Only one opener per path in any process,
  so in the embedded profile every index activity runs in the index worker.
- `QdrantServerIndex`: a Qdrant server through qdrant-client (production).
"""

from ragkit.index.base import (
    IndexConfigError,
    IndexFilter,
    IndexHit,
    IndexPoint,
    IndexUnavailableError,
    VectorIndex,
)
from ragkit.index.factory import open_index

__all__ = [
    "IndexConfigError",
    "IndexFilter",
    "IndexHit",
    "IndexPoint",
    "IndexUnavailableError",
    "VectorIndex",
    "open_index",
]
