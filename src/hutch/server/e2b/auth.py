"""Who an E2B request is.

- The control plane (``/e2b/api``) carries ``X-API-KEY``: a hutch API key (``hk_...``), or the
  gateway's ``--token-file`` token (an admin).
- envd calls (``/e2b/envd``) name their sandbox in ``E2b-Sandbox-Id`` and carry
  ``X-Access-Token``: the sandbox's envd access token, which the create answer returned. It is
  an HMAC of the sandbox id under a secret of the state directory (``e2b.secret``, owner-only,
  made at first use), so nothing per sandbox is stored; the request then acts as the key that
  owns the sandbox, checked again (a revoked key's sandboxes answer ``unauthenticated``).
- File URLs of ``download_url()``/``upload_url()`` (``/files`` at the root) carry no header but
  a signature ``v1_<base64 sha256 of path:operation:user:token[:expiration]>``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import time
from pathlib import Path
from typing import Any

from hutch.actors import OWNER, OWNER_ID, TOKEN, TOKEN_ID, Actor
from hutch.errors import NotFoundError, UnauthorizedError
from hutch.models import SandboxRecord
from hutch.service import Service
from hutch.service.keys import looks_like_key

KEY_HINT = "set E2B_API_KEY to a hutch API key (hutch key create NAME)"
ENVD_PORT = 49983
MAX_SCAN = 10_000  # live sandboxes a bare signed file URL is checked against


class Tokens:
    """The envd access tokens of one daemon (their secret, loaded once)."""

    def __init__(self, home: Path) -> None:
        self.path = home / "e2b.secret"
        self._secret: bytes | None = None

    def secret(self) -> bytes:
        if self._secret is None:
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                pass
            else:
                with os.fdopen(fd, "w") as f:
                    f.write(secrets.token_hex(32))
            self._secret = self.path.read_text().strip().encode()
        return self._secret

    def token(self, sandbox_id: str) -> str:
        return "ea_" + hmac.new(self.secret(), sandbox_id.encode(), hashlib.sha256).hexdigest()[:48]

    def traffic(self, sandbox_id: str) -> str:
        """The token for the sandbox's other ports (``trafficAccessToken``; it opens no envd call)."""
        return "et_" + hmac.new(self.secret(), b"traffic:" + sandbox_id.encode(), hashlib.sha256).hexdigest()[:48]

    def check(self, sandbox_id: str, given: str) -> bool:
        return hmac.compare_digest(self.token(sandbox_id).encode(), given.encode("latin-1", "replace"))

    def check_traffic(self, sandbox_id: str, given: str) -> bool:
        return hmac.compare_digest(self.traffic(sandbox_id).encode(), given.encode("latin-1", "replace"))


def signature(path: str, operation: str, user: str, token: str, expiration: int | None) -> str:
    raw = f"{path}:{operation}:{user}:{token}" + (f":{expiration}" if expiration is not None else "")
    return "v1_" + base64.b64encode(hashlib.sha256(raw.encode()).digest()).rstrip(b"=").decode()


def header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value).decode("latin-1")
    return None


def e2b_id(sandbox_id: str) -> str:
    """A sandbox's id as the E2B API shows it: DNS-safe (``sbx_0195...`` -> ``sbx-0195...``), as
    ``E2B_DOMAIN`` mode puts it in a host name, whose resolvers refuse a ``_``."""
    return sandbox_id.replace("_", "-", 1) if sandbox_id.startswith("sbx_") else sandbox_id


def hutch_id(given: str) -> str:
    """The hutch id of an id the E2B API got (either form)."""
    return "sbx_" + given[4:] if given.startswith("sbx-") else given


def port_of(scope: dict[str, Any]) -> int | None:
    """The sandbox port an envd request is for (None: envd itself; -1: not a port number)."""
    raw = header(scope, b"e2b-sandbox-port") or scope.get("e2b.port")
    if raw is None:
        return None
    port = int(raw) if str(raw).isdigit() and len(str(raw)) < 6 else -1
    return None if port == ENVD_PORT else port


def api_actor(service: Service, scope: dict[str, Any], admin_token: bytes | None) -> Actor:
    """The actor of a control-plane request (``X-API-KEY``)."""
    given = header(scope, b"x-api-key")
    if given is None:
        bearer = header(scope, b"authorization") or ""
        given = bearer[7:].strip() if bearer.lower().startswith("bearer ") else None
    if not given:
        raise UnauthorizedError("this API wants an API key in X-API-KEY", hint=KEY_HINT)
    if admin_token is not None and hmac.compare_digest(given.encode("latin-1", "replace"), admin_token):
        return TOKEN
    if looks_like_key(given):
        return service.keys.authenticate(given)
    raise UnauthorizedError("unknown API key", hint=KEY_HINT)


def owner_actor(service: Service, owner: str | None) -> Actor:
    if owner == OWNER_ID or owner is None:
        return OWNER
    if owner == TOKEN_ID:
        return TOKEN
    return service.keys.actor(owner)


def sandbox_of(service: Service, sandbox_id: str) -> SandboxRecord:
    sandbox_id = hutch_id(sandbox_id)
    try:
        rec = service.get(sandbox_id)  # before the actor is known: any sandbox
    except NotFoundError:
        rec = None
    if rec is None or rec.id != sandbox_id:  # ids only: no names or prefixes over this API
        raise NotFoundError(f"sandbox {sandbox_id!r} not found", hint="list sandboxes with Sandbox.list()")
    return rec


