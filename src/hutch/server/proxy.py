"""One request relayed to a server inside a sandbox, over a connection the sandbox's agent made.

HTTP: the request goes out with h11 (its body streamed as it arrives, the hop-by-hop
headers dropped, ``Connection: close``: one connection into the sandbox per request) and
the answer comes back streamed the same way. WebSocket: the handshake is repeated inside
with the websockets client (path, query, subprotocols, the headers that are not the
handshake's own), then messages go both ways until either side closes.

Under a path prefix (the gateway's ``/p/SANDBOX/PORT/``) the answer's ``Location`` and
``Content-Location`` are rewritten to stay under it: a path (``/login``) gets the prefix, and a
URL of the server itself (a loopback name, or the Host the request carried) becomes the
prefixed path; a URL elsewhere is left as it is.

Bounded: the answer's head must come within HEAD_TIMEOUT; a head over MAX_HEAD bytes is
refused; the body is never buffered beyond a chunk (uvicorn's flow control applies).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import h11

Scope = dict[str, Any]
HEAD_TIMEOUT = 300.0
MAX_HEAD = 64 << 10
CHUNK = 64 << 10
HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
WS_OWN = HOP | {
    b"host",
    b"sec-websocket-key",
    b"sec-websocket-version",
    b"sec-websocket-extensions",
    b"sec-websocket-protocol",
    b"content-length",
}


LOCATIONS = (b"location", b"content-location")
LOOPBACK = ("localhost", "127.0.0.1", "::1", "0.0.0.0")


def relocate(value: bytes, prefix: str, host: bytes | None) -> bytes:
    """A ``Location`` of the server inside, as the client must follow it under ``prefix``."""
    if prefix == "/":
        return value
    text = value.decode("latin-1")
    if text.startswith(prefix):
        return value  # the app knows its prefix
    if text.startswith("/") and not text.startswith("//"):
        return (prefix.rstrip("/") + text).encode("latin-1")
    try:
        url = urlsplit(text)
        ours = url.scheme in ("http", "https") and (
            (url.hostname or "") in LOOPBACK or (host is not None and url.netloc.lower() == host.decode("latin-1").lower())
        )
    except ValueError:
        return value
    if not ours or url.path.startswith(prefix):
        return value
    return urlunsplit(("", "", prefix.rstrip("/") + (url.path or "/"), url.query, url.fragment)).encode("latin-1")


class UpstreamError(Exception):
    """The server inside broke HTTP (or went away) before its answer began."""


def _target(path: str, query: bytes) -> bytes:
    return path.encode("latin-1", "replace") + (b"?" + query if query else b"")


async def http(
    scope: Scope,
    receive: Any,
    send: Any,
    sock: socket.socket,
    path: str,
    query: bytes,
    headers: list[tuple[bytes, bytes]],
    prefix: str = "/",
) -> None:
    """Relay one HTTP request to ``sock`` (connected inside the sandbox) and its answer back
    (``prefix``: the path the client's URL has before ``path``)."""
    reader, writer = await asyncio.open_connection(sock=sock, limit=CHUNK)
    conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
    out = [(k, v) for k, v in headers if k not in HOP]
    chunked = any(k == b"transfer-encoding" for k, _ in headers)
    if chunked:
        out = [(k, v) for k, v in out if k != b"content-length"] + [(b"transfer-encoding", b"chunked")]
    out.append((b"connection", b"close"))
    started = False
    try:
        writer.write(conn.send(h11.Request(method=scope["method"], target=_target(path, query), headers=out)))
        pump = asyncio.create_task(_body(receive, writer, conn))
        try:
            host = next((v for k, v in headers if k == b"host"), None)
            started = await _answer(send, reader, conn, scope["method"], prefix, host)
        finally:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pump
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
    if not started:
        raise UpstreamError("the server closed the connection without an answer")


async def _body(receive: Any, writer: asyncio.StreamWriter, conn: h11.Connection) -> None:
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            writer.close()
            return
        data = msg.get("body", b"")
        if data:
            writer.write(conn.send(h11.Data(data=data)))
            await writer.drain()
        if not msg.get("more_body", False):
            writer.write(conn.send(h11.EndOfMessage()))
            await writer.drain()
            return


async def _answer(
    send: Any, reader: asyncio.StreamReader, conn: h11.Connection, method: str, prefix: str, host: bytes | None
) -> bool:
    """The answer relayed; False when none began (the caller answers 502)."""
    started = False
    deadline = asyncio.get_running_loop().time() + HEAD_TIMEOUT
    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError as exc:
            if started:
                return True  # cut short: the client sees its connection end
            raise UpstreamError(f"the server answered something that is not HTTP/1.1 ({exc})") from None
        if event is h11.NEED_DATA:
            try:
                if started:
                    data = await reader.read(CHUNK)
                else:
                    async with asyncio.timeout_at(deadline):
                        data = await reader.read(CHUNK)
            except TimeoutError:
                raise UpstreamError(f"no answer within {HEAD_TIMEOUT:g}s") from None
            except OSError:
                data = b""
            conn.receive_data(data)
            continue
        if isinstance(event, h11.InformationalResponse):
            continue
        if isinstance(event, h11.Response):
            headers = [(k, relocate(v, prefix, host) if k in LOCATIONS else v) for k, v in event.headers if k not in HOP]
            await send({"type": "http.response.start", "status": event.status_code, "headers": headers})
            started = True
            if method == "HEAD":
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                return True
        elif isinstance(event, h11.Data):
            await send({"type": "http.response.body", "body": bytes(event.data), "more_body": True})
        elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
            if not started:
                return False
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return True


async def websocket(
    scope: Scope, receive: Any, send: Any, sock: socket.socket, path: str, query: bytes, headers: list[tuple[bytes, bytes]]
) -> None:
    """Relay a WebSocket: the handshake inside, then messages both ways."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed, InvalidHandshake

    first = await receive()
    if first["type"] != "websocket.connect":
        sock.close()
        return
    extra = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in headers if k not in WS_OWN]
    host = next((v.decode("latin-1") for k, v in headers if k == b"host"), "localhost")
    uri = "ws://" + host + _target(path, query).decode("latin-1")
    protocols = [p for p in scope.get("subprotocols", []) if p]
    try:
        upstream = await connect(
            uri,
            sock=sock,
            additional_headers=extra,
            subprotocols=protocols or None,
            max_size=None,
            open_timeout=30,
            compression=None,
        )
    except (InvalidHandshake, OSError, TimeoutError) as exc:
        sock.close()
        await _refuse_ws(scope, send, f"the server inside refused the WebSocket: {exc}")
        return
    await send({"type": "websocket.accept", "subprotocol": upstream.subprotocol})

    async def inward() -> None:
        while True:
            msg = await receive()
            if msg["type"] == "websocket.disconnect":
                await upstream.close(code=msg.get("code", 1000))
                return
            if msg.get("bytes") is not None:
                await upstream.send(msg["bytes"])
            elif msg.get("text") is not None:
                await upstream.send(msg["text"])

    async def outward() -> None:
        try:
            async for data in upstream:
                key = "text" if isinstance(data, str) else "bytes"
                await send({"type": "websocket.send", key: data})
        except ConnectionClosed:
            pass
        code = upstream.close_code or 1000
        with contextlib.suppress(Exception):
            await send({"type": "websocket.close", "code": code if code != 1005 else 1000})

    tasks = [asyncio.create_task(inward()), asyncio.create_task(outward())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(BaseException):
                await t
        await upstream.close()


async def _refuse_ws(scope: Scope, send: Any, message: str) -> None:
    if "websocket.http.response" in scope.get("extensions", {}):
        body = message.encode()
        await send(
            {"type": "websocket.http.response.start", "status": 502, "headers": [(b"content-type", b"text/plain; charset=utf-8")]}
        )
        await send({"type": "websocket.http.response.body", "body": body})
    else:
        await send({"type": "websocket.close", "code": 1011})
