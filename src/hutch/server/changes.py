"""HTTP routes for what a sandbox changed (``hutch diff``, ``hutch ls --since``) and images made from it
(``hutch image commit``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from hutch.service import Service
from hutch.service.changes import MAX_TIME


class CommitChanges(BaseModel):
    """What the new image's config changes: ``env`` entries (``K=V``, replacing the image's of the
    same key), ``workdir``, ``user``, ``cmd``, ``entrypoint``."""

    env: list[str] = Field(default_factory=list, max_length=1000)
    workdir: str | None = Field(None, max_length=4096)
    user: str | None = Field(None, max_length=256)
    cmd: list[str] | None = Field(None, max_length=1000)
    entrypoint: list[str] | None = Field(None, max_length=1000)


class CommitRequest(BaseModel):
    sandbox: str
    name: str
    pause: bool = True
    changes: CommitChanges | None = None
    comment: str | None = Field(None, max_length=4096)  # the history entry (default: the command)


def router(service: Service) -> APIRouter:
    r = APIRouter()

    @r.get("/v1/sandboxes/{ref}/diff")
    async def diff(ref: str, since: float | None = Query(None, ge=0, le=MAX_TIME), path: str | None = None) -> dict[str, Any]:
        return await service.changes.diff(ref, since, path)

    @r.post("/v1/images/commit", status_code=201)
    async def commit(req: CommitRequest) -> dict[str, Any]:
        """The sandbox's writable root as a new layer on its image, stored as the image ``name``
        (the sandbox is frozen while its root is read unless ``pause`` is false)."""
        changes = req.changes.model_dump(exclude_none=True) if req.changes else None
        return await service.templates.commit(req.sandbox, req.name, pause=req.pause, changes=changes, comment=req.comment)

    return r
