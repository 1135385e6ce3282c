"""HTTP routes for workspaces: kept sandboxes (auto and tenant mode), push/pull, snapshots, fork, tenants.

A push is one request: ``<length>\\n<manifest JSON><tar>`` (``application/x-hutch-push``),
spooled to a file under the state dir, so the whole tree travels as one tar stream.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse
from pydantic import BaseModel, Field, StrictInt
from starlette.background import BackgroundTask

from hutch.errors import InvalidError
from hutch.models import SandboxRecord, SandboxSpec, SnapshotRecord
from hutch.service import Service

MAX_MANIFEST = 64 << 20
MAX_PUSH = 64 << 30  # a push is spooled to disk, never held in memory


class SnapshotRequest(BaseModel):
    name: str


class RestoreRequest(BaseModel):
    name: str | None = None


class ForkRequest(BaseModel):
    count: StrictInt = Field(default=1)  # strict: true is not a count
    name_prefix: str | None = None


async def spool(chunks: AsyncIterator[bytes], dest: Path) -> dict[str, Any]:
    """Read a push body: the manifest into memory, the tar into ``dest`` (hutch run's request
    carries one too)."""
    head = b""
    manifest: dict[str, Any] | None = None
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        async for chunk in chunks:
            if manifest is None:
                head += chunk
                if b"\n" not in head[:20]:
                    if len(head) > 20:
                        raise InvalidError("a push body starts with the manifest's length", hint="use hutch push")
                    continue
                size_text, _, rest = head.partition(b"\n")
                try:
                    size = int(size_text)
                except ValueError as exc:
                    raise InvalidError("a push body starts with the manifest's length", hint="use hutch push") from exc
                if not 0 <= size <= MAX_MANIFEST:
                    raise InvalidError(f"the push manifest is {size} bytes; the limit is {MAX_MANIFEST}")
                if len(rest) < size:
                    continue
                try:
                    manifest = json.loads(rest[:size])
                except ValueError as exc:
                    raise InvalidError(f"the push manifest is not JSON: {exc}") from exc
                chunk = rest[size:]
            if chunk:
                await asyncio.to_thread(os.write, fd, chunk)
    finally:
        os.close(fd)
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        raise InvalidError("the push body has no manifest", hint="use hutch push")
    return manifest


def router(service: Service) -> APIRouter:
    r = APIRouter()
    ws = service.workspaces

    @r.post("/v1/sessions")
    async def ensure(spec: SandboxSpec) -> dict[str, Any]:
        """Auto (``reuse_key``) or tenant mode: the live sandbox, or a new one."""
        rec, created = await ws.ensure(spec)
        return {"sandbox": rec.model_dump(mode="json"), "created": created}

    @r.get("/v1/tenants")
    async def tenants() -> list[dict[str, Any]]:
        return ws.tenants()

    @r.delete("/v1/tenants/{name}")
    async def delete_tenant(name: str) -> dict[str, Any]:
        return await ws.delete_tenant(name)

    @r.get("/v1/sandboxes/{ref}/manifest")
    async def manifest(ref: str) -> dict[str, Any]:
        return ws.manifest(ref)

    @r.post("/v1/sandboxes/{ref}/push", max_body_size=MAX_PUSH)
    async def push(
        ref: str,
        request: Request,
        delete: bool = False,
        force: bool = False,
        dry_run: bool = False,
        approval: str | None = None,
    ) -> dict[str, Any]:
        service.live(ref)  # a missing sandbox answers before the body is read
        tar = ws.tmp_path(".push.tar")
        try:
            body = await spool(request.stream(), tar)
            has_tar = tar.stat().st_size > 0
            files, tar_path = body["files"], tar if has_tar else None
            return await ws.push(ref, files, tar_path, delete=delete, force=force, dry_run=dry_run, approval=approval)
        finally:
            tar.unlink(missing_ok=True)

    @r.get("/v1/sandboxes/{ref}/pull", response_model=None)
    async def pull(ref: str) -> FileResponse:
        path = await ws.pull(ref)
        return FileResponse(path, media_type="application/x-tar", background=BackgroundTask(path.unlink, missing_ok=True))

    @r.post("/v1/sandboxes/{ref}/snapshots", status_code=201)
    async def snapshot_save(ref: str, req: SnapshotRequest) -> SnapshotRecord:
        return await ws.snapshot_save(ref, req.name)

    @r.get("/v1/snapshots")
    async def snapshots() -> list[SnapshotRecord]:
        return ws.snapshots()

    @r.post("/v1/snapshots/{name}/restore", status_code=201)
    async def snapshot_restore(name: str, req: RestoreRequest) -> SandboxRecord:
        return await ws.snapshot_restore(name, req.name)

    @r.delete("/v1/snapshots/{name}")
    async def snapshot_delete(name: str) -> dict[str, Any]:
        return await ws.snapshot_delete(name)

    @r.post("/v1/sandboxes/{ref}/fork", status_code=201)
    async def fork(ref: str, req: ForkRequest) -> dict[str, Any]:
        return await ws.fork(ref, req.count, req.name_prefix)

    return r
