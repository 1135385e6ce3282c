"""Client methods for pause/resume, keepalive, sub-agents, labels and approvals (mixed
into :class:`hutch.client.Client` and :class:`hutch.client.AsyncClient`)."""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote

if TYPE_CHECKING:
    from hutch import wire


def _path(ref: str) -> str:
    return "/v1/sandboxes/" + quote(ref, safe="")


class LifecycleAPI:
    def json(self, method: str, url: str, **kw: Any) -> Any:
        raise NotImplementedError  # the client's own

    def pause(self, ref: str) -> wire.StateChange:
        return cast("wire.StateChange", self.json("POST", _path(ref) + "/pause"))

    def resume(self, ref: str) -> wire.StateChange:
        return cast("wire.StateChange", self.json("POST", _path(ref) + "/resume"))

    def keepalive(self, ref: str, ttl: str | float | None = None) -> wire.Deadlines:
        return cast("wire.Deadlines", self.json("POST", _path(ref) + "/keepalive", json={"ttl": ttl}))

    def subagent(self, ref: str, req: wire.SubagentRequest) -> wire.SandboxRecord:
        return cast("wire.SandboxRecord", self.json("POST", _path(ref) + "/subagents", json=req))

    def label(self, ref: str, set_: dict[str, str], remove: builtins.list[str]) -> wire.SandboxRecord:
        return cast("wire.SandboxRecord", self.json("POST", _path(ref) + "/labels", json={"set": set_, "remove": remove}))

    def request_approval(self, req: wire.ApprovalRequest) -> wire.ApprovalRecord:
        return cast("wire.ApprovalRecord", self.json("POST", "/v1/approvals", json=req))

    def approvals(self, pending: bool = False, sandbox: str | None = None) -> builtins.list[wire.ApprovalRecord]:
        return cast(
            "builtins.list[wire.ApprovalRecord]",
            self.json("GET", "/v1/approvals", params={"pending": pending, "sandbox": sandbox}),
        )

    def approval(self, approval_id: str) -> wire.ApprovalRecord:
        return cast("wire.ApprovalRecord", self.json("GET", "/v1/approvals/" + quote(approval_id, safe="")))

    def wait_approval(self, approval_id: str, timeout: float | None = None) -> wire.ApprovalRecord:
        url = "/v1/approvals/" + quote(approval_id, safe="") + "/wait"
        return cast("wire.ApprovalRecord", self.json("POST", url, params={"timeout": timeout}))

    def decide(self, approval_id: str, approve: bool, reason: str | None = None, by: str | None = None) -> wire.ApprovalRecord:
        body = {"approve": approve, "reason": reason, "by": by}
        return cast(
            "wire.ApprovalRecord", self.json("POST", "/v1/approvals/" + quote(approval_id, safe="") + "/decision", json=body)
        )


class AsyncLifecycleAPI:
    async def json(self, method: str, url: str, **kw: Any) -> Any:
        raise NotImplementedError  # the client's own

    async def pause(self, ref: str) -> wire.StateChange:
        return cast("wire.StateChange", await self.json("POST", _path(ref) + "/pause"))

    async def resume(self, ref: str) -> wire.StateChange:
        return cast("wire.StateChange", await self.json("POST", _path(ref) + "/resume"))

    async def keepalive(self, ref: str, ttl: str | float | None = None) -> wire.Deadlines:
        return cast("wire.Deadlines", await self.json("POST", _path(ref) + "/keepalive", json={"ttl": ttl}))

    async def subagent(self, ref: str, req: wire.SubagentRequest) -> wire.SandboxRecord:
        return cast("wire.SandboxRecord", await self.json("POST", _path(ref) + "/subagents", json=req))

    async def label(self, ref: str, set_: dict[str, str], remove: builtins.list[str]) -> wire.SandboxRecord:
        return cast("wire.SandboxRecord", await self.json("POST", _path(ref) + "/labels", json={"set": set_, "remove": remove}))

    async def request_approval(self, req: wire.ApprovalRequest) -> wire.ApprovalRecord:
        return cast("wire.ApprovalRecord", await self.json("POST", "/v1/approvals", json=req))

    async def approvals(self, pending: bool = False, sandbox: str | None = None) -> builtins.list[wire.ApprovalRecord]:
        params: dict[str, Any] = {"pending": pending} | ({"sandbox": sandbox} if sandbox else {})
        return cast("builtins.list[wire.ApprovalRecord]", await self.json("GET", "/v1/approvals", params=params))

    async def approval(self, approval_id: str) -> wire.ApprovalRecord:
        return cast("wire.ApprovalRecord", await self.json("GET", "/v1/approvals/" + quote(approval_id, safe="")))

    async def wait_approval(self, approval_id: str, timeout: float | None = None) -> wire.ApprovalRecord:
        url = "/v1/approvals/" + quote(approval_id, safe="") + "/wait"
        return cast(
            "wire.ApprovalRecord", await self.json("POST", url, params={"timeout": timeout} if timeout is not None else None)
        )

    async def decide(
        self, approval_id: str, approve: bool, reason: str | None = None, by: str | None = None
    ) -> wire.ApprovalRecord:
        body = {"approve": approve, "reason": reason, "by": by}
        return cast(
            "wire.ApprovalRecord",
            await self.json("POST", "/v1/approvals/" + quote(approval_id, safe="") + "/decision", json=body),
        )
