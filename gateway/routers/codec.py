"""Temporal's codec server protocol, for operators: the Temporal UI and CLI decode sealed payloads
(ragkit/codec.py) here, so they show questions and answers that the Temporal server never sees.

- `POST /codec/decode` and `/codec/encode`: `{"payloads": [{"metadata": {...}, "data": "..."}]}`
  in Temporal's JSON (bytes as base64), the same shape back. `Authorization: Bearer <admin key>`
  (DURABLE_RAG_SECURITY_ADMIN_KEY), as the CLI's `--codec-auth` and a UI that passes its access
  token send it.
- `POST /codec/{token}/decode`: the same for a UI that sends no header (the dev server's
  `--ui-codec-endpoint`): the token (`ragkit.codec`'s `ui_token` of the admin key) is the path.
- Off (404) unless payload encryption and an admin key are both set. A wrong key is 401, and
  payloads that do not decode (another keyring, tampered) are 400. CORS lets the UI's origin in
  (DURABLE_RAG_SECURITY_CODEC_CORS_ORIGINS).
"""

import hmac
from typing import Annotated

from cryptography.exceptions import InvalidTag
from fastapi import APIRouter, Header, HTTPException, Path, Request
from fastapi.responses import JSONResponse
from google.protobuf import json_format
from temporalio.api.common.v1 import Payloads

from gateway.deps import AppSettings, bearer_token
from ragkit.codec import EncryptionCodec, KeyringError, ui_token
from ragkit.settings import Settings

router = APIRouter()


def _codec(request: Request, settings: Settings) -> EncryptionCodec:
    codec: EncryptionCodec | None = getattr(request.app.state, "codec", None)
    if codec is None or settings.security.admin_key is None:
        raise HTTPException(
            404,
            "the codec endpoint is off: set DURABLE_RAG_SECURITY_PAYLOAD_ENCRYPTION and "
            "DURABLE_RAG_SECURITY_ADMIN_KEY",
        )
    return codec


def _admitted(request: Request, settings: Settings, authorization: str | None) -> EncryptionCodec:
    """The codec, for a request with the admin key."""
    codec = _codec(request, settings)
    admin = settings.security.admin_key
    assert admin is not None  # _codec checked
    given = bearer_token(authorization)
    if not given or not hmac.compare_digest(given.encode(), admin.get_secret_value().encode()):
        raise HTTPException(401, "the codec endpoint needs the admin key")
    return codec


async def _transcode(request: Request, codec: EncryptionCodec, decode: bool) -> JSONResponse:
    try:
        payloads = json_format.Parse(await request.body(), Payloads())
    except json_format.ParseError as exc:
        raise HTTPException(400, f"not Temporal's payloads JSON: {exc}") from exc
    try:
        done = await (codec.decode if decode else codec.encode)(list(payloads.payloads))
    except (KeyringError, InvalidTag, ValueError) as exc:
        raise HTTPException(400, f"cannot decode: {exc or 'the payload does not open'}") from exc
    return JSONResponse(json_format.MessageToDict(Payloads(payloads=done)))


@router.post("/codec/decode")
async def decode(
    request: Request,
    settings: AppSettings,
    authorization: Annotated[str | None, Header()] = None,
) -> JSONResponse:
    return await _transcode(request, _admitted(request, settings, authorization), decode=True)


@router.post("/codec/encode")
async def encode(
    request: Request,
    settings: AppSettings,
    authorization: Annotated[str | None, Header()] = None,
) -> JSONResponse:
    return await _transcode(request, _admitted(request, settings, authorization), decode=False)


@router.post("/codec/{token}/decode")
async def decode_for_ui(
    request: Request,
    settings: AppSettings,
    token: Annotated[str, Path(pattern=r"^[0-9a-f]{64}$")],
) -> JSONResponse:
    codec = _codec(request, settings)
    admin = settings.security.admin_key
    assert admin is not None
    if not hmac.compare_digest(token, ui_token(admin.get_secret_value())):
        raise HTTPException(401, "the codec endpoint needs the admin key's UI token")
    return await _transcode(request, codec, decode=True)
