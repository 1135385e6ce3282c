"""A TCP connection to a port inside a node's sandbox, through the node's own API: an exposed
port (``hutch expose``) of a cluster sandbox opens on the gateway exactly as on a local
daemon, and each connection to it is carried to the node.

The node's ``/v1/sandboxes/{ref}/ports/{port}/connect`` WebSocket (the same credentials and
scope as the attach WebSocket: whoever may run commands in a sandbox may reach its ports)
connects inside the sandbox and answers ``{"type": "connected"}``, or ``{"type": "error",
...}`` (nothing listens: ``unavailable``). Then binary messages carry the connection's
bytes both ways, and a ``{"type": "eof"}`` text message says one side has sent all it will
(a half-close: the other direction goes on). The socket goes when both sides have ended
or either side closes or fails.

On the gateway, :meth:`Tunnels.open` hands the exposure's front one end of a socket pair and
relays the other end to the node's WebSocket.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from hutch.errors import HutchError
from hutch.providers.cluster.http import NodeClient, sandbox

CHUNK = 64 << 10
EOF = json.dumps({"type": "eof"})
OPEN_TIMEOUT = 60.0  # the node connects inside its sandbox: quick, unless the node is in trouble

Recv = Callable[[], Awaitable["bytes | str | None"]]  # the next message (None: the channel closed)
Send = Callable[[Any], Awaitable[None]]


def _is_eof(text: str) -> bool:
    try:
        return bool(json.loads(text).get("type") == "eof")
    except (ValueError, AttributeError):
        return False


async def relay(sock: socket.socket, recv: Recv, send_bytes: Send, send_text: Send) -> None:
    """Bytes both ways between ``sock`` (non-blocking) and a message channel, until both sides
    ended their data, or the channel closed, or either side failed. Closing is the caller's."""
    loop = asyncio.get_running_loop()
    ended_in = False

    async def outward() -> None:  # the socket's bytes, then its end
        while data := await loop.sock_recv(sock, CHUNK):
            await send_bytes(data)
        await send_text(EOF)

    async def inward() -> None:  # the channel's bytes into the socket; returns when the channel closes
        nonlocal ended_in
        while (msg := await recv()) is not None:
            if isinstance(msg, bytes):
                await loop.sock_sendall(sock, msg)
            elif _is_eof(msg):
                ended_in = True
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_WR)
                if out_task.done():
                    return

    out_task = asyncio.create_task(outward())
    in_task = asyncio.create_task(inward())
    try:
        done, _ = await asyncio.wait({out_task, in_task}, return_when=asyncio.FIRST_COMPLETED)
        if in_task not in done and out_task.exception() is None and not ended_in:
            await asyncio.wait({in_task})  # this side has ended; the other may still send
    finally:
        for task in (out_task, in_task):
            task.cancel()
        await asyncio.gather(out_task, in_task, return_exceptions=True)


class Tunnels:
    """The gateway's connections to ports inside node sandboxes."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[None]] = set()

    async def open(self, client: NodeClient, ref: str, port: int) -> socket.socket:
        """A connection to 127.0.0.1:``port`` inside node sandbox ``ref`` (as the local
        provider's ``connect_port`` gives): one end of a socket pair, relayed to the node."""
        from websockets.exceptions import ConnectionClosed

        ws = await client.websocket(sandbox(ref) + f"/ports/{port}/connect")
        try:
            first = json.loads(await asyncio.wait_for(ws.recv(), OPEN_TIMEOUT))
        except (ConnectionClosed, OSError, TimeoutError, ValueError) as exc:
            await ws.close()
            raise client.unreachable(exc) from None
        if not isinstance(first, dict) or first.get("type") != "connected":
            await ws.close()
            raise HutchError.from_dict(first if isinstance(first, dict) else {"message": str(first)})
        mine, theirs = socket.socketpair()
        mine.setblocking(False)
        theirs.setblocking(False)
        task = asyncio.get_running_loop().create_task(self._carry(ws, theirs), name=f"hutch-tunnel-{client.name}-{port}")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return mine

    @staticmethod
    async def _carry(ws: Any, sock: socket.socket) -> None:
        from websockets.exceptions import ConnectionClosed

        async def recv() -> bytes | str | None:
            try:
                msg: bytes | str = await ws.recv()
            except ConnectionClosed:
                return None
            return msg

        try:
            await relay(sock, recv, ws.send, ws.send)
        except (ConnectionClosed, OSError):
            pass  # either side went away: both close
        finally:
            sock.close()
            with contextlib.suppress(Exception):
                await ws.close()

    async def close(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
