"""The cluster's nodes as the gateway knows them, how they are followed, and placement.

Every ``interval`` seconds the gateway asks Ray which nodes exist and each known node's
daemon whether it answers. A node is

- ``starting``: Ray has it, its daemon is being started or first reached;
- ``ready``: its daemon answers (``drained`` nodes are ready but take nothing new);
- ``unreachable``: its daemon stopped answering less than ``detect`` seconds ago;
- ``lost``: Ray says it is dead, or its daemon has not answered for ``detect`` seconds. Its
  sandboxes are reported gone (``sandbox_lost``, naming the node) and nothing is placed on
  it until it answers again;
- ``refused``: its hutch is another version than the gateway's (nothing is placed on it).

Placement is the gateway's: Ray says which nodes are alive and their size, the gateway
counts what it placed. A node's room is its Ray resources ``hutch_memory`` (bytes, else
Ray's ``memory``), ``hutch_sandboxes`` (else the gateway's default) and ``hutch_pids`` (else
no bound), minus the limits of the sandboxes placed on it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from hutch.errors import CapacityError, NotFoundError
from hutch.providers.cluster.http import NodeClient
from hutch.units import format_size

STATES = ("starting", "ready", "unreachable", "lost", "refused")


@dataclass
class Node:
    name: str
    ray_id: str
    resources: dict[str, float] = field(default_factory=dict)
    state: str = "starting"
    client: NodeClient | None = None
    version: str | None = None
    users: str | None = None  # how its daemon maps a sandbox's own users: range | subuid | single (daemon.users_map)
    error: str | None = None
    last_ok: float = field(default_factory=time.monotonic)
    drained: bool = False
    placed: dict[str, tuple[int, int]] = field(default_factory=dict)  # sandbox id -> (memory, pids)

    def room(self, default_sandboxes: int) -> dict[str, int | None]:
        """What this node holds in all: memory (bytes), pids (None: no bound), sandboxes."""
        memory = self.resources.get("hutch_memory") or self.resources.get("memory") or 0
        pids = self.resources.get("hutch_pids")
        count = self.resources.get("hutch_sandboxes")
        return {
            "memory": int(memory),
            "pids": int(pids) if pids is not None else None,
            "sandboxes": int(count) if count is not None else default_sandboxes,
        }

    def free(self, default_sandboxes: int) -> dict[str, int | None]:
        room = self.room(default_sandboxes)
        used_memory = sum(m for m, _ in self.placed.values())
        used_pids = sum(p for _, p in self.placed.values())
        pids = room["pids"]
        return {
            "memory": int(room["memory"] or 0) - used_memory,
            "pids": None if pids is None else pids - used_pids,
            "sandboxes": int(room["sandboxes"] or 0) - len(self.placed),
        }

    @property
    def placeable(self) -> bool:
        return self.state == "ready" and not self.drained and self.client is not None

    def describe(self, default_sandboxes: int) -> dict[str, Any]:
        return {
            "name": self.name,
            "ray_node_id": self.ray_id,
            "state": self.state,
            "drained": self.drained,
            "url": self.client.url if self.client else None,
            "version": self.version,
            "error": self.error,
            "sandboxes": len(self.placed),
            "users": self.users,
            "capacity": self.room(default_sandboxes),
            "free": self.free(default_sandboxes),
        }


def _fits(free: dict[str, int | None], memory: int, pids: int) -> bool:
    room_pids = free["pids"]
    return (free["sandboxes"] or 0) >= 1 and (free["memory"] or 0) >= memory and (room_pids is None or room_pids >= pids)


def choose(nodes: list[Node], memory: int, pids: int, mode: str, default_sandboxes: int, prefer: str | None = None) -> Node:
    """The node a sandbox of ``memory`` bytes and ``pids`` goes to: ``prefer`` when it has room,
    else the emptiest (``spread``: fewest sandboxes, then most free memory) or the fullest that
    fits (``pack``);
    ``capacity`` naming the largest free slot when none fits."""
    ready = [n for n in nodes if n.placeable]
    fitting = [n for n in ready if _fits(n.free(default_sandboxes), memory, pids)]
    if prefer is not None:
        for node in fitting:
            if prefer in (node.name, node.ray_id):
                return node
    if fitting:

        def load(n: Node) -> tuple[int, int, str]:  # fewer sandboxes, then more free memory, is emptier
            return (len(n.placed), -int(n.free(default_sandboxes)["memory"] or 0), n.name)

        return min(fitting, key=load) if mode == "spread" else max(fitting, key=load)
    raise no_room(nodes, memory, pids, default_sandboxes)


def no_room(nodes: list[Node], memory: int, pids: int, default_sandboxes: int) -> CapacityError:
    ready = [n for n in nodes if n.placeable]
    want = f"{format_size(memory)} of memory and {pids} pids"
    if not ready:
        states = ", ".join(f"{n.name} {'drained' if n.drained else n.state}" for n in nodes) or "none"
        return CapacityError(
            f"no node can take a sandbox: none is ready (nodes: {states})",
            hint="hutch cluster nodes says why; start a node (ray start --address HEAD) or undrain one",
        )
    best = max(ready, key=lambda n: (int(n.free(default_sandboxes)["memory"] or 0), n.name))
    f = best.free(default_sandboxes)
    pid_text = "pids unbounded" if f["pids"] is None else f"{f['pids']} pids"
    return CapacityError(
        f"no node has room for a sandbox of {want}: the largest free slot is on {best.name} "
        f"({format_size(max(0, int(f['memory'] or 0)))} of memory, {f['sandboxes']} sandboxes, {pid_text})",
        hint="ask for less (--memory, --pids), destroy sandboxes, or add a node to the cluster",
    )


def find(nodes: dict[str, Node], name: str) -> Node:
    for node in nodes.values():
        if name in (node.name, node.ray_id) or (len(name) >= 6 and node.ray_id.startswith(name)):
            return node
    known = ", ".join(sorted(nodes)) or "none"
    raise NotFoundError(f"no node {name!r} in the cluster", hint=f"known nodes: {known} (hutch cluster nodes)")
