"""The Unikraft Cloud connection: endpoint and token resolution, and one careful HTTP client.

Rules (issue 6): a token comes from ``HUTCH_UNIKRAFT_TOKEN``, ``UKC_TOKEN``,
``UKC_API_KEY`` or the config file's ``unikraft_token``, in that order, never from a flag:
the caller's, sent with each request (``hutch.credentials``), or the daemon's own; which
one an operation uses is the Service's (``hutch.service.keyring``).
A metro name becomes ``https://api.<metro>.unikraft.cloud``; a URL override must be an
endpoint root (no path beyond ``/v1``, no userinfo, query or fragment) and HTTPS unless its
host is loopback. Redirects are followed only to the same origin under ``/v1/``, and never
when they would change a mutation's method. Every response is capped and every request
has a timeout. The token is never put in a message, a log line or a return value.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx

from hutch.credentials import CONFIG_SOURCE, TOKEN_HINT, UNIKRAFT_TOKEN_VARS, config_file
from hutch.errors import (
    CapacityError,
    HutchError,
    InvalidError,
    NotFoundError,
    UnauthorizedError,
    UnavailableError,
)

METROS = ("fra", "dal", "sin", "was", "sfo")
TOKEN_VARS = UNIKRAFT_TOKEN_VARS
MAX_BODY = 16 << 20
MAX_REDIRECTS = 3
MUTATIONS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
REDIRECTS = frozenset({301, 302, 303, 307, 308})


class NotSentError(UnavailableError):
    """The request never reached the server (connection refused / reset before sending):
    safe to retry even for a mutation."""


def config_value(key: str) -> str | None:
    """One key of hutch's config file (``HUTCH_CONFIG`` or ``$HUTCH_HOME/config.toml``)."""
    value = config_file(os.environ).get(key)
    return str(value) if value not in (None, "") else None


def resolve_token() -> tuple[str, str]:
    """(token, where it came from) in this process's environment or config file. The
    source is safe to show; the token is not."""
    for var in TOKEN_VARS:
        value = os.environ.get(var, "").strip()
        if value:
            return value, var
    stored = config_value("unikraft_token")
    if stored:
        return stored.strip(), CONFIG_SOURCE
    raise UnauthorizedError("no Unikraft Cloud token", hint=TOKEN_HINT)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def resolve_endpoint(value: str | None) -> str:
    """A metro name or an endpoint root URL, as ``scheme://host[:port]`` (no trailing slash)."""
    text = (value or "").strip()
    if not text:
        text = os.environ.get("UKC_METRO", "").strip() or config_value("unikraft_metro") or "fra"
    if "://" not in text:
        if text.lower() not in METROS:
            raise InvalidError(f"unknown Unikraft Cloud metro {text!r}", hint=f"use one of {', '.join(METROS)}, or a full URL")
        return f"https://api.{text.lower()}.unikraft.cloud"
    parts = urlsplit(text)
    hint = "give the endpoint root only, e.g. https://api.fra.unikraft.cloud (http only for 127.0.0.1/localhost)"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidError(f"invalid Unikraft Cloud URL {text!r}", hint=hint)
    if parts.username or parts.password or "@" in parts.netloc:
        raise InvalidError("the Unikraft Cloud URL may not carry credentials", hint=hint)
    if parts.query or parts.fragment or text.endswith(("?", "#")):
        raise InvalidError(f"the Unikraft Cloud URL {text!r} has a query or fragment", hint=hint)
    if parts.path.rstrip("/") not in ("", "/v1"):
        raise InvalidError(f"the Unikraft Cloud URL {text!r} has a path; only an endpoint root is accepted", hint=hint)
    if parts.scheme == "http" and not _loopback(parts.hostname):
        raise InvalidError(f"plain http is allowed only for loopback hosts, not {parts.hostname!r}", hint=hint)
    try:
        port = parts.port
    except ValueError as exc:
        raise InvalidError(f"invalid port in {text!r}", hint=hint) from exc
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}" + (f":{port}" if port else "")


