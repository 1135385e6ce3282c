"""Client certificates made visible to the application.

uvicorn terminates TLS (asyncio's SSL transport) but does not pass the client's
certificate on to the ASGI application. These protocol classes do: when a connection is
made, they read the peer's certificate from the transport's ``ssl_object`` (the handshake
already verified it against ``--client-ca``) and put it in every request's scope as the
ASGI TLS extension, ``scope["extensions"]["tls"]["client_cert_chain"]`` (PEM), which
:mod:`hutch.server.auth` resolves to the key the certificate is bound to. The WebSocket
protocol a connection upgrades to gets the same.

The handshake asks for a certificate and verifies one when it comes (``CERT_OPTIONAL``):
a certificate from another CA fails the handshake; a connection without one reaches the
application, which refuses it with a JSON error when the gateway requires certificates
(``--require-client-cert``), or lets it use a bearer key otherwise.
"""

from __future__ import annotations

import ssl
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

ASGIApp = Any


def peer_pem(transport: Any) -> str | None:
    """The PEM of the client's certificate on a TLS ``transport`` (None: none, or plain TCP)."""
    obj = transport.get_extra_info("ssl_object") if transport is not None else None
    if obj is None:
        return None
    der = obj.getpeercert(binary_form=True)
    return ssl.DER_cert_to_PEM_cert(der) if der else None


def client_cert(scope: dict[str, Any]) -> str | None:
    """The client certificate's PEM in a request's scope, as the protocols below put it."""
    chain = scope.get("extensions", {}).get("tls", {}).get("client_cert_chain") or []
    return str(chain[0]) if chain else None


def _with_cert(app: ASGIApp, pem: str) -> ASGIApp:
    async def run(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            ext = dict(scope.get("extensions") or {})
            ext["tls"] = {**ext.get("tls", {}), "client_cert_chain": [pem]}
            scope = {**scope, "extensions": ext}
        await app(scope, receive, send)

    return run


class PeerCert:
    """Mixed into one of uvicorn's HTTP protocols: the client certificate in each scope."""

    app: ASGIApp

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        pem = peer_pem(transport)
        if pem is not None:
            self.app = _with_cert(self.app, pem)


class PeerCertHTTP(PeerCert, H11Protocol):
    """uvicorn's h11 HTTP/1.1 protocol, with the client certificate in each scope."""


class PeerCertWebSocket(WebSocketsSansIOProtocol):
    """uvicorn's WebSocket protocol (a connection upgraded from PeerCertHTTP), likewise."""

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        pem = peer_pem(transport)
        if pem is not None:
            self.app = _with_cert(self.app, pem)


def protocols(http: type[Any] = H11Protocol) -> dict[str, Any]:
    """uvicorn's ``http`` and ``ws`` options for a listener whose clients may present certificates
    (``http``: the HTTP protocol to extend, e.g. one with deadlines for slow clients)."""
    cls = http if issubclass(http, PeerCert) else type("PeerCert" + http.__name__, (PeerCert, http), {})
    return {"http": cls, "ws": PeerCertWebSocket}


def ssl_options(client_ca: str) -> dict[str, Any]:
    """uvicorn's options to ask for (and verify) client certificates from ``client_ca``."""
    return {"ssl_ca_certs": client_ca, "ssl_cert_reqs": ssl.CERT_OPTIONAL} if client_ca else {}
