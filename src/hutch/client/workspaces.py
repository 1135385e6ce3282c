"""Client methods for workspaces: kept sandboxes (auto and tenant mode), push/pull, snapshots, fork (mixed into
:class:`hutch.client.Client` and :class:`hutch.client.AsyncClient`)."""

from __future__ import annotations

import builtins
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote

from hutch.client.lifecycle import _path

if TYPE_CHECKING:
    from hutch import wire
    from hutch.client.transfer import Progress


def _clean(params: dict[str, Any]) -> dict[str, Any]:
    return {k: (str(v).lower() if isinstance(v, bool) else v) for k, v in params.items() if v is not None}


class WorkspaceAPI:
    request: Callable[..., Any]  # the client's own

    def json(self, method: str, url: str, **kw: Any) -> Any:
        raise NotImplementedError  # the client's own

    def ensure(self, spec: wire.SandboxSpec) -> wire.Session:
        return cast("wire.Session", self.json("POST", "/v1/sessions", json=spec))

    def tenants(self) -> builtins.list[wire.Tenant]:
        return cast("builtins.list[wire.Tenant]", self.json("GET", "/v1/tenants"))

    def delete_tenant(self, name: str) -> wire.TenantDeleted:
        return cast("wire.TenantDeleted", self.json("DELETE", "/v1/tenants/" + quote(name, safe="")))

    def push(
        self,
        ref: str,
        root: str,
        *,
        delete: bool = False,
        exclude: Iterable[str] = (),
        dry_run: bool = False,
        force: bool = False,
        progress: Progress | None = None,
        approval: str | None = None,
    ) -> wire.PushSummary:
        from hutch.client import transfer

        kept = cast("wire.Manifest", self.json("GET", _path(ref) + "/manifest"))["files"]
        plan = transfer.plan_push(Path(root), exclude, kept)
        body = transfer.push_body(Path(root), plan.manifest, [] if dry_run else plan.send, progress)
        params = {"delete": delete, "force": force, "dry_run": dry_run, "approval": approval}
        return plan.summary(cast("wire.PushResult", self.json("POST", _path(ref) + "/push", params=params, content=body)))

    def pull(self, ref: str, dest: str, *, dry_run: bool = False, force: bool = False) -> wire.PullSummary:
        from hutch.client import transfer

        data = self.request("GET", _path(ref) + "/pull").content
        return transfer.pull_into(data, Path(dest), force=force, dry_run=dry_run)

    def snapshot_save(self, ref: str, name: str) -> wire.SnapshotRecord:
        return cast("wire.SnapshotRecord", self.json("POST", _path(ref) + "/snapshots", json={"name": name}))

    def snapshots(self) -> builtins.list[wire.SnapshotRecord]:
        return cast("builtins.list[wire.SnapshotRecord]", self.json("GET", "/v1/snapshots"))

    def snapshot_restore(self, name: str, new_name: str | None = None) -> wire.SandboxRecord:
        return cast(
            "wire.SandboxRecord", self.json("POST", "/v1/snapshots/" + quote(name, safe="") + "/restore", json={"name": new_name})
        )

    def snapshot_delete(self, name: str) -> wire.SnapshotDeleted:
        return cast("wire.SnapshotDeleted", self.json("DELETE", "/v1/snapshots/" + quote(name, safe="")))

    def fork(self, ref: str, count: int = 1, name_prefix: str | None = None) -> wire.ForkResult:
        return cast("wire.ForkResult", self.json("POST", _path(ref) + "/fork", json={"count": count, "name_prefix": name_prefix}))


class AsyncWorkspaceAPI:
    request: Callable[..., Awaitable[Any]]  # the client's own

    async def json(self, method: str, url: str, **kw: Any) -> Any:
        raise NotImplementedError  # the client's own

    async def ensure(self, spec: wire.SandboxSpec) -> wire.Session:
        return cast("wire.Session", await self.json("POST", "/v1/sessions", json=spec))

    async def push(
        self,
        ref: str,
        root: str,
        *,
        delete: bool = False,
        exclude: Iterable[str] = (),
        dry_run: bool = False,
        force: bool = False,
        progress: Progress | None = None,
        approval: str | None = None,
    ) -> wire.PushSummary:
        import asyncio

        from hutch.client import transfer

        kept = cast("wire.Manifest", await self.json("GET", _path(ref) + "/manifest"))["files"]
        plan = await asyncio.to_thread(transfer.plan_push, Path(root), exclude, kept)
        body = await asyncio.to_thread(transfer.push_body, Path(root), plan.manifest, [] if dry_run else plan.send, progress)
        params = {"delete": delete, "force": force, "dry_run": dry_run, "approval": approval}
        answer = await self.json("POST", _path(ref) + "/push", params=_clean(params), content=body)
        return plan.summary(cast("wire.PushResult", answer))

    async def pull(self, ref: str, dest: str, *, dry_run: bool = False, force: bool = False) -> wire.PullSummary:
        import asyncio

        from hutch.client import transfer

        data = (await self.request("GET", _path(ref) + "/pull")).content
        return await asyncio.to_thread(transfer.pull_into, data, Path(dest), force=force, dry_run=dry_run)

    async def snapshot_save(self, ref: str, name: str) -> wire.SnapshotRecord:
        return cast("wire.SnapshotRecord", await self.json("POST", _path(ref) + "/snapshots", json={"name": name}))

    async def snapshot_restore(self, name: str, new_name: str | None = None) -> wire.SandboxRecord:
        return cast(
            "wire.SandboxRecord",
            await self.json("POST", "/v1/snapshots/" + quote(name, safe="") + "/restore", json={"name": new_name}),
        )

    async def fork(self, ref: str, count: int = 1, name_prefix: str | None = None) -> wire.ForkResult:
        return cast(
            "wire.ForkResult", await self.json("POST", _path(ref) + "/fork", json={"count": count, "name_prefix": name_prefix})
        )
