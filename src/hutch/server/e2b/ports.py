"""Requests for a sandbox's other ports (``E2b-Sandbox-Port`` other than envd's 49983, or a
host ``PORT-ID.DOMAIN``): relayed to ``127.0.0.1:PORT`` inside the sandbox, over a connection
its agent makes (the same path as ``hutch expose``, :mod:`hutch.server.proxy`), with the
sandbox's access token or traffic token instead of an exposure.

Port 49999 is ``e2b-code-interpreter``'s: when nothing listens there yet, hutch starts its
server (:mod:`.kernel_server`, sent on stdin to the sandbox's ``python3``; it needs ipykernel
in the image) as an E2B process tagged ``hutch-code-interpreter`` and waits until it listens.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from hutch.errors import HutchError, NotFoundError, UnavailableError
from hutch.provider import ports_provider
from hutch.server import proxy
from hutch.server.e2b.auth import port_of
from hutch.server.e2b.connect import ConnectError
from hutch.server.e2b.process import Processes
from hutch.service import Service

INTERPRETER_PORT = 49999
INTERPRETER_TAG = "hutch-code-interpreter"
START_TIMEOUT = 180.0  # python3 and the first kernel on a loaded machine
BOOT = "import sys; exec(compile(sys.stdin.read(), 'hutch-code-interpreter', 'exec'))"
IMAGE_HINT = "use a template whose image has python3 with ipykernel (docs/e2b.md, the code interpreter)"
DROP = frozenset({b"x-access-token", b"e2b-traffic-access-token", b"e2b-sandbox-id", b"e2b-sandbox-port", b"x-api-key"})
Scope = dict[str, Any]


async def _answer(send: Any, status: int, message: str) -> None:
    body = json.dumps({"code": status, "message": message}).encode()
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body, "more_body": False})


class Relay:
    """The ASGI layer in front of the envd routes that sends other ports' requests on."""

    def __init__(self, app: Any, service: Service, procs: Processes) -> None:
        self.app, self.svc, self.procs = app, service, procs
        self.starting: dict[str, asyncio.Lock] = {}

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        path: str = scope.get("path", "")
        port = port_of(scope) if scope["type"] == "http" and path.startswith("/e2b/envd/") else None
        if port is None:
            await self.app(scope, receive, send)
            return
        if not 0 < port < 65536:
            await _answer(send, 400, "E2b-Sandbox-Port is a port number (1-65535)")
            return
        sandbox_id: str = scope.get("e2b.sandbox", "")
        try:
            sock = await self.open(sandbox_id, port)
        except HutchError as exc:
            status = 404 if isinstance(exc, NotFoundError) else 503 if exc.status == 500 else exc.status
            await _answer(send, status, exc.message + (f" (hint: {exc.hint})" if exc.hint else ""))
            return
        headers = [(bytes(k).lower(), bytes(v)) for k, v in scope.get("headers", ()) if bytes(k).lower() not in DROP]
        inner = path[len("/e2b/envd") :]
        try:
            await proxy.http(scope, receive, send, sock, inner, scope.get("query_string", b""), headers)
        except proxy.UpstreamError as exc:
            await _answer(send, 502, f"port {port} of sandbox {sandbox_id}: {exc}")

    async def open(self, sandbox_id: str, port: int) -> socket.socket:
        rec = self.svc.live(sandbox_id)
        connect = ports_provider(self.svc.provider(rec.provider)).connect_port
        try:
            return await connect(rec, port)
        except UnavailableError:
            if port != INTERPRETER_PORT:
                raise
        lock = self.starting.setdefault(sandbox_id, asyncio.Lock())
        async with lock:  # one server per sandbox, however many first calls arrive at once
            with contextlib.suppress(UnavailableError):
                return await connect(rec, port)
            return await self.start_interpreter(sandbox_id, connect)

    async def start_interpreter(self, sandbox_id: str, connect: Any) -> socket.socket:
        rec = self.svc.live(sandbox_id)
        source = (Path(__file__).with_name("kernel_server.py")).read_bytes()
        try:
            messages = await self.procs.start(
                sandbox_id,
                {"process": {"cmd": "python3", "args": ["-c", BOOT]}, "stdin": True, "tag": INTERPRETER_TAG},
                None,
            )
        except ConnectError as exc:
            raise UnavailableError(f"cannot start the code interpreter: {exc.message}", hint=IMAGE_HINT) from None
        first = await anext(messages)
        pid = int(first["event"]["start"]["pid"])
        said: list[bytes] = []
        watch = asyncio.get_running_loop().create_task(_collect(messages, said))
        selector = {"process": {"pid": pid}}
        try:
            await self.procs.send_input(sandbox_id, selector | {"input": {"stdin": base64.b64encode(source).decode()}})
            await self.procs.close_stdin(sandbox_id, selector)
        except ConnectError:
            pass  # it ended at once: said tells why
        loop = asyncio.get_running_loop()
        deadline = loop.time() + START_TIMEOUT
        while True:
            with contextlib.suppress(UnavailableError):
                sock: socket.socket = await connect(rec, INTERPRETER_PORT)
                return sock
            if watch.done():
                tail = b"".join(said).decode(errors="replace").strip().splitlines()[-3:]
                raise UnavailableError(
                    "the code interpreter's server did not start in this sandbox: " + (" | ".join(tail) or "it exited"),
                    hint=IMAGE_HINT,
                )
            if loop.time() > deadline:
                raise UnavailableError(f"the code interpreter did not listen within {START_TIMEOUT:g} s", hint=IMAGE_HINT)
            await asyncio.sleep(0.2)


async def _collect(messages: AsyncIterator[dict[str, Any]], said: list[bytes], limit: int = 16 << 10) -> None:
    """What the server prints (kept up to ``limit`` bytes: why it failed, when it does)."""
    with contextlib.suppress(ConnectError, HutchError):
        async for message in messages:
            data = message.get("event", {}).get("data", {})
            for value in data.values():
                if sum(len(s) for s in said) < limit:
                    said.append(base64.b64decode(value))
