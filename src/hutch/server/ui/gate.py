"""How the dashboard is let in: its session cookie, its public pages, its CSRF check and the
headers every page carries.

- The session cookie (``hutch_session``: HttpOnly, SameSite=Strict, Secure on TLS) is a
  credential for the dashboard's own paths only (``/`` and ``/ui/...``): never for the API,
  which takes a key in ``Authorization`` (:mod:`hutch.server.auth` calls :func:`session_id`).
- The login page and the static files need no credential (:func:`is_public`).
- A GET never changes anything. Every other request made with the cookie carries the
  session's CSRF token (form field ``csrf`` or header ``X-CSRF-Token``), and none is taken
  from another site (``Origin`` must be this one's, ``Sec-Fetch-Site`` must not be
  ``cross-site``): :func:`check_csrf`. The login form carries a token of its own, matched
  against a cookie set with the form (double submit).
- Every dashboard answer forbids scripts, styles and frames from anywhere but here.
"""

from __future__ import annotations

import hmac
from typing import Any
from urllib.parse import parse_qs, quote

from starlette.requests import cookie_parser

from hutch.actors import Actor
from hutch.errors import InvalidError, UnauthorizedError

Scope = dict[str, Any]
SESSION_COOKIE = "hutch_session"
LOGIN_COOKIE = "hutch_login"  # the login form's CSRF token (double submit)
ANONYMOUS = Actor("anonymous", "anonymous", frozenset(), via="none")  # the login page's: owns nothing, may nothing
MAX_FORM = 64 << 10
SAFE = ("GET", "HEAD")
HEADERS = {
    "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",  # no-referrer would make a form's Origin "null"
    "cache-control": "no-store",
    "x-frame-options": "DENY",
}


def is_ui(path: str) -> bool:
    return path == "/" or path.startswith("/ui/")


def is_public(path: str) -> bool:
    return path == "/ui/login" or path.startswith("/ui/static/")


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value).decode("latin-1")
    return None


def has_bearer(scope: Scope) -> bool:
    return (_header(scope, b"authorization") or "").lower().startswith("bearer ")


def cookies(scope: Scope) -> dict[str, str]:
    raw = _header(scope, b"cookie")
    return cookie_parser(raw) if raw else {}


def session_id(scope: Scope) -> str | None:
    """The session cookie of a request to the dashboard (None elsewhere: the API takes keys only)."""
    if not is_ui(scope.get("path", "")):
        return None
    return cookies(scope).get(SESSION_COOKIE) or None


def wants_login(scope: Scope) -> bool:
    """A browser's page request without a valid session: sent to the login page instead of a JSON 401."""
    return scope["type"] == "http" and scope.get("method") in SAFE and is_ui(scope.get("path", ""))


async def to_login(scope: Scope, send: Any) -> None:
    path = scope.get("path", "/")
    target = "/ui/login" + ("?next=" + quote(path, safe="/") if path not in ("/", "/ui/login") else "")
    headers = [(b"location", target.encode()), (b"content-length", b"0")]
    headers += [(k.encode(), v.encode()) for k, v in HEADERS.items()]
    await send({"type": "http.response.start", "status": 303, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


def cookie(name: str, value: str, *, secure: bool, max_age: int | None = None, path: str = "/") -> str:
    """A Set-Cookie value: HttpOnly, SameSite=Strict, Secure over TLS."""
    parts = [f"{name}={value}", f"Path={path}", "HttpOnly", "SameSite=Strict"]
    if max_age is not None:
        parts.append(f"Max-Age={max_age}")
    if secure:
        parts.append("Secure")
    return "; ".join(parts)


def same_origin(scope: Scope) -> bool:
    """No sign of another site: ``Sec-Fetch-Site`` is not cross-site, ``Origin`` (when sent) is this host."""
    if _header(scope, b"sec-fetch-site") == "cross-site":
        return False
    origin = _header(scope, b"origin")
    if origin is None:
        return True
    host = _header(scope, b"host") or ""
    return origin.split("://", 1)[-1] == host


async def read_form(receive: Any) -> tuple[dict[str, str], Any]:
    """A urlencoded body of at most MAX_FORM bytes (refused while read), and a ``receive``
    that hands the same body on to the route."""
    chunks: list[bytes] = []
    total = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        body = message.get("body", b"")
        total += len(body)
        if total > MAX_FORM:
            raise InvalidError(f"a form is at most {MAX_FORM} bytes", hint="send less")
        chunks.append(body)
        if not message.get("more_body"):
            break
    data = b"".join(chunks)
    fields = {k: v[0] for k, v in parse_qs(data.decode("utf-8", "replace"), keep_blank_values=True).items()}
    sent = [False]

    async def replay() -> dict[str, Any]:
        if not sent[0]:
            sent[0] = True
            return {"type": "http.request", "body": data, "more_body": False}
        message: dict[str, Any] = await receive()
        return message

    return fields, replay


def check_csrf(scope: Scope, fields: dict[str, str], expected: str) -> None:
    """``unauthorized`` unless the request is this site's and carries ``expected``."""
    given = _header(scope, b"x-csrf-token") or fields.get("csrf", "")
    if not same_origin(scope):
        raise UnauthorizedError("refused: this request comes from another site", hint="use the dashboard's own pages")
    if not expected or not given or not hmac.compare_digest(given.encode(), expected.encode()):
        raise UnauthorizedError("refused: the form's CSRF token is missing or wrong", hint="reload the page and try again")
