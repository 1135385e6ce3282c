"""``hutch serve --listen``: the same app on TCP, behind API keys and/or a bearer token (and
TLS off loopback), with deadlines for a slow client.

The unix socket stays owner-only and unauthenticated; only the TCP listener checks the
token or key (:mod:`hutch.server.auth`) on every HTTP request and WebSocket handshake.
"""

from __future__ import annotations

import asyncio
import os
import socket
from dataclasses import dataclass, field
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

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


class SlowClients(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with deadlines for a slow client (slowloris): a request's
    head (its line and headers) must arrive within ``header_timeout`` seconds of its first
    byte (or of the connection), and a body that stops arriving for ``body_timeout`` seconds
    ends the connection. uvicorn alone waits for either for ever."""

    header_timeout = 10.0
    body_timeout = 60.0

    def connection_made(self, transport: Any) -> None:
        self._deadline: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        self._arm(self.header_timeout)

    def _arm(self, seconds: float) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = self.loop.call_later(seconds, self._too_slow)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _too_slow(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:  # a request is in (its head was complete)
            if cycle.more_body:
                self._arm(self.body_timeout)  # more of its body must keep coming
            else:
                self._disarm()
        elif self._deadline is None:  # the start of the next request's head
            self._arm(self.header_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


def slow_clients(settings: Settings) -> type[SlowClients]:
    """The protocol class with the daemon's deadlines."""
    return type(
        "SlowClientsProtocol", (SlowClients,), {"header_timeout": settings.header_timeout, "body_timeout": settings.body_timeout}
    )
