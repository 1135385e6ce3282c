"""Opening the traffic of a sandbox that holds placeholder secrets (:mod:`.placeholders`).

A tunnel (CONNECT or SOCKS5) from such a sandbox is not relayed blind: its first bytes say
TLS or not. TLS: the proxy first makes its own TLS connection to the real server, checked
against the host's trust store (or ``egress_ca``), then answers the sandbox with a leaf of
the sandbox's own CA (Python's ``ssl`` over memory BIOs: the bytes already read are part of
the handshake). Either way what flows is read as HTTP/1.1 with ``h11`` (a maintained,
sans-I/O parser: framing, chunked bodies, keep-alive and 100-continue are its job), each
request rewritten by the vault before it is sent on. Anything that is not HTTP is refused:
a placeholder in it could not be checked (``--no-intercept HOST`` relays a host unopened).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from typing import Any, Protocol

import h11

from hutch.providers.local.placeholders import Echo, Outcome, Vault, scrub

CHUNK = 256 << 10
MAX_HEAD = 64 << 10
HOLD_BODY = 1 << 20  # the part of a body checked before the request is sent on
MAX_BODY = 16 << 20  # a body replaced in (--secret-body) is held whole: at most this
TLS_TIMEOUT = 30.0
FIRST_TIMEOUT = 30.0
log = logging.getLogger("hutch.egress")
Report = Callable[[str, dict[str, Any]], None]  # an event's type and data


class Stream(Protocol):
    async def read(self, n: int) -> bytes: ...
    def write(self, data: bytes) -> None: ...
    async def drain(self) -> None: ...


class Plain:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def read(self, n: int) -> bytes:
        return await self.reader.read(n)

    def write(self, data: bytes) -> None:
        self.writer.write(data)

    async def drain(self) -> None:
        await self.writer.drain()


class TLSServer:
    """The sandbox's side of an intercepted tunnel: TLS with ``ctx``, over the raw streams."""

    def __init__(self, raw: Plain, ctx: ssl.SSLContext, first: bytes) -> None:
        self.raw, self.incoming, self.outgoing = raw, ssl.MemoryBIO(), ssl.MemoryBIO()
        self.obj = ctx.wrap_bio(self.incoming, self.outgoing, server_side=True)
        self.incoming.write(first)

    async def _more(self) -> bool:
        self._flush()
        await self.raw.drain()
        data = await self.raw.read(CHUNK)
        if not data:
            self.incoming.write_eof()
        else:
            self.incoming.write(data)
        return bool(data)

    def _flush(self) -> None:
        if pending := self.outgoing.read():
            self.raw.write(pending)

    async def handshake(self) -> None:
        while True:
            try:
                self.obj.do_handshake()
                break
            except ssl.SSLWantReadError:
                if not await self._more():
                    raise ConnectionResetError("the client left during the TLS handshake") from None
        self._flush()

    async def read(self, n: int) -> bytes:
        while True:
            try:
                return self.obj.read(n)
            except ssl.SSLWantReadError:
                if not await self._more():
                    return b""
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return b""

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[self.obj.write(view) :]
        self._flush()

    async def drain(self) -> None:
        await self.raw.drain()


async def tunnel(
    vault: Vault,
    host: str,
    port: int,
    client: Plain,
    upstream: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    upstream_ctx: ssl.SSLContext,
    report: Report,
) -> None:
    """An allowed tunnel from a sandbox holding placeholders: opened, checked, relayed."""
    try:
        await _tunnel(vault, host, port, client, upstream, up_reader, upstream_ctx, report)
    except ssl.SSLError:  # the sandbox's TLS failed (it does not trust its CA?): the connection ends
        return


async def _tunnel(
    vault: Vault,
    host: str,
    port: int,
    client: Plain,
    upstream: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    upstream_ctx: ssl.SSLContext,
    report: Report,
) -> None:
    first = await asyncio.wait_for(client.read(CHUNK), FIRST_TIMEOUT)
    if not first:
        return
    if first[0] != 0x16:  # not a TLS handshake: plain HTTP through the tunnel
        await relay(vault, host, port, client, Plain(up_reader, upstream), report, first)
        return
    sandbox_side = TLSServer(client, vault.ca.context(host), first)
    try:
        await asyncio.wait_for(upstream.start_tls(upstream_ctx, server_hostname=host), TLS_TIMEOUT)
    except (ssl.SSLError, ssl.CertificateError, OSError, TimeoutError) as exc:
        reason = "upstream_certificate" if isinstance(exc, ssl.SSLCertVerificationError) else "upstream_tls"
        why = getattr(exc, "verify_message", None) or str(exc) or exc.__class__.__name__
        report("egress_denied", {"host": host, "port": port, "protocol": "https", "reason": reason, "rule": why})
        await sandbox_side.handshake()  # the sandbox is told why, inside its TLS
        _error(sandbox_side, 502, f"hutch: the certificate of {host}:{port} is not trusted: {why}", reason)
        await sandbox_side.drain()
        return
    await sandbox_side.handshake()
    await relay(vault, host, port, sandbox_side, Plain(up_reader, upstream), report, b"", scheme="https")


