"""HTTP routes for the gateway's client certificates (``/v1/gateway/certificates``, admin
scope), a sandbox's exposed ports (``/v1/sandboxes/{ref}/ports``) and the WebSocket that
carries one connection to a port inside a sandbox (``/v1/sandboxes/{ref}/ports/{port}/connect``:
how a cluster's gateway reaches its nodes' sandboxes, :mod:`hutch.providers.cluster.tunnel`)."""

from __future__ import annotations

import contextlib
from typing import Any, Literal

from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from pydantic import BaseModel, Field, StrictBool, StrictInt

from hutch.errors import HutchError
from hutch.providers.cluster.tunnel import relay
from hutch.server.errors import error_body
from hutch.service import Service
from hutch.units import parse_duration


class CertificateRequest(BaseModel):
    name: str = Field(min_length=1, max_length=64)
    key: str | None = Field(default=None, max_length=200)
    scopes: list[Literal["read", "write", "approve", "metrics", "admin"]] = Field(default_factory=list, max_length=10)
    ttl: float | str | None = None
    csr: str | None = Field(default=None, max_length=64 << 10)
    url: str | None = Field(default=None, max_length=2000)


class ExposeRequest(BaseModel):
    port: StrictInt = Field(ge=1, le=65535)
    public: StrictBool = False


def router(service: Service) -> APIRouter:
    r = APIRouter()
    certs = service.certificates
    ports = service.ports

    @r.post("/v1/gateway/certificates", status_code=201)
    async def issue_certificate(req: CertificateRequest) -> dict[str, Any]:
        ttl = None if req.ttl is None else parse_duration(req.ttl)
        return certs.issue(req.name, key=req.key, ttl=ttl, csr=req.csr, url=req.url, scopes=list(req.scopes))

    @r.get("/v1/gateway/certificates")
    async def list_certificates() -> list[dict[str, Any]]:
        return certs.list()

    @r.delete("/v1/gateway/certificates/{ref}")
    async def revoke_certificate(ref: str) -> list[dict[str, Any]]:
        return certs.revoke(ref)

    @r.post("/v1/sandboxes/{ref}/ports", status_code=201)
    async def expose(ref: str, req: ExposeRequest) -> dict[str, Any]:
        return await ports.expose(ref, req.port, req.public)

    @r.get("/v1/sandboxes/{ref}/ports")
    async def list_ports(ref: str) -> list[dict[str, Any]]:
        return ports.list(ref)

    @r.delete("/v1/sandboxes/{ref}/ports/{port}")
    async def unexpose(ref: str, port: int) -> dict[str, Any]:
        return await ports.unexpose(ref, port)

    @r.websocket("/v1/sandboxes/{ref}/ports/{port}/connect")
    async def connect(ws: WebSocket, ref: str, port: int) -> None:
        await ws.accept()
        try:
            sock = await ports.open(ref, port)
        except HutchError as exc:
            await ws.send_json({"type": "error"} | error_body(exc)[1])
            await ws.close()
            return

        async def recv() -> bytes | str | None:
            msg = await ws.receive()
            if msg["type"] == "websocket.disconnect":
                return None
            return msg["bytes"] if msg.get("bytes") is not None else str(msg.get("text") or "")

        try:
            await ws.send_json({"type": "connected"})
            await relay(sock, recv, ws.send_bytes, ws.send_text)
        except (WebSocketDisconnect, OSError, RuntimeError):
            pass  # either side went away: both close
        finally:
            sock.close()
            with contextlib.suppress(RuntimeError, WebSocketDisconnect):
                await ws.close()

    return r
