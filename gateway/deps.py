"""What endpoints depend on, as `Annotated[..., Depends(...)]` aliases: the shared state that
`create_app` puts on `app.state`, and the tenant an API key authenticates (gateway/warm.py keeps
the keys in use checked). Admission is not here: the door takes it first (gateway/door.py)."""

import asyncio
from typing import Annotated

from fastapi import Depends, Header, HTTPException, Request
from sqlalchemy.orm import Session, sessionmaker

from durable_rag.client import RagClient
from gateway.warm import ApiKeys, Refresher
from ragkit.settings import Settings
from ragkit.streaming import TokenListener


async def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def get_rag(request: Request) -> RagClient:
    # Set by create_app, or by the lifespan when create_app was not given one.
    rag: RagClient = request.app.state.rag
    return rag


async def get_sessions(request: Request) -> sessionmaker[Session]:
    sessions: sessionmaker[Session] = request.app.state.sessions
    return sessions


async def get_listener(request: Request) -> TokenListener:
    listener: TokenListener = request.app.state.token_listener
    return listener


AppSettings = Annotated[Settings, Depends(get_settings)]
Rag = Annotated[RagClient, Depends(get_rag)]
Sessions = Annotated[sessionmaker[Session], Depends(get_sessions)]
Listener = Annotated[TokenListener, Depends(get_listener)]


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, if that is what it is."""
    if authorization and authorization.lower().startswith("bearer "):
        return authorization[7:].strip()
    return None


async def authenticated_tenant(
    request: Request,
    settings: AppSettings,
    authorization: Annotated[str | None, Header()] = None,
    x_api_key: Annotated[str | None, Header()] = None,
) -> str:
    """The tenant of the request's API key; with auth off, the default tenant. A key checked
    within its TTL costs no query; otherwise the lookup runs in a thread, off the event loop."""
    refresher: Refresher | None = request.app.state.refresher
    if refresher is not None:
        refresher.requested()
    if not settings.gateway.auth:
        return settings.default_tenant
    key = x_api_key if x_api_key is not None else bearer_token(authorization)
    if not key:
        raise HTTPException(
            401,
            "missing API key: send 'Authorization: Bearer <key>' or 'X-API-Key'",
            headers={"WWW-Authenticate": "Bearer"},
        )
    api_keys: ApiKeys = request.app.state.api_keys
    found = api_keys.cached(key)
    if found is None:
        found = await asyncio.to_thread(api_keys.lookup, key)
    if found is None:
        raise HTTPException(401, "invalid or revoked API key")
    return found


Tenant = Annotated[str, Depends(authenticated_tenant)]
