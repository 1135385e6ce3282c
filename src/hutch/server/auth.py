"""Who a request is, in one place: the ASGI middleware :class:`Auth` resolves each HTTP
request's and WebSocket handshake's :class:`~hutch.actors.Actor`, checks the scope its route
needs, applies the actor's request rate, counts the request per key, and runs the app as
that actor (:mod:`hutch.actors`).

- On the unix socket (owner-only): the owner, an admin; nothing is checked.
- On the TCP listener: ``Authorization: Bearer ...`` is the ``--token-file`` token (an
  admin, compared in constant time) or an API key (``hk_...``, :mod:`hutch.service.keys`).
  A client certificate bound to a key (:mod:`hutch.service.certs`, presented in the TLS
  handshake and put into the scope by :mod:`hutch.server.tls`) resolves to that key's actor
  the same way; with ``--require-client-cert`` a request without one is refused.
- The dashboard (``/`` and ``/ui/...``, :mod:`hutch.server.ui`) also takes its session cookie,
  bound to the key (or the local owner) that logged in; its login page and static files need
  no credential, and a page asked for without one is sent to the login page.

Refusals are error bodies that never quote what the client sent: 401 ``unauthorized`` for a
missing, wrong, revoked or expired credential, 403 ``unauthorized`` for a valid key that lacks
the scope a route needs (the message names the scope and the key's scopes), 429
``rate_limited`` with ``Retry-After`` past the key's requests per second.
"""

from __future__ import annotations

import hmac
import json
import math
from typing import Any

from hutch.actors import OWNER, TOKEN, Actor, reset_current, set_current
from hutch.errors import ForbiddenError, HutchError, RateLimitedError, UnauthorizedError
from hutch.server import e2b
from hutch.server.e2b import auth as e2b_auth
from hutch.server.tls import client_cert
from hutch.server.ui import gate
from hutch.service import Service
from hutch.service.access import Buckets, too_many
from hutch.service.keys import looks_like_key
from hutch.service.ports import Exposed

Scope = dict[str, Any]
ASGIApp = Any
TOKEN_HINT = "set HUTCH_TOKEN_FILE (or HUTCH_TOKEN) to the daemon's token file (hutch serve --token-file) or to an API key"
ADMIN_PREFIXES = ("/v1/keys", "/v1/shutdown", "/v1/cleanup", "/v1/providers/", "/v1/credentials", "/v1/pool", "/v1/cluster")
OPEN_PATHS = ("/v1/health", "/openapi.json")
READ_METHODS = ("GET", "HEAD")


def required_scope(kind: str, method: str, path: str) -> str | None:
    """The scope a request needs (None: any valid credential)."""
    if path in OPEN_PATHS or gate.is_public(path) or path == "/ui/logout":
        return None
    if path == "/v1/ui/links":
        return "read"  # a login link gives the browser what the caller has, no more
    if path.startswith("/ui/keys"):
        return "admin"
    if path.startswith("/ui/approvals/") and method not in READ_METHODS:
        return "approve"
    if path == "/metrics":
        return "metrics"
    if path.startswith(ADMIN_PREFIXES):
        return "admin"
    if path.startswith("/v1/approvals/") and path.endswith("/decision"):
        return "approve"
    if kind == "http" and (method in READ_METHODS or path.endswith("/wait")):
        return "read"
    return "write"  # every other change, and the attach WebSocket


