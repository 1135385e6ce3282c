"""Moving a sandbox to another node (``hutch cluster drain NODE --move``), keeping its id.

A move makes a new node sandbox of the same spec on another node (placed as a create is,
the source node left out), copies the workspace into it as a tar through this gateway, and
then removes the old one; the gateway's record keeps its id and its exposed ports, and now
names the new node. What does not move: processes. So a sandbox is moved only when nothing
runs in it (no run going, interactive or background, and no process left by one): a move
would end them. A sandbox whose environment values or secrets this gateway no longer holds
(they are kept in memory only, never in the store: a gateway restarted since its create) is
not moved either. Each refusal says why; nothing is lost: a move that fails half way
removes its new copy and leaves the sandbox where it was.

While a sandbox moves, calls on it answer ``unavailable`` ("moving"), so nothing written
during the copy is lost; a destroy waits for the move to end.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hutch.errors import ConflictError, HutchError, UnavailableError
from hutch.models import SandboxRecord
from hutch.providers.cluster import ops
from hutch.providers.cluster.http import NodeClient, sandbox
from hutch.providers.cluster.monitor import Monitor, unavailable
from hutch.providers.cluster.nodes import Node, choose

OWN = "/.hutch/agent"  # hutch's own processes in a sandbox (its agent, a spare supervisor), and its PID 1


def theirs(procs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The processes of a node sandbox that are not hutch's own."""
    return [p for p in procs if p.get("pid") != 1 and OWN not in str(p.get("command", ""))]


class Moves:
    """The moves of one gateway, and what a move needs that the store does not keep."""

    def __init__(self, work: Path, node_spec: Callable[[SandboxRecord], dict[str, Any]]) -> None:
        self.work = work  # where a workspace's tar is kept while it moves
        self.node_spec = node_spec  # the body a node's create takes for a gateway sandbox
        self.kept: dict[str, tuple[dict[str, str], dict[str, str]]] = {}  # id -> env values, secrets (memory only)
        self.moving: dict[str, asyncio.Event] = {}
        self.moved: dict[str, dict[str, Any]] = {}  # id -> its data since its move (a caller may hold an older record)

    def keep(self, rec: SandboxRecord) -> None:
        """At create: the values a move needs again (never written anywhere)."""
        self.kept[rec.id] = (dict(rec.spec.env), dict(rec.spec.secrets))

    def forget(self, sandbox_id: str) -> None:
        self.kept.pop(sandbox_id, None)
        self.moved.pop(sandbox_id, None)

    def data(self, rec: SandboxRecord) -> dict[str, Any]:
        """Where ``rec`` is now; ``unavailable`` while it moves."""
        if rec.id in self.moving:
            raise UnavailableError(
                f"sandbox {rec.id} is moving to another node (hutch cluster drain --move)", hint="try again in a moment"
            )
        return self.moved.get(rec.id, rec.data)

    async def settled(self, sandbox_id: str) -> None:
        """Once ``sandbox_id`` is not moving (a destroy waits for its move)."""
        event = self.moving.get(sandbox_id)
        if event is not None:
            await event.wait()

    async def move(self, mon: Monitor, rec: SandboxRecord, mode: str) -> dict[str, Any]:
        """``rec`` on another node: its new data (``node``, ``node_sandbox`` ...), the node it
        left and the one it went to. ``conflict``, ``capacity`` or ``unavailable`` with the
        reason when it stays."""
        data = self.data(rec)
        name = str(data.get("node"))
        source = mon.nodes.get(name)
        if source is None or source.client is None or source.state in ("lost", "refused"):
            raise unavailable(source, name)
        env, secrets = self.kept.get(rec.id, ({}, {}))
        if rec.id not in self.kept and (rec.spec.env or rec.spec.secret_names):
            raise ConflictError(
                "its environment values and secrets are held by this gateway in memory only, and it restarted since "
                "the sandbox was made: a copy elsewhere would lack them",
                hint="destroy it and create it again, or let it finish on its node",
            )
        self.moving[rec.id] = done = asyncio.Event()
        try:
            return await self._move(mon, rec, data, source, env, secrets, mode)
        finally:
            del self.moving[rec.id]
            done.set()

    async def _move(
        self,
        mon: Monitor,
        rec: SandboxRecord,
        data: dict[str, Any],
        source: Node,
        env: dict[str, str],
        secrets: dict[str, str],
        mode: str,
    ) -> dict[str, Any]:
        assert source.client is not None
        ref = str(data["node_sandbox"])
        running = await source.client.json("GET", sandbox(ref) + "/runs", params={"status": "running"})
        if running:
            raise ConflictError(
                f"{len(running)} run(s) going in it (interactive or background): a move starts it again from its "
                "files, and processes do not move",
                hint="wait for them or kill them (hutch kill), then drain --move again",
            )
        if procs := theirs(await source.client.json("GET", sandbox(ref) + "/ps")):
            shown = ", ".join(f"{p['pid']} {str(p['command'])[:40]}" for p in procs[:3])
            raise ConflictError(
                f"{len(procs)} process(es) still run in it ({shown}): processes do not move",
                hint="end them (hutch exec SBX -- kill ...), then drain --move again",
            )
        memory, pids = rec.spec.limits.memory, rec.spec.limits.pids
        others = [n for n in mon.nodes.values() if n is not source]
        target = choose(others, memory, pids, mode, mon.default_sandboxes)
        assert target.client is not None
        target.placed[rec.id] = (memory, pids)  # reserved before the first await
        spec = self.node_spec(rec) | {"env": env, "secrets": secrets}
        try:
            made = await target.client.json("POST", "/v1/sandboxes", json=spec)
        except BaseException:
            target.placed.pop(rec.id, None)
            raise
        try:
            await self._copy(rec.id, source.client, ref, target.client, str(made["id"]))
        except BaseException:
            target.placed.pop(rec.id, None)
            with contextlib.suppress(HutchError):
                await target.client.json("DELETE", sandbox(made["id"]))
            raise
        new = data | {"node": target.name, "node_id": target.ray_id, "node_sandbox": made["id"]}
        self.moved[rec.id] = new
        source.placed.pop(rec.id, None)
        left = None
        try:
            await source.client.json("DELETE", sandbox(ref))
        except HutchError as exc:  # the copy left behind is removed if the node is lost and returns
            left = f"the old copy on {source.name} was not removed: {exc.message}"
        return {"data": new, "from": source.name, "to": target.name, "left": left, "old": ref}

    async def _copy(self, sandbox_id: str, src: NodeClient, ref: str, dst: NodeClient, into: str) -> None:
        self.work.mkdir(parents=True, exist_ok=True, mode=0o700)
        tar = self.work / f"move-{sandbox_id}.tar"
        try:
            await ops.export_workspace(src, ref, tar)
            await ops.import_workspace(dst, into, tar, [])
        finally:
            tar.unlink(missing_ok=True)
