"""HTTP routes of a cluster gateway: the cluster, its nodes, a drain (admin)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, StrictBool

from hutch.service import Service


class DrainRequest(BaseModel):
    drained: StrictBool = True
    move: StrictBool = False  # its sandboxes go to other nodes (by a copy of their workspace)


def router(service: Service) -> APIRouter:
    r = APIRouter()
    cluster = service.cluster

    @r.get("/v1/cluster")
    async def status() -> dict[str, Any]:
        return await cluster.status()

    @r.get("/v1/cluster/nodes")
    async def nodes() -> list[dict[str, Any]]:
        return await cluster.nodes()

    @r.post("/v1/cluster/nodes/{name}/drain")
    async def drain(name: str, req: DrainRequest) -> dict[str, Any]:
        return await cluster.drain(name, req.drained, req.move)

    return r
