"""A deleted chunk's text leaves the embedded index's files at the next build (issue 42,
section 3): no WAL keeps it, and a build rewrites every segment that held a deleted point."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ragkit.index.edge import EdgeIndex
from tests.ragkit.index.test_contract import DIM, point

WORD = b"zebracornium"


def files_holding(folder: Path, word: bytes) -> list[str]:
    return sorted(
        str(p.relative_to(folder))
        for p in folder.rglob("*")
        if p.is_file() and word in p.read_bytes()
    )


def test_a_deleted_points_text_is_in_no_file_after_the_next_build(tmp_path: Path) -> None:
    index = EdgeIndex(tmp_path / "edge", DIM, 16, 100, 64, segments=2)
    try:
        planted = dataclasses.replace(
            point(7), payload={**point(7).payload, "text": "the zebracornium protocol"}
        )
        index.upsert([point(i) for i in range(600) if i != 7] + [planted])
        held = files_holding(tmp_path / "edge", WORD)
        assert held and all("payload_storage" in f for f in held), held  # no WAL holds it
        index.optimize()  # built: its segments are indexed, nothing left to do but vacuum
        index.delete([planted.id])
        assert files_holding(tmp_path / "edge", WORD), "deleted, not yet rewritten"
        index.optimize()  # the nightly compaction's, or one due after `optimize_after` points
        assert files_holding(tmp_path / "edge", WORD) == []
        assert index.count() == 599
    finally:
        index.close()
