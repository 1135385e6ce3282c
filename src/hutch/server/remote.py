"""``hutch serve --listen``: the same app on TCP, behind API keys and/or a bearer token (and
TLS off loopback), with deadlines for a slow client.

The unix socket stays owner-only and unauthenticated; only the TCP listener checks the
token or key (:mod:`hutch.server.auth`) on every HTTP request and WebSocket handshake.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from hutch.config import Settings
from hutch.errors import InvalidError
from hutch.pki import GatewayFiles
from hutch.tokens import is_loopback, read_token


@dataclass(frozen=True)
class Listener:
    host: str
    port: int
    token: str | None = field(default=None, repr=False)  # --token-file: an admin; None: API keys only
    tls_cert: str = ""
    tls_key: str = ""
    client_ca: str = ""  # client certificates from this CA are asked for and verified
    require_cert: bool = False  # requests without one are refused

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls_cert else 'http'}://{host}:{self.port}"


def parse_listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise InvalidError(f"--listen {value!r} is not HOST:PORT", hint="e.g. --listen 127.0.0.1:8765 (port 0 picks a free one)")
    return host, int(port)


def listener(settings: Settings) -> Listener | None:
    """The TCP listener ``settings`` asks for, checked before anything starts (None: unix socket only)."""
    if not settings.listen:
        return None
    host, port = parse_listen(settings.listen)
    tls_cert, tls_key, client_ca = gateway_tls(settings)
    if bool(tls_cert) != bool(tls_key):
        raise InvalidError("--tls-cert and --tls-key go together", hint="pass both files (PEM), or neither on loopback")
    if not tls_cert and not is_loopback(host):
        raise InvalidError(
            f"refusing to listen on {host} without TLS: the token and all traffic would travel in clear",
            hint="pass --tls-cert and --tls-key, or listen on 127.0.0.1",
        )
    for what, path in (("--tls-cert", tls_cert), ("--tls-key", tls_key), ("--client-ca", client_ca)):
        if path and not os.path.isfile(path):
            raise InvalidError(f"{what} {path}: no such file", hint="point it at a PEM file")
    if client_ca and not tls_cert:
        raise InvalidError("--client-ca needs TLS", hint="pass --tls-cert and --tls-key, or make them: hutch gateway init")
    if settings.require_client_cert and not client_ca:
        raise InvalidError(
            "--require-client-cert needs a CA to verify client certificates with",
            hint="make the gateway's with hutch gateway init, or pass --client-ca PEM",
        )
    token = read_token(settings.api_token_file, "--token-file") if settings.api_token_file else None
    return Listener(host, port, token, tls_cert, tls_key, client_ca, settings.require_client_cert)


def gateway_tls(settings: Settings) -> tuple[str, str, str]:
    """The listener's certificate, key and client CA: as given, or else those of
    ``hutch gateway init`` when it was run for this state directory."""
    files = GatewayFiles.of(settings.home)
    if not settings.tls_cert and not settings.tls_key and files.server_cert.is_file() and files.server_key.is_file():
        return str(files.server_cert), str(files.server_key), settings.client_ca or str(files.ca_cert)
    return settings.tls_cert, settings.tls_key, settings.client_ca


def bind(lst: Listener) -> socket.socket:
    family = socket.AF_INET6 if ":" in lst.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # the proto lets asyncio set TCP_NODELAY
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((lst.host, lst.port))
    except OSError as exc:
        sock.close()
        raise InvalidError(f"cannot listen on {lst.host}:{lst.port}: {exc.strerror}", hint="pick another --listen") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


class Pace:
    """What a request's body is held to, shared by the protocol and the app (``scope["hutch.pace"]``):
    a route whose body is the input of a command as it is typed (``hutch run`` with streamed
    input) sets ``interactive`` once the request is authenticated."""

    __slots__ = ("interactive",)

    def __init__(self) -> None:
        self.interactive = False


def interactive(scope: MutableMapping[str, Any]) -> None:
    """Tell the listener that this request's body comes at a person's pace."""
    pace = scope.get("hutch.pace")
    if isinstance(pace, Pace):
        pace.interactive = True


BUSY = (
    b'{"error": {"kind": "unavailable", "message": "this gateway has as many connections open as it takes (max_connections)",'
    b' "hint": "retry in a moment, or ask its admin to raise max_connections"}}'
)


class SlowClients(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol (on httptools, the C parser the unix socket uses too: h11 cost
    about a third of the listener's CPU per request) with deadlines for a slow client (slowloris) and a cap on
    open connections. uvicorn alone waits for a head or a body for ever.

    - A request's head (its line and headers) must arrive within ``header_timeout`` seconds of
      its first byte (or of the connection).
    - Its body must keep a minimum rate: it is cut off ``body_timeout`` seconds after its head
      plus one second for every ``body_min_rate`` bytes received (the rule of Apache's
      mod_reqtimeout), so a byte a minute holds a connection no longer than ``body_timeout``.
      Time while the daemon itself does not read (its buffer is full) is not counted. A body
      the route marked interactive (:func:`interactive`: a command's input as a person types
      it) has no deadline here: its run's own timeouts end it.
    - Past ``max_connections`` open connections, a new one is answered 503 ``unavailable``
      (JSON, ``Retry-After``) and closed.
    """

    header_timeout = 10.0
    body_timeout = 60.0
    body_min_rate = 1024.0
    max_connections = 1000

    def connection_made(self, transport: Any) -> None:
        self._deadline: asyncio.TimerHandle | None = None
        self._body: tuple[float, int, Pace] | None = None  # (when its deadline started, bytes since, its pace)
        self._upgraded = False
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            head = (
                "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n"
                f"connection: close\r\ncontent-length: {len(BUSY)}\r\n\r\n"
            )
            transport.write(head.encode() + BUSY)
            transport.close()
            return
        self._arm(self.header_timeout)

    def _arm(self, seconds: float) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = self.loop.call_later(max(0.0, seconds), self._too_slow)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _body_left(self) -> float:
        """Seconds the body in progress has left at its minimum rate."""
        assert self._body is not None
        began, received, _ = self._body
        return began + self.body_timeout + received / self.body_min_rate - self.loop.time()

    def _too_slow(self) -> None:
        self._deadline = None
        if self._body is not None and (self.flow.read_paused or self._body[2].interactive):
            self._body = (self.loop.time(), 0, self._body[2])  # the daemon's own wait, or a person's: the clock starts again
            self._arm(self.body_timeout)
            return
        if not self.transport.is_closing():
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        fresh = self.cycle is None or self.cycle.response_complete
        super().data_received(data)
        if self._upgraded:  # a WebSocket's now (handle_websocket_upgrade)
            return
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:  # a request is in (its head was complete)
            if fresh:  # its head came just now: its body's clock starts
                pace = Pace()
                self.scope["hutch.pace"] = pace  # type: ignore[typeddict-unknown-key]  # before its app runs (a task that starts after this returns)
                self._body = (self.loop.time(), 0, pace)
            elif self._body is not None:
                began, received, pace = self._body
                self._body = (began, received + len(data), pace)
            if cycle.more_body and self._body is not None:
                self._arm(self._body_left())
            else:
                self._body = None
                self._disarm()
        elif self._deadline is None:  # the start of the next request's head
            self._body = None
            self._arm(self.header_timeout)

    def handle_websocket_upgrade(self, *args: Any) -> None:
        """The head of a WebSocket handshake is complete and the connection is the WebSocket
        protocol's from here on: no deadline of this protocol may close it later."""
        self._upgraded = True
        self._disarm()
        self._body = None
        super().handle_websocket_upgrade(*args)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


def slow_clients(settings: Settings) -> type[SlowClients]:
    """The protocol class with the daemon's deadlines and cap."""
    fields = {
        "header_timeout": settings.header_timeout,
        "body_timeout": settings.body_timeout,
        "body_min_rate": float(settings.body_min_rate),
        "max_connections": settings.max_connections,
    }
    return type("SlowClientsProtocol", (SlowClients,), fields)
