"""HTTP routes for what a sandbox changed (``hutch diff``, ``hutch ls --since``) and images made from it
(``hutch image commit``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query
from pydantic import BaseModel

from hutch.service import Service
from hutch.service.changes import MAX_TIME


class CommitRequest(BaseModel):
    sandbox: str
    name: str
    pause: bool = True


def router(service: Service) -> APIRouter:
    r = APIRouter()

    @r.get("/v1/sandboxes/{ref}/diff")
    async def diff(ref: str, since: float | None = Query(None, ge=0, le=MAX_TIME), path: str | None = None) -> dict[str, Any]:
        return await service.changes.diff(ref, since, path)

    @r.post("/v1/images/commit", status_code=201)
    async def commit(req: CommitRequest) -> dict[str, Any]:
        """The sandbox's writable root as a new layer on its image, stored as the image ``name``
        (the sandbox is frozen while its root is read unless ``pause`` is false)."""
        return await service.templates.commit(req.sandbox, req.name, pause=req.pause)

    return r