def _error(stream: Stream, status: int, text: str, reason: str) -> None:
    body = text.encode() + b"\n"
    head = {400: "Bad Request", 403: "Forbidden", 413: "Content Too Large", 502: "Bad Gateway"}[status]
    stream.write(
        f"HTTP/1.1 {status} {head}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {len(body)}\r\n"
        f"X-Hutch-Egress: denied; reason={reason}\r\nConnection: close\r\n\r\n".encode()
        + body
    )


async def _next(conn: h11.Connection, stream: Stream) -> Any:
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        conn.receive_data(await stream.read(CHUNK))


class _RefusedError(Exception):
    def __init__(self, status: int, text: str, reason: str) -> None:
        super().__init__(text)
        self.status, self.text, self.reason = status, text, reason


async def relay(
    vault: Vault,
    host: str,
    port: int,
    client: Stream,
    upstream: Stream,
    report: Report,
    first: bytes,
    *,
    scheme: str = "http",
    once: bool = False,
) -> None:
    """HTTP/1.1 between the sandbox and one server: every request rewritten by the vault
    (placeholders in, or the request refused), every response relayed."""
    sandbox = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
    server = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
    if first:  # (empty would mean the end of the stream to h11)
        sandbox.receive_data(first)
    base = {"host": host, "port": port, "protocol": scheme}
    reused = False  # a later request on the same connections
    while True:
        try:
            event = await _next(sandbox, client)
        except h11.RemoteProtocolError as exc:
            report("egress_denied", base | {"reason": "not_http", "rule": f"not HTTP/1.1 ({exc}): --no-intercept {host}"})
            _error(client, 400, f"hutch: this sandbox holds placeholder secrets: only HTTP is relayed to {host}", "not_http")
            await client.drain()
            return
        if not isinstance(event, h11.Request):
            return
        try:
            echo = await _request(vault, host, event, sandbox, server, client, upstream, base, report)
            if not await _response(event, sandbox, server, client, upstream, echo, reused):
                return
        except _RefusedError as refused:
            _error(client, refused.status, refused.text, refused.reason)
            await client.drain()
            return
        except h11.ProtocolError as exc:  # a request cut short, a response h11 cannot frame: the connection ends
            log.debug("intercepted connection to %s:%d ended: %s", host, port, exc)
            return
        if once or sandbox.our_state is not h11.DONE or server.our_state is not h11.DONE:
            return
        try:
            sandbox.start_next_cycle()
            server.start_next_cycle()
        except h11.LocalProtocolError:
            return
        reused = True


def _checked(outcome: Outcome, where: str, base: dict[str, Any], report: Report, echo: Echo | None = None) -> bytes:
    for name in outcome.blocked:
        report("secret_exfiltration_blocked", base | {"secret": name, "where": where})
    if outcome.blocked:
        names = ", ".join(outcome.blocked)
        raise _RefusedError(403, f"hutch: placeholder of {names} sent to {base['host']}, which it is not bound to", "secret_host")
    if outcome.missing:
        raise _RefusedError(
            502,
            f"hutch: the value of {', '.join(outcome.missing)} is not held any more (the daemon restarted): recreate the sandbox",
            "secret_unavailable",
        )
    for name in outcome.replaced:
        report("secret_substituted", base | {"secret": name, "where": where})
    if echo is not None:
        echo += outcome.echo
    return outcome.data


async def _request(
    vault: Vault,
    host: str,
    req: h11.Request,
    sandbox: h11.Connection,
    server: h11.Connection,
    client: Stream,
    upstream: Stream,
    base: dict[str, Any],
    report: Report,
) -> Echo:
    """Send the request on, rewritten; what its response is to be scrubbed of (what was put in)."""
    echo: Echo = []
    target = _checked(vault.rewrite(req.target, host), "target", base, report, echo)
    headers: list[tuple[bytes, bytes]] = []
    for name, value in req.headers.raw_items():  # as the sandbox spelled them
        if name.lower() == b"expect":  # answered here: the body is read before the server sees the request
            continue
        new = _checked(vault.rewrite_header(value, host), "header", base, report, echo)
        headers.append((name, new))
    if sandbox.they_are_waiting_for_100_continue:
        client.write(sandbox.send(h11.InformationalResponse(status_code=100, headers=[])) or b"")
        await client.drain()
    if vault.replaces_body(host) and _has_body(req):
        body = bytearray()
        while not isinstance(event := await _next(sandbox, client), h11.EndOfMessage):
            body += _data(event)
            if len(body) > MAX_BODY:
                raise _RefusedError(413, f"hutch: a body replaced in (--secret-body) is at most {MAX_BODY >> 20} MiB", "body_cap")
        new_body = _checked(vault.rewrite(bytes(body), host, body=True), "body", base, report, echo)
        headers = [(n, v) for n, v in headers if n.lower() not in (b"content-length", b"transfer-encoding")]
        headers.append((b"Content-Length", str(len(new_body)).encode()))
        upstream.write(server.send(_onward(req, target, headers)) or b"")
        upstream.write((server.send(h11.Data(data=new_body)) or b"") + (server.send(h11.EndOfMessage()) or b""))
        await upstream.drain()
        return echo
    # the first MiB of a body is checked before anything is sent: a refused request never arrives;
    # past it the body streams, each piece checked, and a placeholder there cuts the request short
    first, ended = bytearray(), False
    while len(first) <= HOLD_BODY and not (ended := isinstance(event := await _next(sandbox, client), h11.EndOfMessage)):
        first += _data(event)
    _checked(vault.rewrite(bytes(first), host, body=True), "body", base, report)
    upstream.write(server.send(_onward(req, target, headers)) or b"")
    keep = max(vault.longest - 1, 0)
    held = bytes(first)
    while not ended:
        if ended := isinstance(event := await _next(sandbox, client), h11.EndOfMessage):
            break
        data = held + _data(event)
        _checked(vault.rewrite(data, host, body=True), "body", base, report)
        cut = max(len(data) - keep, 0)  # what may still be the start of a placeholder waits for the next piece
        held = data[cut:]
        if cut:
            upstream.write(server.send(h11.Data(data=data[:cut])) or b"")
            await upstream.drain()
    upstream.write((server.send(h11.Data(data=held)) if held else b"") or b"")
    upstream.write(server.send(h11.EndOfMessage()) or b"")
    await upstream.drain()
    return echo


