"""The payload codec (ragkit/codec.py): sealed payloads carry no plaintext, open with the key that
sealed them after a rotation, refuse tampering and unknown keys, and let old plaintext through."""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path

import pytest
from cryptography.exceptions import InvalidTag
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import pydantic_data_converter

from ragkit.codec import ENCODING, KEY_ID, EncryptionCodec, Keyring, KeyringError, rotate
from schemas.answer import AskRequest

SECRET = "What did Ada Lovelace write about the Analytical Engine?"


def keyring(*names: str) -> Keyring:
    return Keyring(tuple((n, os.urandom(32)) for n in names))


def plain() -> list[Payload]:
    return pydantic_data_converter.payload_converter.to_payloads([AskRequest(question=SECRET)])


async def test_a_sealed_payload_holds_no_plaintext_and_opens_to_the_same_payload() -> None:
    codec = EncryptionCodec(keyring("k1"))
    sealed = await codec.encode(plain())
    assert sealed[0].metadata["encoding"] == ENCODING and sealed[0].metadata[KEY_ID] == b"k1"
    assert SECRET.encode() not in sealed[0].SerializeToString()
    assert b"Lovelace" not in sealed[0].SerializeToString()
    assert await codec.decode(sealed) == plain()
    again = await codec.encode(plain())
    assert again[0].data != sealed[0].data, "a fresh nonce per payload"


async def test_after_a_rotation_new_payloads_use_the_newest_key_and_old_ones_still_open() -> None:
    old = keyring("k1")
    sealed_before = await EncryptionCodec(old).encode(plain())
    rotated = EncryptionCodec(Keyring((*old.keys, ("k2", os.urandom(32)))))
    assert (await rotated.encode(plain()))[0].metadata[KEY_ID] == b"k2"
    assert await rotated.decode(sealed_before) == plain()


async def test_a_payload_of_an_unknown_key_or_tampered_with_is_refused() -> None:
    sealed = await EncryptionCodec(keyring("k1")).encode(plain())
    with pytest.raises(KeyringError, match=r"'k1'.*does not hold"):
        await EncryptionCodec(keyring("k9")).decode(sealed)
    tampered = Payload()
    tampered.CopyFrom(sealed[0])
    tampered.data = tampered.data[:-1] + bytes([tampered.data[-1] ^ 1])
    codec = EncryptionCodec(keyring("k1"))
    with pytest.raises(InvalidTag):
        await codec.decode([tampered])
    relabelled = Payload()
    relabelled.CopyFrom(sealed[0])
    relabelled.metadata[KEY_ID] = b"k2"  # the key id is authenticated too
    both = Keyring((*codec.keyring.keys, ("k2", os.urandom(32))))
    with pytest.raises(InvalidTag):
        await EncryptionCodec(both).decode([relabelled])


async def test_plaintext_recorded_before_encryption_decodes_as_it_is() -> None:
    assert await EncryptionCodec(keyring("k1")).decode(plain()) == plain()


def test_keyrings_parse_and_say_what_is_wrong(tmp_path: Path) -> None:
    key = base64.b64encode(os.urandom(32)).decode()
    parsed = Keyring.parse(f"# old\nk1:{key}\nk2:{key},")
    assert [n for n, _ in parsed.keys] == ["k1", "k2"] and parsed.current == "k2"
    bad = {
        "": "no key",
        "k1": "id:base64key",
        "k1:not base64!": "not base64",
        f"k1:{base64.b64encode(b'short').decode()}": "needs 32",
        f"k1:{key},k1:{key}": "twice",
        f"bad id!:{key}": "key id",
    }
    for text, message in bad.items():
        with pytest.raises(KeyringError, match=message):
            Keyring.parse(text)
    with pytest.raises(KeyringError, match="cannot read"):
        Keyring.read(tmp_path / "missing")


def test_rotate_appends_a_key_to_a_private_file(tmp_path: Path) -> None:
    path = tmp_path / "secrets" / "payload-keys"
    assert rotate(path) == "k1" and rotate(path) == "k2"
    assert [n for n, _ in Keyring.read(path).keys] == ["k1", "k2"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with pytest.raises(KeyringError, match="already"):
        rotate(path, "k1")
    assert json.dumps([n for n, _ in Keyring.read(path).keys]) == '["k1", "k2"]'
