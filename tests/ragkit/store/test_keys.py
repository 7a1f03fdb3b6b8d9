"""Gateway API keys on real Postgres: stored hashed, one tenant each, revocable."""

from __future__ import annotations

import pytest

from ragkit.store import keys
from tests.conftest import Database

pytestmark = pytest.mark.integration


def test_a_key_maps_to_its_tenant_until_revoked(database: Database) -> None:
    info, key = keys.create_key(database.sessions, "acme", "backend")
    assert key.startswith(keys.KEY_PREFIX) and len(key) > 40
    assert keys.tenant_for(database.sessions, key) == "acme"
    assert keys.tenant_for(database.sessions, key + "x") is None
    assert keys.tenant_for(database.sessions, "not-a-key") is None

    stored = database.rows("SELECT key_hash, prefix FROM api_keys")
    assert stored and key not in str(stored), "the key itself must never be stored"

    listed = keys.list_keys(database.sessions, "acme")
    assert [(k.id, k.revoked) for k in listed] == [(info.id, False)]
    assert keys.list_keys(database.sessions, "other") == []

    assert keys.revoke_key(database.sessions, info.prefix) is not None
    assert keys.tenant_for(database.sessions, key) is None
    assert keys.list_keys(database.sessions)[0].revoked
    assert keys.revoke_key(database.sessions, "drk_nothing") is None
