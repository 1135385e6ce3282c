"""Client methods for workspaces: sessions, push/pull, snapshots, fork (mixed into
:class:`hutch.client.Client` and :class:`hutch.client.AsyncClient`)."""

from __future__ import annotations

import builtins
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from hutch.client_lifecycle import _path

if TYPE_CHECKING:
    from hutch.transfer import Progress


def _clean(params: dict[str, Any]) -> dict[str, Any]:
    return {k: (str(v).lower() if isinstance(v, bool) else v) for k, v in params.items() if v is not None}


class WorkspaceAPI:
    request: Callable[..., Any]  # the client's own

    def json(self, method: str, url: str, **kw: Any) -> Any:
        raise NotImplementedError  # the client's own

    def ensure(self, spec: dict[str, Any]) -> dict[str, Any]:
        return dict(self.json("POST", "/v1/sessions", json=spec))

    def tenants(self) -> builtins.list[dict[str, Any]]:
        return list(self.json("GET", "/v1/tenants"))

    def delete_tenant(self, name: str) -> dict[str, Any]:
        return dict(self.json("DELETE", "/v1/tenants/" + quote(name, safe="")))

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
    ) -> dict[str, Any]:
        from hutch import transfer

        kept = self.json("GET", _path(ref) + "/manifest")["files"]
        plan = transfer.plan_push(Path(root), exclude, kept)
        body = transfer.push_body(Path(root), plan.manifest, [] if dry_run else plan.send, progress)
        params = {"delete": delete, "force": force, "dry_run": dry_run, "approval": approval}
        return plan.summary(self.json("POST", _path(ref) + "/push", params=params, content=body))

    def pull(self, ref: str, dest: str, *, dry_run: bool = False, force: bool = False) -> dict[str, Any]:
        from hutch import transfer

        data = self.request("GET", _path(ref) + "/pull").content
        return transfer.pull_into(data, Path(dest), force=force, dry_run=dry_run)

    def snapshot_save(self, ref: str, name: str) -> dict[str, Any]:
        return dict(self.json("POST", _path(ref) + "/snapshots", json={"name": name}))

    def snapshots(self) -> builtins.list[dict[str, Any]]:
        return list(self.json("GET", "/v1/snapshots"))

    def snapshot_restore(self, name: str, new_name: str | None = None) -> dict[str, Any]:
        return dict(self.json("POST", "/v1/snapshots/" + quote(name, safe="") + "/restore", json={"name": new_name}))

    def snapshot_delete(self, name: str) -> dict[str, Any]:
        return dict(self.json("DELETE", "/v1/snapshots/" + quote(name, safe="")))

    def fork(self, ref: str, count: int = 1, name_prefix: str | None = None) -> dict[str, Any]:
        return dict(self.json("POST", _path(ref) + "/fork", json={"count": count, "name_prefix": name_prefix}))


class AsyncWorkspaceAPI:
    request: Callable[..., Awaitable[Any]]  # the client's own

    async def json(self, method: str, url: str, **kw: Any) -> Any:
        raise NotImplementedError  # the client's own

    async def ensure(self, spec: dict[str, Any]) -> dict[str, Any]:
        return dict(await self.json("POST", "/v1/sessions", json=spec))

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
    ) -> dict[str, Any]:
        import asyncio

        from hutch import transfer

        kept = (await self.json("GET", _path(ref) + "/manifest"))["files"]
        plan = await asyncio.to_thread(transfer.plan_push, Path(root), exclude, kept)
        body = await asyncio.to_thread(transfer.push_body, Path(root), plan.manifest, [] if dry_run else plan.send, progress)
        params = {"delete": delete, "force": force, "dry_run": dry_run, "approval": approval}
        return plan.summary(await self.json("POST", _path(ref) + "/push", params=_clean(params), content=body))

    async def pull(self, ref: str, dest: str, *, dry_run: bool = False, force: bool = False) -> dict[str, Any]:
        import asyncio

        from hutch import transfer

        data = (await self.request("GET", _path(ref) + "/pull")).content
        return await asyncio.to_thread(transfer.pull_into, data, Path(dest), force=force, dry_run=dry_run)

    async def snapshot_save(self, ref: str, name: str) -> dict[str, Any]:
        return dict(await self.json("POST", _path(ref) + "/snapshots", json={"name": name}))

    async def snapshot_restore(self, name: str, new_name: str | None = None) -> dict[str, Any]:
        return dict(await self.json("POST", "/v1/snapshots/" + quote(name, safe="") + "/restore", json={"name": new_name}))

    async def fork(self, ref: str, count: int = 1, name_prefix: str | None = None) -> dict[str, Any]:
        return dict(await self.json("POST", _path(ref) + "/fork", json={"count": count, "name_prefix": name_prefix}))
