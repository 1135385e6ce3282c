"""HTTP routes for the gateway's client certificates (``/v1/gateway/certificates``, admin
scope) and a sandbox's exposed ports (``/v1/sandboxes/{ref}/ports``)."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter
from pydantic import BaseModel, Field, StrictBool, StrictInt

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

    return r
