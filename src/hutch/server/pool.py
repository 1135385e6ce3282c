"""HTTP routes of the warm pool: its status, a shape's size, a drain."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, StrictInt

from hutch.service import Service


class PoolSetRequest(BaseModel):
    image: str | None = None  # None: the host's /usr
    size: StrictInt  # bounded by the Service (0 .. 1000)


class PoolDrainRequest(BaseModel):
    image: str | None = None
    all: bool = False


def router(service: Service) -> APIRouter:
    r = APIRouter()
    pool = service.pool

    @r.get("/v1/pool")
    async def status() -> dict[str, Any]:
        return await pool.status()

    @r.post("/v1/pool")
    async def set_size(req: PoolSetRequest) -> dict[str, Any]:
        return await pool.set(req.image, req.size)

    @r.post("/v1/pool/drain")
    async def drain(req: PoolDrainRequest) -> dict[str, Any]:
        return await pool.drain(req.image, all_shapes=req.all)

    return r
