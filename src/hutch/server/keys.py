"""HTTP routes for API keys (``/v1/keys``, admin scope) and ``/metrics`` (metrics scope).

Scopes are checked by :mod:`hutch.server.auth` before a route runs."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Response
from pydantic import BaseModel, Field, StrictInt, field_validator

from hutch.models import NetworkPolicy
from hutch.service import Service
from hutch.service.metrics import CONTENT_TYPE
from hutch.units import parse_duration, parse_size


class KeyQuotas(BaseModel):
    sandboxes: StrictInt | None = Field(default=None, ge=1, le=100_000)
    memory: StrictInt | str | None = None
    runs_per_minute: StrictInt | None = Field(default=None, ge=1, le=1_000_000)
    rps: float | None = Field(default=None, gt=0, le=100_000)

    @field_validator("memory")
    @classmethod
    def _memory(cls, v: int | str | None) -> int | None:
        return None if v is None else parse_size(v)

    def values(self) -> dict[str, Any]:
        return {k: (float(v) if k == "rps" else v) for k, v in self.model_dump().items() if v is not None}


class KeyRequest(BaseModel):
    name: str = Field(min_length=1, max_length=63)
    ttl: float | str | None = None
    scopes: list[Literal["read", "write", "approve", "metrics", "admin"]] = Field(default_factory=list, max_length=10)
    admin: bool = False
    quotas: KeyQuotas = Field(default_factory=KeyQuotas)
    network_default: NetworkPolicy | None = None
    network_ceiling: NetworkPolicy | None = None


class RotateRequest(BaseModel):
    ttl: float | str | None = None


def _ttl(value: float | str | None) -> float | None:
    return None if value is None else parse_duration(value)


def _policy(p: NetworkPolicy | None) -> dict[str, Any] | None:
    return p.check().model_dump(mode="json") if p is not None else None


def router(service: Service) -> APIRouter:
    r = APIRouter()
    keys = service.keys

    @r.post("/v1/keys", status_code=201)
    async def create_key(req: KeyRequest) -> dict[str, Any]:
        return keys.create(
            req.name,
            ttl=_ttl(req.ttl),
            scopes=[str(s) for s in req.scopes],
            admin=req.admin,
            quotas=req.quotas.values(),
            network_default=_policy(req.network_default),
            network_ceiling=_policy(req.network_ceiling),
        )

    @r.get("/v1/keys")
    async def list_keys() -> list[dict[str, Any]]:
        return keys.list()

    @r.get("/v1/keys/{ref}")
    async def get_key(ref: str) -> dict[str, Any]:
        return keys.get(ref)

    @r.delete("/v1/keys/{ref}")
    async def revoke_key(ref: str) -> dict[str, Any]:
        return keys.revoke(ref)

    @r.post("/v1/keys/{ref}/rotate")
    async def rotate_key(ref: str, req: RotateRequest) -> dict[str, Any]:
        return keys.rotate(ref, _ttl(req.ttl))

    @r.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        return Response(service.metrics.render(), media_type=CONTENT_TYPE)

    return r