def host_sandbox(scope: dict[str, Any]) -> str | None:
    """``E2B_DOMAIN`` mode: the sandbox id in a host name ``PORT-ID.DOMAIN``."""
    host = header(scope, b"host") or ""
    first = host.split(".", 1)[0]
    port, sep, ident = first.partition("-")
    return ident if sep and port.isdigit() and ident.startswith(("sbx_", "sbx-")) and "." in host else None


def envd_actor(service: Service, tokens: Tokens, scope: dict[str, Any]) -> tuple[Actor, str | None]:
    """The actor of an envd request and the sandbox it names (None: a signed file URL whose
    sandbox is found by its signature, in :func:`signed_sandbox`)."""
    sandbox_id = header(scope, b"e2b-sandbox-id") or host_sandbox(scope)
    sandbox_id = hutch_id(sandbox_id) if sandbox_id is not None else None
    token = header(scope, b"x-access-token")
    if sandbox_id is None:
        if scope.get("path", "").endswith("/files") and b"signature=" in scope.get("query_string", b""):
            return OWNER, None  # the signature is checked with the sandbox it matches (signed_sandbox)
        raise UnauthorizedError("an envd request names its sandbox in E2b-Sandbox-Id", hint="use the E2B SDK")
    traffic = header(scope, b"e2b-traffic-access-token")
    if token is None and traffic is not None and port_of(scope) is not None:  # another port: its traffic token opens it
        if not sandbox_id.startswith("sbx_") or not tokens.check_traffic(sandbox_id, traffic):
            hint = "use the trafficAccessToken the create answer returned"
            raise UnauthorizedError("wrong traffic access token for this sandbox", hint=hint)
        return owner_actor(service, sandbox_of(service, sandbox_id).owner), sandbox_id
    if token is None:
        if scope.get("path", "").endswith("/files") and b"signature=" in scope.get("query_string", b""):
            return owner_actor(service, sandbox_of(service, sandbox_id).owner), sandbox_id
        raise UnauthorizedError("an envd request carries its sandbox's access token in X-Access-Token", hint="use the E2B SDK")
    if not sandbox_id.startswith("sbx_") or not tokens.check(sandbox_id, token):
        raise UnauthorizedError("wrong access token for this sandbox", hint="use the envdAccessToken the create answer returned")
    return owner_actor(service, sandbox_of(service, sandbox_id).owner), sandbox_id


def check_signature(
    tokens: Tokens, sandbox_id: str, path: str, operation: str, user: str, given: str, expiration: int | None
) -> bool:
    if expiration is not None and expiration < time.time():
        return False
    want = signature(path, operation, user, tokens.token(sandbox_id), expiration)
    return hmac.compare_digest(want.encode(), given.encode("latin-1", "replace"))


def signed_sandbox(
    service: Service, tokens: Tokens, sandbox_id: str | None, path: str, operation: str, user: str, given: str, exp: int | None
) -> tuple[Actor, str]:
    """The sandbox (and its owner's actor) a signed file URL is for; ``unauthenticated`` when
    no sandbox's token makes that signature (or it expired)."""
    ids = [sandbox_id] if sandbox_id is not None else [r.id for r in service.list(False, {}, None)][:MAX_SCAN]
    for ident in ids:
        if check_signature(tokens, ident, path, operation, user, given, exp):
            return owner_actor(service, sandbox_of(service, ident).owner), ident
    raise UnauthorizedError("invalid or expired file URL signature", hint="make a new one with download_url()/upload_url()")


_TOKENS: dict[Path, Tokens] = {}


def tokens_for(home: Path) -> Tokens:
    found = _TOKENS.get(home)
    if found is None:
        found = _TOKENS[home] = Tokens(home)
    return found


def resolve(service: Service, scope: dict[str, Any], admin_token: bytes | None, local: bool) -> tuple[Actor, str]:
    """The actor of an E2B request, and the scope it needs; the sandbox an envd request
    names goes into ``scope["e2b.sandbox"]``."""
    path: str = scope.get("path", "")
    method: str = scope.get("method", "")
    if path.startswith("/e2b/api/"):
        if local and header(scope, b"x-api-key") is None:
            return OWNER, "read" if method == "GET" else "write"
        return api_actor(service, scope, admin_token), "read" if method == "GET" else "write"
    if path == "/e2b/envd/health":
        return OWNER, "none"
    actor, sandbox_id = envd_actor(service, tokens_for(service.settings.home), scope)
    scope["e2b.sandbox"] = sandbox_id or ""
    reads = ("/Stat", "/ListDir", "/List")
    return actor, "read" if (method == "GET" or path.endswith(reads)) else "write"


def refusal(path: str, status: int, message: str) -> dict[str, Any]:
    """An auth refusal in the shape the SDK reads there: Connect's for RPCs, E2B's elsewhere."""
    if path.startswith("/e2b/envd/") and not path.endswith(("/files", "/health")):
        code = {401: "unauthenticated", 429: "resource_exhausted", 404: "not_found"}.get(status, "permission_denied")
        return {"code": code, "message": message}
    return {"code": status, "message": message}
