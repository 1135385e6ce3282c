"""``hutch serve --listen``: the same app on TCP, behind a bearer token (and TLS off loopback).

The unix socket stays owner-only and unauthenticated; only the TCP listener checks the
token, in constant time, on every HTTP request and WebSocket handshake.
"""

from __future__ import annotations

import hmac
import json
import os
import socket
from dataclasses import dataclass, field
from typing import Any

from hutch.config import Settings
from hutch.errors import InvalidError, UnauthorizedError
from hutch.tokens import TOKEN_RECIPE, is_loopback, read_token

Scope = dict[str, Any]
ASGIApp = Any


@dataclass(frozen=True)
class Listener:
    host: str
    port: int
    token: str = field(repr=False)
    tls_cert: str = ""
    tls_key: str = ""

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls_cert else 'http'}://{host}:{self.port}"


def parse_listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise InvalidError(f"--listen {value!r} is not HOST:PORT", hint="e.g. --listen 127.0.0.1:8765 (port 0 picks a free one)")
    return host, int(port)


def listener(settings: Settings) -> Listener | None:
    """The TCP listener ``settings`` asks for, checked before anything starts (None: unix socket only)."""
    if not settings.listen:
        return None
    host, port = parse_listen(settings.listen)
    if bool(settings.tls_cert) != bool(settings.tls_key):
        raise InvalidError("--tls-cert and --tls-key go together", hint="pass both files (PEM), or neither on loopback")
    if not settings.tls_cert and not is_loopback(host):
        raise InvalidError(
            f"refusing to listen on {host} without TLS: the token and all traffic would travel in clear",
            hint="pass --tls-cert and --tls-key, or listen on 127.0.0.1",
        )
    for what, path in (("--tls-cert", settings.tls_cert), ("--tls-key", settings.tls_key)):
        if path and not os.path.isfile(path):
            raise InvalidError(f"{what} {path}: no such file", hint="point it at a PEM file")
    if not settings.api_token_file:
        raise InvalidError(
            "--listen needs a token: --token-file PATH (or HUTCH_API_TOKEN_FILE)",
            hint=f"e.g. {TOKEN_RECIPE}, then --token-file token",
        )
    token = read_token(settings.api_token_file, "--token-file")
    return Listener(host, port, token, settings.tls_cert, settings.tls_key)


def bind(lst: Listener) -> socket.socket:
    family = socket.AF_INET6 if ":" in lst.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # the proto lets asyncio set TCP_NODELAY
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((lst.host, lst.port))
    except OSError as exc:
        sock.close()
        raise InvalidError(f"cannot listen on {lst.host}:{lst.port}: {exc.strerror}", hint="pick another --listen") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


class TokenAuth:
    """ASGI middleware: every request and WebSocket handshake carries ``Authorization: Bearer TOKEN``."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._token = token.encode()

    def _ok(self, scope: Scope) -> bool:
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                scheme, _, given = bytes(value).partition(b" ")
                return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self._token)
        return False

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket") or self._ok(scope):
            await self.app(scope, receive, send)
            return
        have = any(name == b"authorization" for name, _ in scope.get("headers", ()))
        err = UnauthorizedError(
            "wrong token" if have else "this daemon wants a token (Authorization: Bearer ...)",
            hint="set HUTCH_TOKEN_FILE (or HUTCH_TOKEN) to the daemon's token file (hutch serve --token-file)",
        )
        body = json.dumps(err.to_dict()).encode()
        headers = [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]
        if scope["type"] == "websocket":
            await receive()  # websocket.connect
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": 401, "headers": headers})
            await send({"type": "http.response.body", "body": body})
        elif "websocket.http.response" in scope.get("extensions", {}):
            await send({"type": "websocket.http.response.start", "status": 401, "headers": headers})
            await send({"type": "websocket.http.response.body", "body": body})
        else:
            await send({"type": "websocket.close", "code": 1008})