def _onward(req: h11.Request, target: bytes, headers: list[tuple[bytes, bytes]]) -> h11.Request:
    """The request the server gets: the sandbox's, rewritten, in its HTTP version."""
    return h11.Request(method=req.method, target=target, headers=headers, http_version=req.http_version)


def _data(event: Any) -> bytes:
    if not isinstance(event, h11.Data):
        raise h11.RemoteProtocolError("the request ended early")
    return bytes(event.data)


def _has_body(req: h11.Request) -> bool:
    return any(n in (b"content-length", b"transfer-encoding") and v != b"0" for n, v in req.headers)


async def _response(
    req: h11.Request,
    sandbox: h11.Connection,
    server: h11.Connection,
    client: Stream,
    upstream: Stream,
    echo: Echo,
    reused: bool,
) -> bool:
    """Relay one response (what was put in the request, echoed back, becomes what the sandbox
    had: ``echo``); False when the connection ends with it."""
    keep = max((len(sent) for sent, _ in echo), default=1) - 1
    held = b""
    while True:
        try:
            event = await _next(server, upstream)
        except h11.RemoteProtocolError:
            if sandbox.our_state is h11.SEND_RESPONSE:
                _error(client, 502, f"hutch: a bad HTTP response from {req.target.decode('latin-1')}", "bad_response")
                await client.drain()
            return False
        if isinstance(event, h11.ConnectionClosed):
            # a kept-alive connection the server had closed: the sandbox's side closes too, so its
            # client retries on a new one as it would with the server itself
            if sandbox.our_state is h11.SEND_RESPONSE and not reused:
                _error(client, 502, "hutch: the server closed the connection without a response", "no_response")
                await client.drain()
            return False
        if isinstance(event, h11.InformationalResponse):
            if event.status_code == 101:  # an upgrade: what follows is not HTTP (not checked)
                client.write(sandbox.send(event) or b"")
                await client.drain()
                await _raw(client, upstream, server.trailing_data[0], sandbox.trailing_data[0])
                return False
            client.write(sandbox.send(event) or b"")
        elif isinstance(event, h11.Response):
            headers = [(n, scrub(v, echo)) for n, v in event.headers.raw_items()]
            if echo and req.method != b"HEAD" and event.status_code not in (204, 304):
                headers = [(n, v) for n, v in headers if n.lower() != b"content-length"]  # the length may change: chunked
            client.write(sandbox.send(h11.Response(status_code=event.status_code, headers=headers, reason=event.reason)) or b"")
        elif isinstance(event, h11.Data):
            data = held + bytes(event.data)
            if echo:  # what may still be the start of an echo waits for the next piece
                data = scrub(data, echo)
                cut = len(data) - keep if len(data) > keep else 0
                held, data = data[cut:], data[:cut]
            if data:
                client.write(sandbox.send(h11.Data(data=data)) or b"")
                await client.drain()
        elif isinstance(event, h11.EndOfMessage):
            if held:
                client.write(sandbox.send(h11.Data(data=held)) or b"")
            client.write(sandbox.send(h11.EndOfMessage()) or b"")
            await client.drain()
            return True
        else:
            return False


async def _raw(client: Stream, upstream: Stream, from_server: bytes, from_client: bytes) -> None:
    """After a protocol switch: bytes both ways, unread."""
    if from_server:
        client.write(from_server)
    if from_client:
        upstream.write(from_client)

    async def pump(src: Stream, dst: Stream) -> None:
        while data := await src.read(CHUNK):
            dst.write(data)
            await dst.drain()

    await asyncio.gather(pump(client, upstream), pump(upstream, client), return_exceptions=True)
