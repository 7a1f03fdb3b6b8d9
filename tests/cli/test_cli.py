"""The command line: bad input exits 2 with a message and starts nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app

runner = CliRunner()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ingest", "/definitely/not/here"], "no such file or directory"),
        (["search", ""], "query"),
        (["search", "x" * 5000], "query"),
        (["search", "hello", "--top-k", "0"], "top_k"),
        (["search", "hello", "--tenant", "bad tenant"], "tenant"),
        (["search", "hello", "--mode", "fuzzy"], "mode"),
        (["chat", "--conversation", "has spaces", "-m", "hi"], "conversation_id"),
        (["chat", "-m", ""], "message"),
        (["history", "bad id!"], "conversation_id"),
        (["keys", "create", "--tenant", "bad tenant"], "tenant"),
        (["worker", "gpu-thing"], "unknown worker kind"),
        (["delete", "not-a-uuid"], "not a document id"),
        (["tenants", "delete", "bad tenant", "--yes"], "tenant"),
        (["tenants", "delete", "acme"], "add --yes"),
        (["compact", "--batch-size", "1"], "batch-size"),
        (["rebuild", "--grace", "-5"], "grace"),
        (["models", "swap", "Not A Model"], "not a served model name"),
        (["models", "swap", "m", "--ready-timeout", "0"], "ready-timeout"),
        (["feedback", "answer-x", "sideways"], "rating must be 'up' or 'down'"),
        (["eval", "no-such-set"], "no evaluation set 'no-such-set'"),
        (["eval", "answers-smoke", "--corpus", "/definitely/not/here"], "no corpus folder"),
    ],
)
def test_bad_input_exits_2_with_a_message(args: list[str], message: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_invalid_settings_exit_2(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DURABLE_RAG_CHUNK_TOKENS", "5")
    result = runner.invoke(app, ["search", "hello"])
    assert result.exit_code == 2
    assert "chunk_tokens" in result.output


def test_unreachable_temporal_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from durable_rag.stack.process import free_port

    monkeypatch.setenv("DURABLE_RAG_TEMPORAL_ADDRESS", f"127.0.0.1:{free_port()}")
    result = runner.invoke(app, ["search", "hello"])
    assert result.exit_code == 1
    assert "durable-rag up" in result.output


def test_document_text_is_printed_as_text_never_as_markup(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Passages and answers quote documents: `arr[i]` or `[/x]` in them is text (Rich markup
    would drop the first and crash on the second, after the answer was paid for)."""
    from cli import answers
    from schemas.answer import Answer

    answer = Answer.model_construct(
        answer="use arr[i] and [/x] and [bold]", citations=[], degradations=["[/y] skipped"]
    )
    answers._print_answer_body(answer)
    out = capsys.readouterr().out
    assert "arr[i]" in out and "[/x]" in out and "[bold]" in out and "[/y] skipped" in out


def test_rotating_the_payload_key_appends_to_the_keyring_and_refuses_what_it_cannot_do(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from ragkit.codec import Keyring

    path = tmp_path / "secrets" / "payload-keys"
    monkeypatch.delenv("DURABLE_RAG_SECURITY_PAYLOAD_KEYS")  # the tests' keyring (conftest.py)
    monkeypatch.setenv("DURABLE_RAG_SECURITY_PAYLOAD_KEYS_FILE", str(path))
    for expected in ("k1", "k2"):
        result = runner.invoke(app, ["keys", "rotate-payload-key"])
        assert result.exit_code == 0 and f"added payload key {expected}" in result.output
    assert Keyring.read(path).current == "k2"
    again = runner.invoke(app, ["keys", "rotate-payload-key", "--id", "k1"])
    assert again.exit_code == 2 and "already" in again.output
    monkeypatch.setenv("DURABLE_RAG_SECURITY_PAYLOAD_KEYS", "k9:" + "A" * 44)
    from_env = runner.invoke(app, ["keys", "rotate-payload-key"])
    assert from_env.exit_code == 2 and "DURABLE_RAG_SECURITY_PAYLOAD_KEYS" in from_env.output


def test_commands_trace_into_the_viewer_of_a_stack_up_with_tracing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`up --tracing` leaves run/tracing.json until `down`: commands trace into its viewer, unless
    tracing is set otherwise."""
    import json

    from cli.common import with_stack_tracing
    from ragkit.settings import Settings

    monkeypatch.delenv("DURABLE_RAG_TRACING_ENABLED", raising=False)
    settings = Settings(data_dir=tmp_path)
    assert with_stack_tracing(settings) is settings  # no stack up with tracing: untouched
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "tracing.json").write_text(
        json.dumps(
            {"endpoint": "http://127.0.0.1:7006/v1/traces", "viewer_url": "http://127.0.0.1:7006"}
        )
    )
    traced = with_stack_tracing(settings).tracing
    assert traced.enabled and traced.endpoint == "http://127.0.0.1:7006/v1/traces"
    assert traced.viewer_url == "http://127.0.0.1:7006"
    monkeypatch.setenv("DURABLE_RAG_TRACING_ENABLED", "false")  # the operator's word wins
    assert not with_stack_tracing(Settings(data_dir=tmp_path)).tracing.enabled
