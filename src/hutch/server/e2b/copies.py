"""E2B's fork, snapshots and network updates on hutch's Service, for the key that owns the
sandbox: ``POST /sandboxes/{id}/fork`` is ``hutch fork``, ``POST /sandboxes/{id}/snapshots``
is ``hutch snapshot save`` (``Sandbox.create(snapshot_id)`` restores it, ``GET /snapshots``
lists, ``DELETE /templates/{id}`` deletes), ``PUT /sandboxes/{id}/network`` is ``hutch
policy`` replacing the whole policy (the key's ceiling still applies: wider is a 403).

hutch copies files, not memory: a fork or a snapshot holds the workspace and an image
sandbox's writable root; processes start afresh in the copy.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

from hutch.errors import KINDS, HutchError, InvalidError
from hutch.models import SnapshotRecord
from hutch.server.e2b.auth import hutch_id
from hutch.server.e2b.network import policy_of

if TYPE_CHECKING:
    from hutch.server.e2b.control import Control

MAX_FORKS = 20  # E2B's bound on count
MEMORY = (
    "hutch snapshots keep files only (the workspace and an image sandbox's writable root), not "
    "memory: ask for mode='filesystem' (or leave mode unset); processes start afresh in the copy"
)


def _whole(value: Any, name: str, low: int, high: int, default: int) -> int:
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidError(f"{name} must be a whole number between {low} and {high}")
    return value


def snapshot_info(snap: SnapshotRecord) -> dict[str, Any]:
    return {"snapshotID": snap.name, "names": [snap.name]}


class Copies:
    def __init__(self, control: Control) -> None:
        self.c = control
        self.svc = control.svc

    async def fork(self, sandbox_id: str, body: dict[str, Any]) -> list[dict[str, Any]]:
        """One entry per child, ``{"sandbox": <create answer>}`` or ``{"error": {"code", "message"}}``,
        as the SDK's ``SandboxForkResult`` has it."""
        from hutch.server.e2b.control import DEFAULT_TIMEOUT, MAX_TIMEOUT

        rec = self.c.mine(sandbox_id)
        count = _whole(body.get("count"), "count", 1, MAX_FORKS, 1)
        timeout = _whole(body.get("timeout"), "timeout", 1, MAX_TIMEOUT, DEFAULT_TIMEOUT)
        report = await self.svc.workspaces.fork(rec.id, count)
        out: list[dict[str, Any]] = []
        for child in report["children"]:
            if child["sandbox"] is None:
                err = child.get("error", {})
                status = KINDS.get(str(err.get("kind")), HutchError).status
                out.append({"error": {"code": status if status < 500 else 503, "message": err.get("message", "")}})
                continue
            self.svc.lifecycle.keepalive(child["sandbox"], float(timeout))
            out.append({"sandbox": self.c.created(self.svc.get(child["sandbox"]))})
        return out

    async def snapshot(self, sandbox_id: str, body: dict[str, Any]) -> dict[str, Any]:
        rec = self.c.mine(sandbox_id)
        if body.get("memory") is True:
            raise InvalidError(MEMORY, hint="see docs/e2b.md")
        name = body.get("name")
        if name is None:
            name = f"snap-{secrets.token_hex(6)}"
        if not isinstance(name, str):
            raise InvalidError("name must be a string")
        return snapshot_info(await self.svc.workspaces.snapshot_save(rec.id, name))

    def snapshots(self, query: dict[str, str]) -> list[dict[str, Any]]:
        source = hutch_id(query["sandboxID"]) if query.get("sandboxID") else None
        name = query.get("name")
        found = [
            s
            for s in self.svc.workspaces.snapshots()
            if (source is None or s.sandbox_id == source) and (name is None or s.name == name)
        ]
        try:
            limit = int(query.get("limit", "100"))
            offset = int(query.get("nextToken") or "0")
        except ValueError:
            raise InvalidError("limit and nextToken must be whole numbers") from None
        return [snapshot_info(s) for s in found[max(0, offset) : max(0, offset) + max(1, limit)]]

    async def delete_snapshot(self, name: str) -> bool:
        """``DELETE /templates/{id}``: a snapshot of the key's (False: none of that name)."""
        return bool((await self.svc.workspaces.snapshot_delete(name))["existed"])

    def is_snapshot(self, template: str) -> bool:
        return any(s.name == template for s in self.svc.workspaces.snapshots())

    async def restore(self, template: str, fields: dict[str, Any]) -> dict[str, Any]:
        """``Sandbox.create(snapshot_id)``: the snapshot restored, with the create's timeout,
        metadata, envs and network instead of its source's."""
        changes = {k: v for k, v in fields.items() if k != "image"}
        rec = await self.svc.workspaces.snapshot_restore(template, changes=changes)
        return self.c.created(rec)

    async def network(self, sandbox_id: str, body: dict[str, Any]) -> None:
        rec = self.c.mine(sandbox_id)
        await self.svc.policy(rec.id, replace=policy_of(body))
