"""Requests to exposed ports (``hutch expose``): routed, checked, relayed into the sandbox.

Three routes lead to an exposed port:

- the local daemon (no ``--listen``): a loopback port of its own for each exposure,
  ``http://127.0.0.1:PORT/`` (an app that uses absolute paths works as it is);
- the gateway's path route, ``https://HOST/p/SANDBOX/PORT/...`` (the prefix is removed
  before the request goes in);
- the gateway's host route, where ``--preview-domain DOMAIN`` names a wildcard DNS name
  routed to the gateway: ``https://PORT-SANDBOX.DOMAIN/``, SANDBOX being the sandbox's id
  in a DNS-safe form (``sbx_0195...`` -> ``sbx-0195...``: a DNS label has no ``_``).

A private port opens with its signed token (``?hutch_preview=TOKEN``: the first request
trades it for a cookie scoped to the route and is redirected to the same URL without it),
with that cookie, or with the credentials of the sandbox's owner (the bearer key or client
certificate the API takes; they are not passed on into the sandbox). A public port opens
for anyone. Nothing listening answers a 502 page at once; a path with ``..`` is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import re
import socket
from collections.abc import Callable
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from hutch.errors import HutchError
from hutch.server import proxy
from hutch.service import Service
from hutch.service.ports import Exposed

Scope = dict[str, Any]
ASGIApp = Any
TOKEN = "hutch_preview"
MayOpen = Callable[[Scope, Exposed], bool]  # do the request's own credentials open this port (its owner, an admin)
HOST_LABEL = re.compile(r"^(\d{1,5})-(sbx-[0-9a-f]{8,40})$")


def dns_form(sandbox_id: str) -> str:
    """A sandbox id as a DNS label (``_`` is not allowed in one)."""
    return sandbox_id.replace("_", "-").lower()


def _cookie_name(ex: Exposed) -> str:
    return f"{TOKEN}_{ex.sandbox_id}_{ex.port}"


def _page(status: int, title: str, message: str, hint: str = "") -> tuple[int, bytes]:
    body = f"<!doctype html><meta charset=utf-8><title>{status} {html.escape(title)}</title>"
    body += f"<h1>{status} {html.escape(title)}</h1><p>{html.escape(message)}</p>"
    if hint:
        body += f"<p>hint: {html.escape(hint)}</p>"
    return status, (body + "\n").encode()


async def _answer(
    scope: Scope, receive: Any, send: Any, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    heads = [
        (b"content-type", b"text/html; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
    ]
    heads += headers or []
    if scope["type"] == "websocket":
        await receive()  # websocket.connect
        if "websocket.http.response" in scope.get("extensions", {}):
            await send({"type": "websocket.http.response.start", "status": status, "headers": heads})
            await send({"type": "websocket.http.response.body", "body": body})
        else:
            await send({"type": "websocket.close", "code": 1008})
        return
    await send({"type": "http.response.start", "status": status, "headers": heads})
    await send({"type": "http.response.body", "body": body})


def _dotdot(scope: Scope) -> bool:
    raw = bytes(scope.get("raw_path") or scope.get("path", "").encode()).decode("latin-1")
    for text in (raw, unquote(raw), scope.get("path", "")):
        if any(seg in ("..", ".") for seg in text.replace("\\", "/").split("/")):
            return True
    return False


class Previews:
    """The routes to exposed ports, and the Service's front for them (:class:`hutch.service.ports.Front`)."""

    def __init__(
        self,
        service: Service,
        *,
        base_url: str = "",
        domain: str = "",
        may_open: MayOpen | None = None,
        http: type[Any] = HttpToolsProtocol,
    ) -> None:
        self.service = service
        self.http = http  # the loopback ports' HTTP protocol (deadlines for slow clients)
        self.base_url = base_url.rstrip("/")  # the gateway's URL ("": the local daemon, loopback ports)
        self.domain = domain.lower().strip(".")
        self.may_open = may_open or (lambda scope, ex: False)
        self.servers: dict[tuple[str, int], tuple[uvicorn.Server, asyncio.Task[None]]] = {}
        service.ports.front = self

    # -- the Service's front -------------------------------------------------------------

    async def opened(self, ex: Exposed) -> None:
        if self.base_url:
            return  # the gateway's routes
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        ex.local_port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.fixed(ex),
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=1,
            server_header=False,
            date_header=False,
            http=self.http,
        )
        server = _Quiet(config)
        task = asyncio.create_task(server.serve(sockets=[sock]))
        self.servers[(ex.sandbox_id, ex.port)] = (server, task)

    async def closed(self, ex: Exposed) -> None:
        found = self.servers.pop((ex.sandbox_id, ex.port), None)
        if found is not None:
            server, task = found
            server.should_exit = True
            server.force_exit = True  # open connections (a WebSocket) end with it
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(task, 10)

    def urls(self, ex: Exposed, token: str | None) -> list[str]:
        query = f"?{TOKEN}={token}" if token else ""
        if not self.base_url:
            return [f"http://127.0.0.1:{ex.local_port}/{query}"]
        out = [f"{self.base_url}/p/{ex.sandbox_id}/{ex.port}/{query}"]
        if self.domain:
            base = urlsplit(self.base_url)
            port = f":{base.port}" if base.port else ""
            out.insert(0, f"{base.scheme}://{ex.port}-{dns_form(ex.sandbox_id)}.{self.domain}{port}/{query}")
        return out

    # -- routing -------------------------------------------------------------------------

    def fixed(self, ex: Exposed) -> ASGIApp:
        """The app of a loopback port: every request goes to ``ex``, its path as it is."""

        async def app(scope: Scope, receive: Any, send: Any) -> None:
            if scope["type"] in ("http", "websocket"):
                await self.serve(scope, receive, send, ex.sandbox_id, ex.port, scope.get("path", "/"), "/")

        return app

    def middleware(self, app: ASGIApp) -> ASGIApp:
        """The gateway's listener: path and host routes here, everything else to ``app``."""

        async def route(scope: Scope, receive: Any, send: Any) -> None:
            if scope["type"] not in ("http", "websocket"):
                await app(scope, receive, send)
                return
            host = self._host_route(scope)
            if host is not None:
                await self.serve(scope, receive, send, host[0], host[1], scope.get("path", "/"), "/")
                return
            path = scope.get("path", "")
            if not path.startswith("/p/"):
                await app(scope, receive, send)
                return
            parts = path.split("/", 4)  # "", "p", SANDBOX, PORT, rest
            if len(parts) < 4 or not parts[3].isdigit() or not parts[2]:
                status, body = _page(404, "Not Found", "a preview URL is /p/SANDBOX/PORT/", "hutch expose SANDBOX PORT prints it")
                await _answer(scope, receive, send, status, body)
                return
            if len(parts) == 4:  # /p/SANDBOX/PORT: relative links need the slash
                query = scope.get("query_string", b"").decode("latin-1")
                location = (path + "/" + (f"?{query}" if query else "")).encode("latin-1")
                status, body = _page(308, "Permanent Redirect", "moved to " + path + "/")
                await _answer(scope, receive, send, status, body, [(b"location", location)])
                return
            prefix = f"/p/{parts[2]}/{parts[3]}/"
            await self.serve(scope, receive, send, parts[2], int(parts[3]), "/" + parts[4], prefix)

        return route

    def _host_route(self, scope: Scope) -> tuple[str, int] | None:
        if not self.domain:
            return None
        host = next((bytes(v).decode("latin-1") for k, v in scope.get("headers", ()) if k == b"host"), "")
        name = host.rsplit(":", 1)[0].lower().rstrip(".") if not host.startswith("[") else ""
        if not name.endswith("." + self.domain):
            return None
        match = HOST_LABEL.match(name[: -len(self.domain) - 1])
        if match is None:
            return None
        return "sbx_" + match.group(2)[4:], int(match.group(1))

    # -- one request ---------------------------------------------------------------------

    async def serve(self, scope: Scope, receive: Any, send: Any, sandbox: str, port: int, path: str, prefix: str) -> None:
        if _dotdot(scope):
            status, body = _page(400, "Bad Request", "a path with . or .. segments is refused", "ask for the path itself")
            await _answer(scope, receive, send, status, body)
            return
        try:
            ex = self.service.ports.find(sandbox, port) if 0 < port < 65536 else None
        except HutchError:
            ex = None
        if ex is None:
            status, body = _page(
                404, "Not Found", f"port {port} of sandbox {sandbox} is not exposed", f"hutch expose {sandbox} {port}"
            )
            await _answer(scope, receive, send, status, body)
            return
        query = [(k, v) for k, v in parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)]
        token = next((v for k, v in query if k == TOKEN), None)
        rest = [(k, v) for k, v in query if k != TOKEN]
        headers = [(bytes(k).lower(), bytes(v)) for k, v in scope.get("headers", ())]
        cookies = SimpleCookie()
        for k, v in headers:
            if k == b"cookie":
                with contextlib.suppress(Exception):
                    cookies.load(v.decode("latin-1"))
        ports = self.service.ports
        by_credentials = False
        if not ex.public:
            if token is not None and ports.token_ok(ex, token):
                if scope["type"] == "http" and scope.get("method") in ("GET", "HEAD"):
                    await self._trade(scope, receive, send, ex, prefix, path, rest, token)
                    return
            elif not ((c := cookies.get(_cookie_name(ex))) is not None and ports.token_ok(ex, c.value)):
                by_credentials = self.may_open(scope, ex)
                if not by_credentials:
                    status, body = _page(
                        401,
                        "Unauthorized",
                        f"port {port} of sandbox {ex.sandbox_id} is private",
                        "open the URL hutch expose printed (it carries a token), or expose it with --public",
                    )
                    await _answer(scope, receive, send, status, body)
                    return
        headers = _inward(headers, by_credentials)
        query_bytes = urlencode(rest).encode("latin-1") if token is not None else scope.get("query_string", b"")
        try:
            sock = await ports.connect(ex)
        except HutchError as exc:
            status, body = _page(502, "Bad Gateway", exc.message, exc.hint or "")
            await _answer(scope, receive, send, status, body)
            return
        if scope["type"] == "websocket":
            await proxy.websocket(scope, receive, send, sock, path, query_bytes, headers)
            return
        try:
            await proxy.http(scope, receive, send, sock, path, query_bytes, headers, prefix)
        except proxy.UpstreamError as exc:
            status, body = _page(502, "Bad Gateway", f"port {port} of sandbox {ex.sandbox_id}: {exc}")
            await _answer(scope, receive, send, status, body)

    async def _trade(
        self, scope: Scope, receive: Any, send: Any, ex: Exposed, prefix: str, path: str, rest: list[tuple[str, str]], token: str
    ) -> None:
        """The token for a cookie, and the same URL without it."""
        secure = "; Secure" if scope.get("scheme") in ("https", "wss") else ""
        cookie = f"{_cookie_name(ex)}={token}; Path={prefix}; HttpOnly; SameSite=Lax{secure}"
        location = prefix.rstrip("/") + path + (("?" + urlencode(rest)) if rest else "")
        status, body = _page(303, "See Other", "signed in to this preview")
        await _answer(
            scope,
            receive,
            send,
            status,
            body,
            [(b"location", location.encode("latin-1")), (b"set-cookie", cookie.encode("latin-1"))],
        )


def _inward(headers: list[tuple[bytes, bytes]], by_credentials: bool) -> list[tuple[bytes, bytes]]:
    """The request's headers as the server inside gets them: never hutch's own credentials."""
    out: list[tuple[bytes, bytes]] = []
    for k, v in headers:
        if k == b"authorization" and by_credentials:
            continue
        if k == b"cookie":
            kept = "; ".join(p.strip() for p in v.decode("latin-1").split(";") if not p.strip().startswith(TOKEN + "_"))
            if kept:
                out.append((k, kept.encode("latin-1")))
            continue
        out.append((k, v))
    return out


class _Quiet(uvicorn.Server):
    """A loopback port's server: the daemon's signal handlers stay the daemon's."""

    @contextlib.contextmanager
    def capture_signals(self) -> Any:
        yield
