"""The caller's provider credentials on the way in, and what the daemon holds.

:class:`CallerCredentials` (ASGI middleware) reads the ``x-hutch-credentials`` header of
each request or WebSocket handshake, makes it the request's ``hutch.credentials.CALLER``
and offers it to the keyring (which checks it against the accounts that wait for one). A
malformed header is refused with ``invalid`` (its content is never quoted).
``GET /v1/credentials`` says, per account, which credential the daemon has in memory.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter

from hutch.credentials import CALLER, HEADER, decode
from hutch.errors import InvalidError
from hutch.service import Service
from hutch.service.keyring import Keyring, credential_checks

Scope = dict[str, Any]
_HEADER = HEADER.encode()


class CallerCredentials:
    def __init__(self, app: Any, keyring: Keyring) -> None:
        self.app = app
        self.keyring = keyring

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        raw = None
        if scope["type"] in ("http", "websocket"):
            raw = next((bytes(v) for k, v in scope.get("headers", ()) if k == _HEADER), None)
        if raw is None:
            await self.app(scope, receive, send)
            return
        try:
            creds = decode(raw.decode("latin-1"))
        except InvalidError as exc:
            await _refuse(scope, receive, send, exc)
            return
        token = CALLER.set(creds)
        try:
            self.keyring.offer(creds)
            await self.app(scope, receive, send)
        finally:
            CALLER.reset(token)


async def _refuse(scope: Scope, receive: Any, send: Any, exc: InvalidError) -> None:
    body = json.dumps(exc.to_dict()).encode()
    headers = [(b"content-type", b"application/json")]
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 400, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        return
    await receive()  # websocket.connect
    if "websocket.http.response" in scope.get("extensions", {}):
        await send({"type": "websocket.http.response.start", "status": 400, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
    else:
        await send({"type": "websocket.close", "code": 1008})


def router(service: Service) -> APIRouter:
    r = APIRouter()

    @r.get("/v1/credentials")
    async def credentials() -> dict[str, Any]:
        """Which provider credential the daemon holds, per account.

        One entry per account that needs a credential (its sandboxes or claims) or has one
        in memory: ``state`` (``in_memory`` or ``missing``), ``origin`` (``caller``,
        ``credentials file``, ``daemon environment``), ``source``, ``fingerprint`` (never the
        value), ``sandboxes``; and the matching ``doctor`` checks. Any request may carry the
        caller's provider credentials in the ``x-hutch-credentials`` header (base64url JSON,
        ``{"unikraft": {"token", "source", "metro"}}``, at most 8 KiB; a malformed one is
        ``invalid``); this one waits until they have been checked, so a caller that brings
        one sees it held."""
        await service.keyring.settle()
        report = service.keyring.report()
        return {"accounts": report, "checks": [c.to_dict() for c in credential_checks(report)]}

    return r
