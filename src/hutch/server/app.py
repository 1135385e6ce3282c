"""The HTTP app: one route per use-case, one error handler. OpenAPI at /openapi.json."""

from __future__ import annotations

import asyncio
import os
from typing import Annotated, Any

from fastapi import FastAPI, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel

from hutch._version import __version__
from hutch.checks import MAX_INT64, check_mode, check_path
from hutch.errors import InvalidError
from hutch.models import FileEntry, PolicyChange, SandboxRecord, SandboxSpec
from hutch.server import e2b, errors, idempotency, openapi
from hutch.server.changes import router as changes_router
from hutch.server.cluster import router as cluster_router
from hutch.server.credentials import CallerCredentials
from hutch.server.credentials import router as credentials_router
from hutch.server.edge import App, unless_gone
from hutch.server.fastexec import FastExec
from hutch.server.gateway import router as gateway_router
from hutch.server.images import router as images_router
from hutch.server.keys import router as keys_router
from hutch.server.lifecycle import router as lifecycle_router
from hutch.server.oneshot import router as oneshot_router
from hutch.server.pool import router as pool_router
from hutch.server.runs import router as runs_router
from hutch.server.ui import guard as ui_guard
from hutch.server.ui import loopback as ui_loopback
from hutch.server.ui import routes as ui_routes
from hutch.server.workspaces import router as workspaces_router
from hutch.service import Service
from hutch.service.files import MAX_FILE

MAX_JSON = 96 << 20  # a JSON request body: room for a 64 MiB --stdin-file, base64-encoded


class DestroyResult(BaseModel):
    sandbox: str
    name: str | None = None
    destroyed: bool
    existed: bool
    message: str
    children: list[str] | None = None


class CleanupRequest(BaseModel):
    provider: str | None = None
    metro: str | None = None
    dry_run: bool = False
    keep: list[str] = []
    forget_missing: bool = False


def create_app(service: Service) -> FastAPI:
    app = App(
        title="hutch",
        version=__version__,
        docs_url=None,
        redoc_url=None,
        separate_input_output_schemas=False,
        max_body_size=MAX_JSON,  # refused while it is read, never after reading it all
    )
    app.state.service = service
    app.state.shutdown = None
    once = app.state.idempotency = idempotency.Idempotency()

    errors.install(app)

    @app.get("/v1/health")
    async def health() -> dict[str, Any]:
        return {
            "ok": True,
            "version": __version__,
            "pid": os.getpid(),
            "home": str(service.settings.home),
            "tasks": len(asyncio.all_tasks()),  # the daemon's asyncio tasks: requests in progress, runs, waits
            "approval_waits": service.approvals.waiting,
        }

    @app.post("/v1/shutdown")
    async def shutdown() -> dict[str, Any]:
        if app.state.shutdown is not None:
            app.state.shutdown()
        return {"ok": True, "stopping": True, "pid": os.getpid()}

    @app.get("/v1/doctor")
    async def doctor(provider: str | None = None) -> dict[str, Any]:
        return await service.doctor(provider, credentials=True)

    @app.post("/v1/sandboxes", status_code=201)
    async def create(spec: SandboxSpec, key: idempotency.Key = None) -> SandboxRecord:
        return await once.once(key, "create " + spec.model_dump_json(), lambda: service.create(spec))

    @app.get("/v1/sandboxes")
    async def list_(
        all: bool = False,  # noqa: A002 - query name
        label: Annotated[list[str] | None, Query()] = None,
        state: str | None = None,
    ) -> list[SandboxRecord]:
        labels = {}
        for item in label or []:
            key, sep, value = item.partition("=")
            if not key or not sep:
                raise InvalidError(f"invalid label filter {item!r}", hint="use --label K=V")
            labels[key] = value
        await service.keyring.settle()  # a credential this caller brought shows at once
        return service.list(all, labels, state)

    @app.get("/v1/sandboxes/{ref}")
    async def get(ref: str) -> SandboxRecord:
        await service.keyring.settle()
        return service.get(ref)

    @app.delete("/v1/sandboxes/{ref}")
    async def destroy(ref: str, approval: str | None = None) -> dict[str, Any]:
        result = DestroyResult(**await service.destroy(ref, approval))
        return result.model_dump(exclude=None if result.children else {"children"})

    @app.get("/v1/sandboxes/{ref}/files", response_model=None)
    async def read_file(
        ref: str,
        path: str,
        limit: int = Query(64 << 20, ge=0, le=MAX_INT64),
        offset: int | None = Query(None, ge=0, le=MAX_INT64),
    ) -> Response:
        if offset is not None:  # a page: from offset, with the file's size when known
            data, truncated, size = await service.read_file_range(ref, path, offset, limit)
            headers = {"x-hutch-truncated": str(int(truncated))} | ({"x-hutch-size": str(size)} if size is not None else {})
            return Response(data, media_type="application/octet-stream", headers=headers)
        data, truncated = await service.read_file(ref, path, limit)
        return Response(data, media_type="application/octet-stream", headers={"x-hutch-truncated": str(int(truncated))})

    @app.put("/v1/sandboxes/{ref}/files", max_body_size=MAX_FILE)
    async def write_file(ref: str, path: str, request: Request, mode: str = "644") -> dict[str, Any]:
        perms = check_mode(mode)  # before the body is read
        check_path(path)
        service.live(ref)  # a missing sandbox answers before the body is read
        chunks = [chunk async for chunk in request.stream()]  # past MAX_FILE: 413 while reading
        return await service.write_file(ref, path, b"".join(chunks), perms)

    @app.post("/v1/sandboxes/{ref}/policy")
    async def policy(ref: str, change: PolicyChange, approval: str | None = None) -> SandboxRecord:
        return await service.policy(ref, approval, **change.model_dump(exclude_none=True))

    @app.get("/v1/sandboxes/{ref}/ls")
    async def list_files(ref: str, path: str | None = None) -> list[FileEntry]:
        return await service.list_files(ref, path)

    @app.get("/v1/sandboxes/{ref}/status")
    async def status(
        ref: str, request: Request, wait: bool = False, timeout: float = Query(300.0, gt=0, le=86400)
    ) -> dict[str, Any]:
        return await unless_gone(request, service.status(ref, wait, timeout))

    @app.get("/v1/providers/{name}/inventory")
    async def inventory(name: str, metro: str | None = None, all: bool = False) -> dict[str, Any]:  # noqa: A002
        return await service.inventory(name, metro, all)

    @app.post("/v1/cleanup")
    async def cleanup(req: CleanupRequest) -> dict[str, Any]:
        return await service.cleanup(req.provider, req.metro, req.dry_run, req.keep, req.forget_missing)

    app.include_router(runs_router(service, once))
    app.include_router(oneshot_router(service))
    app.include_router(workspaces_router(service))
    app.include_router(lifecycle_router(service))
    app.include_router(credentials_router(service))
    app.include_router(keys_router(service))
    app.include_router(images_router(service))
    app.include_router(changes_router(service))
    app.include_router(gateway_router(service))
    app.include_router(ui_loopback.router(service))
    app.include_router(ui_routes.router(service))  # the dashboard: / and /ui/...
    app.add_middleware(ui_guard.Guard)  # its headers and CSRF checks
    e2b.install(app, service)  # the E2B-compatible API (/e2b/api, /e2b/envd, /files)
    app.include_router(pool_router(service))
    app.include_router(cluster_router(service))
    app.add_middleware(CallerCredentials, keyring=service.keyring)  # the caller's provider credentials
    openapi.install(app)
    app.front = lambda stack: FastExec(stack, service, MAX_JSON)  # the hot path: foreground exec
    return app
