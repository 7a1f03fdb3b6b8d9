"""Alembic is the only way the schema changes: the migrations must build exactly the models."""

from __future__ import annotations

import uuid

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from sqlalchemy import create_engine

from durable_rag.stack.postgres import EmbeddedPostgres, migrate
from ragkit.db import Base
from tests.conftest import ROOT


def fresh_database(pg: EmbeddedPostgres) -> str:
    name = f"m_{uuid.uuid4().hex[:10]}"
    pg.ensure_database(name)
    return pg.url(name)


def test_migrations_match_the_models(pg_server: EmbeddedPostgres) -> None:
    url = fresh_database(pg_server)
    migrate(url)
    engine = create_engine(url)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    engine.dispose()
    assert diff == [], f"models and migrations differ: {diff}"


def test_downgrade_to_base_and_up_again(pg_server: EmbeddedPostgres) -> None:
    url = fresh_database(pg_server)
    config = Config(str(ROOT / "alembic.ini"))
    config.attributes["url"] = url
    config.attributes["configure_logger"] = False
    command.upgrade(config, "head")
    command.downgrade(config, "base")
    command.upgrade(config, "head")


def test_keyword_search_column_is_generated(database) -> None:  # type: ignore[no-untyped-def]
    doc = uuid.uuid4()
    database.scalar(
        "INSERT INTO documents (id, tenant, source, title, content_type, byte_size, version, "
        "chunk_count, status) VALUES (%s, 't', 's', 'T', 'text', 1, 1, 1, 'active') RETURNING 1",
        doc,
    )
    database.scalar(
        "INSERT INTO chunks (id, document_id, tenant, version, ordinal, text, token_count, "
        "heading_path, char_start, char_end) VALUES (%s, %s, 't', 1, 0, "
        "'Lighthouses guide sailors along rocky coasts', 7, 'Coasts', 0, 10) RETURNING 1",
        uuid.uuid4(),
        doc,
    )
    hits = database.scalar(
        "SELECT count(*) FROM chunks WHERE tsv @@ websearch_to_tsquery('english', 'lighthouse sailor')"
    )
    assert hits == 1
