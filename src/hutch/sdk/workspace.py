"""Workspace methods of the SDK (push, pull, snapshot, restore, fork), mixed into
:class:`~hutch.sdk.Sandbox` and :class:`~hutch.sdk.AsyncSandbox` and kept in step."""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from hutch.errors import HutchError

if TYPE_CHECKING:
    from typing import Self

    from hutch import wire
    from hutch.client import AsyncClient, Client
    from hutch.config import Settings


def _children(result: wire.ForkResult) -> builtins.list[str | HutchError]:
    """Each child's sandbox id, or the error that stopped it."""
    return [c["sandbox"] or HutchError.from_dict(c) for c in result["children"]]


class SandboxWorkspace:
    info: wire.SandboxRecord
    client: Client
    _forks: builtins.list[Any]  # children made by fork(), destroyed when a ``with`` block on this sandbox ends

    @property
    def id(self) -> str:
        return str(self.info["id"])

    def push(
        self,
        directory: str = ".",
        *,
        delete: bool = False,
        exclude: Iterable[str] = (),
        dry_run: bool = False,
        force: bool = False,
    ) -> wire.PushSummary:
        """Send a local tree into /workspace (only what changed); returns the summary."""
        return self.client.push(self.id, directory, delete=delete, exclude=exclude, dry_run=dry_run, force=force)

    def pull(self, directory: str = ".", *, dry_run: bool = False, force: bool = False) -> wire.PullSummary:
        """Copy /workspace into a local directory; refuses to overwrite other content unless ``force``."""
        return self.client.pull(self.id, directory, dry_run=dry_run, force=force)

    def snapshot(self, name: str) -> wire.SnapshotRecord:
        """Save the workspace as snapshot ``name``."""
        return self.client.snapshot_save(self.id, name)

    @classmethod
    def restore(cls, snapshot: str, *, name: str | None = None, settings: Settings | None = None) -> Self:
        """A new sandbox whose workspace is ``snapshot``."""
        from hutch.client import Client

        client = Client(settings)
        return cls(client.snapshot_restore(snapshot, name), client)  # type: ignore[call-arg]

    def fork(self, count: int = 1, *, name_prefix: str | None = None, keep: bool = False) -> builtins.list[Self | HutchError]:
        """``count`` new sandboxes starting from a copy of this workspace; a child that
        failed is its :class:`HutchError` in the list, the others are sandboxes. In a
        ``with`` block on this sandbox, the children are destroyed with it when the block
        ends, unless ``keep``."""
        result = self.client.fork(self.id, count, name_prefix)
        out = [
            c if isinstance(c, HutchError) else type(self)(self.client.get(c), self.client)  # type: ignore[call-arg]
            for c in _children(result)
        ]
        if not keep:
            self._forks.extend(c for c in out if not isinstance(c, HutchError))
        return out

    def _destroy_forks(self) -> None:
        """Destroy every child fork() made (idempotent: one already gone is fine); the first
        failure is raised once all were tried."""
        failed: builtins.list[HutchError] = []
        while self._forks:
            try:
                self._forks.pop(0).destroy()
            except HutchError as exc:
                failed.append(exc)
        if failed:
            raise failed[0]


class AsyncSandboxWorkspace:
    info: wire.SandboxRecord
    client: AsyncClient
    _forks: builtins.list[Any]  # children made by fork(), destroyed when an ``async with`` block on this sandbox ends

    @property
    def id(self) -> str:
        return str(self.info["id"])

    async def push(
        self,
        directory: str = ".",
        *,
        delete: bool = False,
        exclude: Iterable[str] = (),
        dry_run: bool = False,
        force: bool = False,
    ) -> wire.PushSummary:
        """Send a local tree into /workspace (only what changed); returns the summary."""
        return await self.client.push(self.id, directory, delete=delete, exclude=exclude, dry_run=dry_run, force=force)

    async def pull(self, directory: str = ".", *, dry_run: bool = False, force: bool = False) -> wire.PullSummary:
        """Copy /workspace into a local directory; refuses to overwrite other content unless ``force``."""
        return await self.client.pull(self.id, directory, dry_run=dry_run, force=force)

    async def snapshot(self, name: str) -> wire.SnapshotRecord:
        """Save the workspace as snapshot ``name``."""
        return await self.client.snapshot_save(self.id, name)

    @classmethod
    async def restore(cls, snapshot: str, *, name: str | None = None, settings: Settings | None = None) -> Self:
        """A new sandbox whose workspace is ``snapshot``."""
        from hutch.client import AsyncClient

        client = AsyncClient(settings)
        return cls(await client.snapshot_restore(snapshot, name), client)  # type: ignore[call-arg]

    async def fork(
        self, count: int = 1, *, name_prefix: str | None = None, keep: bool = False
    ) -> builtins.list[Self | HutchError]:
        """``count`` new sandboxes starting from a copy of this workspace; a child that
        failed is its :class:`HutchError` in the list, the others are sandboxes. In an
        ``async with`` block on this sandbox, the children are destroyed with it when the
        block ends, unless ``keep``."""
        result = await self.client.fork(self.id, count, name_prefix)
        out: builtins.list[Self | HutchError] = []
        for c in _children(result):
            out.append(c if isinstance(c, HutchError) else type(self)(await self.client.get(c), self.client))  # type: ignore[call-arg]
        if not keep:
            self._forks.extend(c for c in out if not isinstance(c, HutchError))
        return out

    async def _destroy_forks(self) -> None:
        failed: builtins.list[HutchError] = []
        while self._forks:
            try:
                await self._forks.pop(0).destroy()
            except HutchError as exc:
                failed.append(exc)
        if failed:
            raise failed[0]