def client(timeout: float) -> httpx.AsyncClient:
    """A connection pool for one endpoint (shared by the Apis of its tokens)."""
    return httpx.AsyncClient(
        timeout=httpx.Timeout(timeout, connect=min(10.0, timeout)),
        follow_redirects=False,
        trust_env=False,
        headers={"user-agent": "hutch", "accept": "application/json"},
    )


class Reply:
    """A platform or plugin answer: HTTP status and the parsed JSON envelope (or raw bytes)."""

    def __init__(self, status: int, body: Any, raw: bytes) -> None:
        self.status = status
        self.body = body
        self.raw = raw

    @property
    def data(self) -> dict[str, Any]:
        data = self.body.get("data") if isinstance(self.body, dict) else None
        return data if isinstance(data, dict) else {}

    @property
    def message(self) -> str:
        if isinstance(self.body, dict) and self.body.get("message"):
            return str(self.body["message"])[:300]
        return self.raw[:200].decode(errors="replace") if self.raw and not isinstance(self.body, dict) else ""


class Api:
    """One endpoint, one token. ``request`` is the only place that touches the network."""

    def __init__(
        self,
        endpoint: str,
        token: str,
        *,
        timeout: float = 30.0,
        wake_deadline: float = 60.0,
        on_response: Callable[[str, str], Awaitable[None]] | None = None,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self.endpoint = endpoint
        self._token = token
        self.timeout = timeout
        self.wake_deadline = wake_deadline
        self.requests = 0  # how many HTTP requests this connection sent (tests count them)
        self.on_response = on_response  # crash-injection hook: (method, path) once headers arrived
        self._owned = http is None  # a shared connection pool is closed by its owner
        self._http = http or client(timeout)

    def redact(self, text: str) -> str:
        return text.replace(self._token, "***") if self._token else text

    async def close(self) -> None:
        if self._owned:
            await self._http.aclose()

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, Any] | None = None,
        timeout: float | None = None,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        """One request (following only safe redirects). Raises UnavailableError on transport
        failures; returns every HTTP answer, whatever its status, for the caller to judge."""
        url = self.endpoint + path
        content = json.dumps(body).encode() if body is not None else None
        for _ in range(MAX_REDIRECTS + 1):
            hdrs = {"authorization": f"Bearer {self._token}", **(headers or {})}
            if content is not None:
                hdrs["content-type"] = "application/json"
            req = self._http.build_request(
                method,
                url,
                content=content,
                params=params,
                headers=hdrs,
                timeout=httpx.Timeout(timeout, connect=min(10.0, timeout)) if timeout else self._http.timeout,
            )
            self.requests += 1
            try:
                resp = await self._http.send(req, stream=True)
            except httpx.TimeoutException as exc:
                raise UnavailableError(
                    f"Unikraft Cloud did not answer {method} {path} in time ({exc.__class__.__name__})",
                    hint="the metro may be slow or unreachable; retry, or check hutch doctor --provider unikraft",
                ) from None
            except httpx.ConnectError as exc:
                raise NotSentError(
                    f"cannot reach Unikraft Cloud at {self.endpoint}: {self.redact(str(exc)) or 'connection failed'}",
                    hint="check the metro / URL and the network; hutch doctor --provider unikraft",
                ) from None
            except httpx.HTTPError as exc:
                raise UnavailableError(
                    f"lost the connection to Unikraft Cloud at {self.endpoint}: "
                    + (self.redact(str(exc)) or exc.__class__.__name__),
                    hint="check the metro / URL and the network; hutch doctor --provider unikraft",
                ) from None
            try:
                if self.on_response is not None:
                    await self.on_response(method, path)
                if resp.status_code in REDIRECTS:
                    url = self._redirect(method, url, resp.headers.get("location", ""), resp.status_code)
                    continue
                raw = await self._read_capped(resp, method, path)
            finally:
                await resp.aclose()
            try:
                parsed = json.loads(raw) if raw and "json" in resp.headers.get("content-type", "json") else None
            except ValueError:
                parsed = None
            return Reply(resp.status_code, parsed, raw)
        raise UnavailableError(f"too many redirects for {method} {path}", hint="check the Unikraft Cloud URL")

    def _redirect(self, method: str, url: str, location: str, status: int) -> str:
        target = urljoin(url, location)
        old, new = urlsplit(url), urlsplit(target)
        hint = "a redirect may only stay on the same endpoint under /v1/; check the URL override"
        if (old.scheme, old.hostname, old.port) != (new.scheme, new.hostname, new.port):
            raise UnavailableError(f"refused a redirect of {method} to another origin ({new.hostname})", hint=hint)
        if not new.path.startswith("/v1/"):
            raise UnavailableError(f"refused a redirect of {method} outside /v1/ ({new.path})", hint=hint)
        if method in MUTATIONS and status not in (307, 308):
            raise UnavailableError(
                f"refused a {status} redirect of {method} {old.path}: it would change the method of a mutation", hint=hint
            )
        return target

    async def _read_capped(self, resp: httpx.Response, method: str, path: str) -> bytes:
        chunks: list[bytes] = []
        size = 0
        try:
            async for chunk in resp.aiter_raw():
                size += len(chunk)
                if size > MAX_BODY:
                    raise UnavailableError(
                        f"Unikraft Cloud's answer to {method} {path} is larger than {MAX_BODY} bytes", hint="refused; retry"
                    )
                chunks.append(chunk)
        except httpx.HTTPError as exc:
            raise UnavailableError(
                f"the answer to {method} {path} was cut off ({exc.__class__.__name__})",
                hint="retry; hutch doctor --provider unikraft",
            ) from None
        return b"".join(chunks)

    # -- judging answers ---------------------------------------------------------------

    def fail(self, reply: Reply, what: str) -> HutchError:
        """The error for a non-success answer (the token is never part of it)."""
        msg = self.redact(f"{what}: HTTP {reply.status}" + (f": {reply.message}" if reply.message else ""))
        if reply.status in (401, 403):
            return UnauthorizedError(msg, hint=f"check the Unikraft Cloud token ({', '.join(TOKEN_VARS)})")
        if reply.status == 404:
            return NotFoundError(msg, hint="it does not exist (or not in this account)")
        if reply.status == 429 or "quota" in msg.lower():
            return CapacityError(msg, hint="the account's quota is used up: destroy sandboxes (hutch cleanup) or raise it")
        if reply.status >= 500:
            return UnavailableError(msg, hint="Unikraft Cloud failed; retry later")
        return InvalidError(msg, hint="check the image name, memory and options")

    async def call(self, method: str, path: str, what: str, **kw: Any) -> Reply:
        reply = await self.request(method, path, **kw)
        if reply.status >= 400 or (isinstance(reply.body, dict) and reply.body.get("status") == "error"):
            raise self.fail(reply, what)
        return reply

    async def plugin(
        self, instance: str, method: str, path: str, what: str, *, idempotent: bool, wake: float | None = None, **kw: Any
    ) -> Reply:
        """A sandbox-plugin call. An instance in standby is woken by the request itself: while
        it wakes, 502/503 answers (and, for requests that never left, connection errors) are
        retried with backoff until ``wake_deadline``."""
        deadline = time.monotonic() + (self.wake_deadline if wake is None else wake)
        delay = 0.05
        full = f"/v1/instances/{instance}/plugins/sandbox{path}"
        while True:
            try:
                reply = await self.request(method, full, **kw)
            except UnavailableError as exc:
                if not (idempotent or isinstance(exc, NotSentError)) or time.monotonic() + delay > deadline:
                    raise
            else:
                if reply.status not in (502, 503) or time.monotonic() + delay > deadline:
                    return reply
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)
