"""What `durable-rag up` makes so that payloads are sealed by default and the local UI still
decodes them: the keyring and the admin key, each once, each readable by the owner only."""

from __future__ import annotations

import stat
from pathlib import Path

from durable_rag.stack import EmbeddedStack
from ragkit.codec import Keyring, ui_token
from ragkit.settings import Settings


def test_up_makes_a_keyring_and_an_admin_key_once_and_the_ui_decodes_with_it(
    tmp_path: Path,
) -> None:
    settings = Settings(data_dir=tmp_path / "data", security_payload_keys=None)
    assert settings.security.payload_encryption, "sealed by default, in the embedded stack too"
    stack = EmbeddedStack(settings)
    said: list[str] = []
    stack.ensure_secrets(said.append)
    keyring, admin = settings.payload_keys_path, settings.admin_key_path
    assert [line.split()[:2] for line in said] == [["created", "payload"], ["created", "admin"]]
    for path in (keyring, admin):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert len(Keyring.read(keyring).keys) == 1
    key = admin.read_text().strip()
    assert len(key) >= 40
    # The gateway `up` starts opens the codec endpoint with it; the UI calls it by its token.
    assert stack._env()["DURABLE_RAG_SECURITY_ADMIN_KEY"] == key
    assert stack.ui_codec_endpoint() == (
        f"http://127.0.0.1:{settings.gateway.port}/codec/{ui_token(key)}"
    )
    before = (keyring.read_bytes(), admin.read_bytes())
    said.clear()
    stack.ensure_secrets(said.append)
    assert said == [] and (keyring.read_bytes(), admin.read_bytes()) == before


def test_a_given_admin_key_or_keyring_is_used_and_nothing_is_made(tmp_path: Path) -> None:
    settings = Settings(
        data_dir=tmp_path / "data",
        security_payload_keys="k1:" + "A" * 43 + "=",
        security_admin_key="operator-key",
    )
    stack = EmbeddedStack(settings)
    stack.ensure_secrets(lambda _: None)
    assert not settings.payload_keys_path.exists() and not settings.admin_key_path.exists()
    # The gateway reads the operator's key where the launcher did; none is written into its env.
    assert "DURABLE_RAG_SECURITY_ADMIN_KEY" not in stack._env()
    assert str(stack.ui_codec_endpoint()).endswith(ui_token("operator-key"))


def test_with_encryption_off_nothing_is_made_and_the_ui_has_no_codec(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", security_payload_encryption=False)
    stack = EmbeddedStack(settings)
    stack.ensure_secrets(lambda _: None)
    assert not settings.admin_key_path.exists() and stack.ui_codec_endpoint() is None
