"""Payload encryption: every Temporal payload sealed with AES-256-GCM before it leaves the process.

The Temporal server, its database and anyone who fetches a history see only ciphertext: questions,
passages, answers and conversation turns are in payloads, and payloads are what this seals. Workers
and clients (ragkit.temporal.connect) decode them; operators read them in the UI through the
gateway's codec endpoint (gateway/routers/codec.py), which needs the admin key.

- A sealed payload: metadata `encoding: binary/encrypted` and `encryption-key-id: <id>`; data the
  12-byte nonce then the ciphertext of the original payload (its metadata and data, serialized),
  with the key id as associated data, so a payload cannot be passed off under another key id.
- Keys: a keyring of named 32-byte keys. The newest seals; every key opens what it sealed, so
  rotating (`durable-rag security rotate-key`, or one more key in DURABLE_RAG_SECURITY_PAYLOAD_KEYS)
  never makes an old run unreadable. Drop a key only once no history sealed with it is kept.
- A payload that is not sealed (recorded before encryption was switched on) decodes as it is.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

from ragkit.settings import Settings

ENCODING = b"binary/encrypted"
KEY_ID = "encryption-key-id"
NONCE_BYTES = 12
KEY_BYTES = 32
_KEY_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class KeyringError(ValueError):
    """A keyring that cannot be used: says which entry and why."""


@dataclass(frozen=True)
class Keyring:
    """Named AES-256 keys, oldest first; the last one seals new payloads."""

    keys: tuple[tuple[str, bytes], ...]

    def __post_init__(self) -> None:
        if not self.keys:
            raise KeyringError("the keyring holds no key")
        names = [name for name, _ in self.keys]
        if len(set(names)) != len(names):
            raise KeyringError(f"a key id appears twice: {names}")
        for name, key in self.keys:
            if not _KEY_NAME.match(name):
                raise KeyringError(f"key id {name!r}: letters, digits, '_', '.', '-' (1-64)")
            if len(key) != KEY_BYTES:
                raise KeyringError(f"key {name!r} is {len(key)} bytes; AES-256 needs {KEY_BYTES}")

    @property
    def current(self) -> str:
        return self.keys[-1][0]

    def key(self, name: str) -> bytes | None:
        return dict(self.keys).get(name)

    @classmethod
    def parse(cls, text: str) -> Keyring:
        """`id:base64key` entries, one per line or comma-separated, oldest first (`#` comments)."""
        entries: list[tuple[str, bytes]] = []
        for raw in re.split(r"[,\n]", text):
            entry = raw.split("#", 1)[0].strip()
            if not entry:
                continue
            name, sep, encoded = entry.partition(":")
            if not sep:
                raise KeyringError(f"entry {name[:16]!r}...: expected id:base64key")
            try:
                key = base64.b64decode(encoded.strip(), validate=True)
            except ValueError as exc:
                raise KeyringError(f"key {name.strip()!r} is not base64") from exc
            entries.append((name.strip(), key))
        return cls(tuple(entries))

    @classmethod
    def read(cls, path: Path) -> Keyring:
        try:
            return cls.parse(path.read_text())
        except OSError as exc:
            raise KeyringError(f"cannot read the keyring {path}: {exc.strerror}") from exc


def payloads_in(message: Message) -> list[Payload]:
    """Every Payload anywhere in a protobuf message (a history event: inputs, results, markers,
    memo, summaries), for checks and benchmarks of what the codec covers."""
    found: list[Payload] = []
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        if field.message_type.GetOptions().map_entry:
            items = list(value.values())
        elif field.is_repeated:
            items = list(value)
        else:
            items = [value]
        for item in items:
            if isinstance(item, Payload):
                found.append(item)
            elif isinstance(item, Message):
                found += payloads_in(item)
    return found


def open_in_place(messages: Iterable[Message], codec: PayloadCodec | None) -> None:
    """Open every sealed payload in these messages (a history's events), where they are: for a
    replayer or a recording that has no keyring. Other codecs' payloads are left as they are."""
    if not isinstance(codec, EncryptionCodec):
        return
    for message in messages:
        for payload in payloads_in(message):
            payload.CopyFrom(codec.open(payload))


def keyring_for(settings: Settings) -> Keyring:
    """The settings' keyring: DURABLE_RAG_SECURITY_PAYLOAD_KEYS, else the keyring file."""
    if settings.security.payload_keys is not None:
        return Keyring.parse(settings.security.payload_keys.get_secret_value())
    path = settings.payload_keys_path
    if not path.exists():
        raise KeyringError(
            f"payload encryption is on but there is no keyring at {path}: set "
            "DURABLE_RAG_SECURITY_PAYLOAD_KEYS, or create one with `durable-rag keys "
            "rotate-payload-key`"
        )
    return Keyring.read(path)


def codec_for(settings: Settings) -> EncryptionCodec | None:
    """The codec every client and worker of these settings uses; None with encryption off."""
    if not settings.security.payload_encryption:
        return None
    return EncryptionCodec(keyring_for(settings))


def ui_token(admin_key: str) -> str:
    """The codec endpoint's path token for a UI that sends no Authorization header: derived from
    the admin key, so the key itself never sits in the UI's settings or a process list."""
    return hmac.new(admin_key.encode(), b"temporal-ui-codec", hashlib.sha256).hexdigest()


def new_key_entry(name: str) -> str:
    """One keyring line with a fresh random key."""
    return f"{name}:{base64.b64encode(AESGCM.generate_key(bit_length=256)).decode()}"


def rotate(path: Path, name: str | None = None) -> str:
    """Append a fresh key to the keyring file (created, mode 0600, if missing); it seals from the
    next process start on, and every older key still opens what it sealed. Returns its id."""
    existing = Keyring.read(path).keys if path.exists() else ()
    name = name or f"k{len(existing) + 1}"
    if any(name == n for n, _ in existing):
        raise KeyringError(f"key id {name!r} is already in {path}")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "a") as out:
        out.write(new_key_entry(name) + "\n")
    Keyring.read(path)  # what was written parses
    return name


class EncryptionCodec(PayloadCodec):
    """AES-256-GCM over whole payloads, keyed by the keyring (see the module's docstring)."""

    def __init__(self, keyring: Keyring) -> None:
        self.keyring = keyring
        self._ciphers = {name: AESGCM(key) for name, key in keyring.keys}

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.seal(p) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.open(p) for p in payloads]

    def seal(self, payload: Payload) -> Payload:
        name = self.keyring.current
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._ciphers[name].encrypt(nonce, payload.SerializeToString(), name.encode())
        return Payload(metadata={"encoding": ENCODING, KEY_ID: name.encode()}, data=nonce + sealed)

    def open(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != ENCODING:
            return payload  # recorded before encryption was on
        name = payload.metadata.get(KEY_ID, b"").decode()
        cipher = self._ciphers.get(name)
        if cipher is None:
            raise KeyringError(
                f"payload sealed with key {name!r}, which this keyring does not hold "
                f"(it holds {', '.join(n for n, _ in self.keyring.keys)})"
            )
        nonce, sealed = payload.data[:NONCE_BYTES], payload.data[NONCE_BYTES:]
        return Payload.FromString(cipher.decrypt(nonce, sealed, name.encode()))
