"""Compaction's rewrite (DocumentActivities.rewrite_tables): a deleted row's text leaves
Postgres's files, heap and WAL, not only what a query can see."""

from __future__ import annotations

import secrets
import uuid

import psycopg
import pytest
from temporalio.testing import ActivityEnvironment

from activities.documents import TEXT_TABLES, DocumentActivities
from durable_rag.stack.postgres import EmbeddedPostgres
from schemas.maintenance import CompactionInput
from tests.conftest import Database
from tests.durable_rag.test_deletion_on_disk import files_holding

pytestmark = [pytest.mark.integration]


def plant(database: Database, word: str, size: int = 0) -> None:
    database.execute(
        "INSERT INTO transcripts (trace_id, tenant, model, messages, output) "
        "VALUES (%s, 't', 'm', '[]', %s)",
        f"answer-{uuid.uuid4().hex}",
        # Random, so TOAST cannot compress it below `size`.
        f"the reply names {word} " + secrets.token_hex(size // 2),
    )


def test_a_deleted_row_is_in_no_file_after_the_rewrite(
    database: Database, pg_server: EmbeddedPostgres
) -> None:
    word = f"zq{uuid.uuid4().hex}"
    plant(database, "a row that stays")  # on the same page, which VACUUM then cannot truncate
    plant(database, word)
    with psycopg.connect(database.url.replace("+psycopg", ""), autocommit=True) as conn:
        conn.execute("CHECKPOINT")
        conn.execute("DELETE FROM transcripts WHERE output LIKE %s", (f"%{word}%",))
        conn.execute("VACUUM transcripts")
        conn.execute("CHECKPOINT")
    # What a DELETE and VACUUM leave: the page keeps the row's bytes, the WAL its insert.
    left = files_holding(pg_server.pgdata, word)
    assert any(f.startswith("base/") for f in left), left
    assert any(f.startswith("pg_wal/") for f in left), left

    activities = DocumentActivities(
        database.sessions, None, chunk_tokens=256, chunk_overlap=0.1, max_document_bytes=1 << 20
    )
    done = ActivityEnvironment().run(activities.rewrite_tables, CompactionInput())
    assert set(done.rewritten) == {*TEXT_TABLES, "pg_statistic"}, done.skipped
    assert done.skipped == {} and done.wal_switched
    assert files_holding(pg_server.pgdata, word) == []


def test_a_table_over_the_bound_is_skipped_with_its_size_and_none_is_rewritten_at_zero(
    database: Database,
) -> None:
    plant(database, "big", size=4 << 20)
    activities = DocumentActivities(
        database.sessions, None, chunk_tokens=256, chunk_overlap=0.1, max_document_bytes=1 << 20
    )
    env = ActivityEnvironment()
    done = env.run(activities.rewrite_tables, CompactionInput(rewrite_max_mb=1))
    assert "transcripts" not in done.rewritten and "chunks" in done.rewritten
    assert done.skipped["transcripts"].endswith("MB, over rewrite_max_mb (1)")
    off = env.run(activities.rewrite_tables, CompactionInput(rewrite_max_mb=0))
    assert off.rewritten == [] and off.skipped == {} and not off.wal_switched
