"""The `keys` group: the gateway's API keys, one tenant each, stored hashed."""

from __future__ import annotations

from typing import Annotated

import typer

from cli.common import console, db_sessions, load_settings, require_tenant, usage_error

keys_app = typer.Typer(
    help="Gateway API keys (one tenant each, stored hashed) and the payload encryption keyring.",
    no_args_is_help=True,
)


@keys_app.command("create")
def keys_create(
    tenant: Annotated[str, typer.Option(help="The tenant this key acts as.")],
    name: Annotated[str, typer.Option(help="A label, to tell keys apart.")] = "",
) -> None:
    """Create a key; it is printed once and cannot be shown again."""
    from ragkit.store import keys  # lazy: SQLAlchemy, 0.2 s

    settings = load_settings()
    require_tenant(tenant)
    if len(name) > 128:
        usage_error("name: at most 128 characters")
    info, key = keys.create_key(db_sessions(settings), tenant, name)
    console.print(f"key {info.prefix}… (id {info.id}) for tenant {info.tenant}:")
    print(key)


@keys_app.command("list")
def keys_list(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's keys.")] = None,
) -> None:
    """List keys (prefix, tenant, name, created, revoked); never the keys themselves."""
    from ragkit.store import keys  # lazy: SQLAlchemy, 0.2 s

    for info in keys.list_keys(db_sessions(load_settings()), tenant):
        state = "revoked" if info.revoked else "active"
        console.print(
            f"{info.prefix}…  {info.id}  tenant={info.tenant}  {info.name!r}  "
            f"{info.created_at:%Y-%m-%d %H:%M}  {state}"
        )


@keys_app.command("revoke")
def keys_revoke(
    key_id: Annotated[str, typer.Argument(help="The key's id or its listed prefix.")],
) -> None:
    """Revoke a key: requests with it get 401 from then on."""
    from ragkit.store import keys  # lazy: SQLAlchemy, 0.2 s

    info = keys.revoke_key(db_sessions(load_settings()), key_id)
    if info is None:
        usage_error(f"no single key matches {key_id!r}; see `durable-rag keys list`")
    console.print(f"revoked {info.prefix}… of tenant {info.tenant}")


@keys_app.command("rotate-payload-key")
def keys_rotate_payload_key(
    key_id: Annotated[
        str | None, typer.Option("--id", help="The new key's id (default: k<N+1>).")
    ] = None,
) -> None:
    """Add a key to the payload keyring file: it seals new payloads once the processes restart,
    and every older key still opens what it sealed (durable-rag down && durable-rag up)."""
    from ragkit.codec import KeyringError, rotate  # lazy: cryptography

    settings = load_settings()
    if settings.security.payload_keys is not None:
        usage_error(
            "the keyring comes from DURABLE_RAG_SECURITY_PAYLOAD_KEYS: append an id:base64key "
            "entry there (the last one seals)"
        )
    path = settings.payload_keys_path
    try:
        name = rotate(path, key_id)
    except KeyringError as exc:
        usage_error(str(exc))
    console.print(f"added payload key {name} to {path}; restart the processes to seal with it")
