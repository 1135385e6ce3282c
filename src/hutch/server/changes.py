"""HTTP routes for what a sandbox changed (``hutch diff``, ``hutch ls --since``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query

from hutch.service import Service
from hutch.service.changes import MAX_TIME


def router(service: Service) -> APIRouter:
    r = APIRouter()

    @r.get("/v1/sandboxes/{ref}/diff")
    async def diff(ref: str, since: float | None = Query(None, ge=0, le=MAX_TIME), path: str | None = None) -> dict[str, Any]:
        return await service.changes.diff(ref, since, path)

    return r
