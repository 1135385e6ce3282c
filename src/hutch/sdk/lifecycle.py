"""Pause/resume, keepalive, labels, sub-agents and approvals on a sandbox (mixed into
:class:`hutch.sdk.Sandbox` and :class:`hutch.sdk.AsyncSandbox`, kept in parity)."""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Literal, Self

from hutch.client import AsyncClient, Client
from hutch.wire.build import approval_request, subagent_request

if TYPE_CHECKING:
    from hutch import wire


class _Lifecycle:
    info: wire.SandboxRecord
    client: Client

    def __init__(self, info: wire.SandboxRecord, client: Client) -> None:  # the sandbox's own __init__ replaces it
        self.info = info
        self.client = client

    @property
    def _id(self) -> str:
        return str(self.info["id"])

    def pause(self) -> wire.StateChange:
        """Freeze every process of the sandbox (``state`` becomes ``paused``)."""
        out = self.client.pause(self._id)
        self.info = self.client.get(self._id)
        return out

    def resume(self) -> wire.StateChange:
        out = self.client.resume(self._id)
        self.info = self.client.get(self._id)
        return out

    def keepalive(self, ttl: str | float | None = None) -> wire.Deadlines:
        """Reset the idle timer; with ``ttl`` (``"30m"``), a new deadline that long from now."""
        return self.client.keepalive(self._id, ttl)

    def label(self, set: dict[str, str] | None = None, remove: builtins.list[str] | None = None) -> wire.SandboxRecord:  # noqa: A002
        self.info = self.client.label(self._id, set or {}, remove or [])
        return self.info

    def subagent(
        self,
        *,
        name: str | None = None,
        workspace: Literal["rw", "ro"] | None = None,
        memory: str | int | None = None,
        pids: int | None = None,
        cpus: float | None = None,
        env: dict[str, str] | None = None,
        labels: dict[str, str] | None = None,
        ttl: str | float | None = None,
    ) -> Self:
        """A child sandbox sharing this one's /workspace (``"ro"``: read-only) with its own processes."""
        req = subagent_request(
            self.client.settings,
            name=name,
            workspace=workspace,
            memory=memory,
            pids=pids,
            cpus=cpus,
            env=env,
            labels=labels,
            ttl=ttl,
        )
        return type(self)(self.client.subagent(self._id, req), self.client)

    def confirm(
        self, action: str, *, reason: str | None = None, timeout: float | None = None, wait: bool = True
    ) -> wire.ApprovalRecord:
        """Ask a human to approve ``action``; with ``wait``, block until decided or expired (read ``status``)."""
        apr = self.client.request_approval(approval_request(action, self._id, reason, timeout))
        while wait and apr["status"] == "pending":
            apr = self.client.wait_approval(apr["id"], 60.0)
        return apr


class _AsyncLifecycle:
    info: wire.SandboxRecord
    client: AsyncClient

    def __init__(self, info: wire.SandboxRecord, client: AsyncClient) -> None:  # the sandbox's own __init__ replaces it
        self.info = info
        self.client = client

    @property
    def _id(self) -> str:
        return str(self.info["id"])

    async def pause(self) -> wire.StateChange:
        """Freeze every process of the sandbox (``state`` becomes ``paused``)."""
        out = await self.client.pause(self._id)
        self.info = await self.client.get(self._id)
        return out

    async def resume(self) -> wire.StateChange:
        out = await self.client.resume(self._id)
        self.info = await self.client.get(self._id)
        return out

    async def keepalive(self, ttl: str | float | None = None) -> wire.Deadlines:
        """Reset the idle timer; with ``ttl`` (``"30m"``), a new deadline that long from now."""
        return await self.client.keepalive(self._id, ttl)

    async def label(self, set: dict[str, str] | None = None, remove: builtins.list[str] | None = None) -> wire.SandboxRecord:  # noqa: A002
        self.info = await self.client.label(self._id, set or {}, remove or [])
        return self.info

    async def subagent(
        self,
        *,
        name: str | None = None,
        workspace: Literal["rw", "ro"] | None = None,
        memory: str | int | None = None,
        pids: int | None = None,
        cpus: float | None = None,
        env: dict[str, str] | None = None,
        labels: dict[str, str] | None = None,
        ttl: str | float | None = None,
    ) -> Self:
        """A child sandbox sharing this one's /workspace (``"ro"``: read-only) with its own processes."""
        req = subagent_request(
            self.client.settings,
            name=name,
            workspace=workspace,
            memory=memory,
            pids=pids,
            cpus=cpus,
            env=env,
            labels=labels,
            ttl=ttl,
        )
        return type(self)(await self.client.subagent(self._id, req), self.client)

    async def confirm(
        self, action: str, *, reason: str | None = None, timeout: float | None = None, wait: bool = True
    ) -> wire.ApprovalRecord:
        """Ask a human to approve ``action``; with ``wait``, block until decided or expired (read ``status``)."""
        apr = await self.client.request_approval(approval_request(action, self._id, reason, timeout))
        while wait and apr["status"] == "pending":
            apr = await self.client.wait_approval(apr["id"], 60.0)
        return apr
