"""Deleted means gone from the disk (README, Security -> Deletion), tried as a new user would:
the embedded stack `durable-rag up` starts, a document with a unique word ingested and asked
about, the document deleted, one compaction run (the stated bound), then every file under the
data folder searched for the word: Temporal's SQLite and its WAL, Postgres's heap and WAL, the
index's segments and WAL, the logs."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest

from durable_rag.stack.process import free_port
from ragkit.settings import Settings
from ragkit.temporal import connect
from tests.conftest import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.slow]


def files_holding(folder: Path, word: str) -> list[str]:
    """Every file under `folder` (links not followed) whose bytes hold `word`."""
    needle = word.encode()
    found = []
    for path in folder.rglob("*"):
        if path.is_symlink() or not path.is_file():
            continue
        try:
            if needle in path.read_bytes():
                found.append(str(path.relative_to(folder)))
        except OSError:  # a file a part removed while we walked
            continue
    return sorted(found)


def test_a_deleted_documents_text_is_in_no_file_after_one_compaction(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DURABLE_RAG_")}
    env.update(
        {
            "DURABLE_RAG_DATA_DIR": str(data),
            "DURABLE_RAG_TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}",
            "DURABLE_RAG_TEMPORAL_UI_PORT": str(free_port()),
            "DURABLE_RAG_TEMPORAL_METRICS_PORT": str(free_port()),
            "DURABLE_RAG_POSTGRES_PORT": str(free_port()),
            "DURABLE_RAG_GATEWAY_PORT": str(free_port()),
            "COLUMNS": "500",  # one line per line: ids and paths are not wrapped
        }
    )

    def run(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "cli", *args],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, f"durable-rag {args[0]}: {done.stdout}{done.stderr}"
        return " ".join(done.stdout.split())  # the console wraps long lines

    word = f"zq{uuid.uuid4().hex[:20]}"
    drive = tmp_path / "drive"
    drive.mkdir()
    (drive / "vault.md").write_text(
        f"# The vault\n\nThe vault's password is {word}. It opens the north door of the archive.\n"
    )
    (drive / "garden.md").write_text(
        "# The garden\n\nThe garden behind the archive grows roses, tulips and a fig tree.\n"
    )
    try:
        # No key given: `up` makes the keyring (payloads are sealed by default) and the admin key.
        up = run("up", "--no-llm")
        assert "created payload keyring" in up and "created admin key" in up, up
        assert "0 failed" in run("ingest", str(drive))
        asked = run("ask", "What is the vault's password?", "-k", "1")
        assert "vault.md" in asked, asked
        found = run("search", "the vault's password", "-k", "1")
        document = re.search(r"vault\.md:\d+-\d+ document ([0-9a-f-]{36})", found)
        assert document, found
        # What the issue saw: plaintext in the index and in Postgres, and now not in Temporal.
        held = files_holding(data, word)
        assert any(f.startswith("index/") for f in held), held
        assert any(f.startswith("postgres/") for f in held), held
        assert not [f for f in held if f.startswith("temporal.db")], held

        deleted = run("delete", document.group(1))
        assert "vault.md" in deleted and "deleted" in deleted, deleted
        forget = re.search(r"deleted by (\S+)", deleted)
        if forget:  # the runs that read it: wait until their histories are deleted
            asyncio.run(finished(data, env, forget.group(1)))
        compacted = run("compact")
        assert "rewritten" in compacted, compacted

        assert files_holding(data, word) == []
        # The logical views agree: no row, no point holds it.
        with psycopg.connect(
            f"postgresql://postgres@127.0.0.1:{env['DURABLE_RAG_POSTGRES_PORT']}/durable_rag"
        ) as conn:
            rows = conn.execute(
                "SELECT count(*) FROM chunks WHERE text LIKE %s", (f"%{word}%",)
            ).fetchone()
        assert rows == (0,)
        assert "vault.md" not in run("search", "the vault's password", "-k", "3")
    finally:
        subprocess.run(
            [sys.executable, "-m", "cli", "down"],
            env=env,
            cwd=ROOT,
            capture_output=True,
            timeout=120,
        )


async def finished(data: Path, env: dict[str, str], workflow_id: str) -> None:
    settings = Settings(
        data_dir=data,
        temporal_address=env["DURABLE_RAG_TEMPORAL_ADDRESS"],
        security_payload_keys=None,  # the keyring `up` made under the data folder
    )
    client = await connect(settings)
    await asyncio.wait_for(client.get_workflow_handle(workflow_id).result(), 120)
