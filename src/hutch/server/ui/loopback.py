"""``POST /v1/ui/links``: a one-time link that logs a browser into the dashboard as the caller
(``hutch ui``), and the local daemon's loopback listener that such a link opens.

The local daemon listens on a unix socket, which a browser cannot reach: the first link asked
for over the socket starts a listener of the daemon on ``127.0.0.1`` (a port of its own,
chosen by the kernel), which serves the dashboard's paths only and lets in
nothing but its session cookie (a link's token is exchanged for one). Over the gateway's TCP
listener the link is the gateway's own address. The link is good once, for LINK_TTL seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from typing import Any

import uvicorn
from fastapi import APIRouter, Request
from pydantic import BaseModel

from hutch.actors import current
from hutch.server.auth import Auth
from hutch.server.remote import slow_clients
from hutch.server.ui import gate
from hutch.service import Service

Scope = dict[str, Any]


class UiLink(BaseModel):
    url: str  # open it in a browser: it logs in once
    expires_at: float  # unix time; after it, or once used, the link opens nothing
    loopback: bool  # a listener of the local daemon on 127.0.0.1 (else the gateway's own address)


class _Server(uvicorn.Server):
    """The daemon's signal handlers stay its own: this listener ends with the daemon's loop."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class UiOnly:
    """In front of :class:`~hutch.server.auth.Auth` on the loopback listener: the dashboard's
    paths and nothing else of the API."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and gate.is_ui(scope.get("path", "")):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "http":
            body = b"not found: this listener serves the dashboard only"
            head = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
            await send({"type": "http.response.start", "status": 404, "headers": head})
            await send({"type": "http.response.body", "body": body})
        elif scope["type"] == "websocket":
            await receive()
            await send({"type": "websocket.close", "code": 1008})


class Loopback:
    """The local daemon's dashboard listener, started on first use."""

    def __init__(self, app: Any, service: Service) -> None:
        self.app = app
        self.service = service
        self.url = ""
        self.lock = asyncio.Lock()
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> str:
        async with self.lock:
            if self.task is not None and not self.task.done():
                return self.url
            settings = self.service.settings
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", 0))
            sock.listen(128)
            sock.set_inheritable(False)
            config = uvicorn.Config(
                UiOnly(Auth(self.app, self.service)),
                log_level="warning",
                access_log=False,
                lifespan="off",
                timeout_keep_alive=int(settings.http_keepalive),
                http=slow_clients(settings),
            )
            server = _Server(config)
            self.task = asyncio.get_running_loop().create_task(server.serve(sockets=[sock]))
            self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
            return self.url


def router(service: Service) -> APIRouter:
    r = APIRouter()
    listener: list[Loopback] = []  # this app's, made on first use

    @r.post("/v1/ui/links", status_code=201)
    async def link(request: Request) -> UiLink:
        """A one-time login link to the dashboard for the caller (``hutch ui``)."""
        token, expires = service.sessions.link()
        local = current().via == "unix"
        if local:
            if not listener:
                listener.append(Loopback(request.app, service))
            base = await listener[0].start()
        else:
            base = str(request.base_url).rstrip("/")
        return UiLink(url=f"{base}/ui/login?token={token}", expires_at=expires, loopback=local)

    return r