def _bearer(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            kind, _, given = bytes(value).decode("latin-1").partition(" ")
            return given.strip() if kind.lower() == "bearer" else ""
    return None


class Auth:
    """The middleware (see the module's docstring); ``local``: the unix socket's."""

    def __init__(
        self, app: ASGIApp, service: Service, *, local: bool = False, token: str | None = None, require_cert: bool = False
    ) -> None:
        self.app = app
        self.service = service
        self.local = local
        self._token = token.encode() if token else None
        self.require_cert = require_cert  # --require-client-cert: nothing else opens the TCP listener
        self.rates = Buckets()

    def resolve(self, scope: Scope) -> Actor:
        """The actor of a TCP request; ``unauthorized`` when it has none that is valid. A
        bearer credential wins over a client certificate (hutch.server.tls puts it in the scope)."""
        given = _bearer(scope)
        pem = client_cert(scope)
        if pem is None and self.require_cert:
            raise UnauthorizedError(
                "this gateway requires a client certificate", hint="log in with a bundle of this gateway (hutch login BUNDLE)"
            )
        sid = gate.session_id(scope) if given is None else None
        if sid is not None:  # the dashboard's cookie, on its own paths only
            actor, scope["hutch.ui_session"] = self.service.sessions.authenticate(sid)
            return actor
        if given is None and pem is not None:
            return self.service.certificates.authenticate(pem)
        if given is None:
            raise UnauthorizedError("this daemon wants a token or an API key (Authorization: Bearer ...)", hint=TOKEN_HINT)
        if self._token is not None and hmac.compare_digest(given.encode("latin-1", "replace"), self._token):
            return TOKEN
        if looks_like_key(given):
            return self.service.keys.authenticate(given)
        raise UnauthorizedError("wrong token", hint=TOKEN_HINT)

    def may_open(self, scope: Scope, ex: Exposed) -> bool:
        """Do a request's own credentials open exposed port ``ex`` (its owner's, or an admin's)."""
        try:
            actor = self.resolve(scope)
        except HutchError:
            return False
        return actor.owns(ex.owner)

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        actor: Actor | None = None
        path = scope.get("path", "")
        adapter = scope["type"] == "http" and e2b.is_e2b(path)
        try:
            if adapter:  # the E2B API: its own headers (X-API-KEY, X-Access-Token), its own error shape
                actor, need_ = e2b_auth.resolve(self.service, scope, self._token, self.local)
                need = None if need_ == "none" else need_
            else:
                if self.local:
                    actor = OWNER
                elif gate.is_public(path) and _bearer(scope) is None and not self.require_cert:
                    actor = gate.ANONYMOUS  # the dashboard's login page and static files
                else:
                    actor = self.resolve(scope)
                need = required_scope(scope["type"], scope.get("method", ""), path)
            if need is not None and not actor.allows(need):
                raise ForbiddenError(
                    f"key {actor.name} may not do this: it needs the {need} scope (it has {', '.join(sorted(actor.scopes))})",
                    hint="use a key with that scope, or ask an admin: hutch key create --scope " + need,
                )
            rps = actor.quotas.rps
            if rps is not None:
                wait = self.rates.take(actor.id, rps, max(1.0, rps))
                if wait > 0:
                    self.service.metrics.limited.labels(key=actor.name, limit="rps").inc()
                    raise too_many("requests", wait, f"{rps:g} a second")
        except HutchError as exc:
            self.service.metrics.request(actor.name if actor is not None else "unauthenticated", exc.status)
            if exc.status == 401 and actor is None and not adapter and gate.wants_login(scope):
                await gate.to_login(scope, send)
                return
            await refuse(scope, receive, send, exc, e2b_auth.refusal(path, exc.status, exc.message) if adapter else None)
            return
        token = set_current(actor)
        status = [0]

        async def counted(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, counted if scope["type"] == "http" else send)
        finally:
            reset_current(token)
            self.service.metrics.request(actor.name, status[0] or 101)


async def refuse(scope: Scope, receive: Any, send: Any, exc: HutchError, shape: dict[str, Any] | None = None) -> None:
    """Answer ``exc`` without reading the request's body (a huge upload is not read at all);
    ``shape``: the body to send instead of hutch's error (the E2B API's)."""
    body = json.dumps(shape if shape is not None else exc.to_dict()).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if exc.status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    retry_after = exc.retry_after if isinstance(exc, RateLimitedError) else None
    if retry_after is not None:
        headers.append((b"retry-after", str(max(1, math.ceil(retry_after))).encode()))
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": exc.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        return
    await receive()  # websocket.connect
    if "websocket.http.response" in scope.get("extensions", {}):
        await send({"type": "websocket.http.response.start", "status": exc.status, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
    else:
        await send({"type": "websocket.close", "code": 1008})
