"""Client methods for pause/resume, keepalive, sub-agents, labels and approvals (mixed
into :class:`hutch.client.Client` and :class:`hutch.client.AsyncClient`)."""

from __future__ import annotations

import builtins
from typing import Any
from urllib.parse import quote


def _path(ref: str) -> str:
    return "/v1/sandboxes/" + quote(ref, safe="")


class LifecycleAPI:
    def json(self, method: str, url: str, **kw: Any) -> Any:
        raise NotImplementedError  # the client's own

    def pause(self, ref: str) -> dict[str, Any]:
        return dict(self.json("POST", _path(ref) + "/pause"))

    def resume(self, ref: str) -> dict[str, Any]:
        return dict(self.json("POST", _path(ref) + "/resume"))

    def keepalive(self, ref: str, ttl: str | float | None = None) -> dict[str, Any]:
        return dict(self.json("POST", _path(ref) + "/keepalive", json={"ttl": ttl}))

    def subagent(self, ref: str, req: dict[str, Any]) -> dict[str, Any]:
        return dict(self.json("POST", _path(ref) + "/subagents", json=req))

    def label(self, ref: str, set_: dict[str, str], remove: builtins.list[str]) -> dict[str, Any]:
        return dict(self.json("POST", _path(ref) + "/labels", json={"set": set_, "remove": remove}))

    def request_approval(self, req: dict[str, Any]) -> dict[str, Any]:
        return dict(self.json("POST", "/v1/approvals", json=req))

    def approvals(self, pending: bool = False, sandbox: str | None = None) -> builtins.list[dict[str, Any]]:
        return list(self.json("GET", "/v1/approvals", params={"pending": pending, "sandbox": sandbox}))

    def approval(self, approval_id: str) -> dict[str, Any]:
        return dict(self.json("GET", "/v1/approvals/" + quote(approval_id, safe="")))

    def wait_approval(self, approval_id: str, timeout: float | None = None) -> dict[str, Any]:
        url = "/v1/approvals/" + quote(approval_id, safe="") + "/wait"
        return dict(self.json("POST", url, params={"timeout": timeout}))

    def decide(self, approval_id: str, approve: bool, reason: str | None = None, by: str | None = None) -> dict[str, Any]:
        body = {"approve": approve, "reason": reason, "by": by}
        return dict(self.json("POST", "/v1/approvals/" + quote(approval_id, safe="") + "/decision", json=body))


class AsyncLifecycleAPI:
    async def json(self, method: str, url: str, **kw: Any) -> Any:
        raise NotImplementedError  # the client's own

    async def pause(self, ref: str) -> dict[str, Any]:
        return dict(await self.json("POST", _path(ref) + "/pause"))

    async def resume(self, ref: str) -> dict[str, Any]:
        return dict(await self.json("POST", _path(ref) + "/resume"))

    async def keepalive(self, ref: str, ttl: str | float | None = None) -> dict[str, Any]:
        return dict(await self.json("POST", _path(ref) + "/keepalive", json={"ttl": ttl}))

    async def subagent(self, ref: str, req: dict[str, Any]) -> dict[str, Any]:
        return dict(await self.json("POST", _path(ref) + "/subagents", json=req))

    async def label(self, ref: str, set_: dict[str, str], remove: builtins.list[str]) -> dict[str, Any]:
        return dict(await self.json("POST", _path(ref) + "/labels", json={"set": set_, "remove": remove}))

    async def request_approval(self, req: dict[str, Any]) -> dict[str, Any]:
        return dict(await self.json("POST", "/v1/approvals", json=req))

    async def approvals(self, pending: bool = False, sandbox: str | None = None) -> builtins.list[dict[str, Any]]:
        params: dict[str, Any] = {"pending": pending} | ({"sandbox": sandbox} if sandbox else {})
        return list(await self.json("GET", "/v1/approvals", params=params))

    async def approval(self, approval_id: str) -> dict[str, Any]:
        return dict(await self.json("GET", "/v1/approvals/" + quote(approval_id, safe="")))

    async def wait_approval(self, approval_id: str, timeout: float | None = None) -> dict[str, Any]:
        url = "/v1/approvals/" + quote(approval_id, safe="") + "/wait"
        return dict(await self.json("POST", url, params={"timeout": timeout} if timeout is not None else None))

    async def decide(self, approval_id: str, approve: bool, reason: str | None = None, by: str | None = None) -> dict[str, Any]:
        body = {"approve": approve, "reason": reason, "by": by}
        return dict(await self.json("POST", "/v1/approvals/" + quote(approval_id, safe="") + "/decision", json=body))
