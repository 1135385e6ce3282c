"""A cluster gateway (``hutch serve --cluster``): its state, its nodes, drains.

The nodes are the cluster provider's to follow (``NodesProvider``); the store remembers the
last state of each and the operator's drains (applied again after a restart). Node changes
are events (``node_state``) in the audit stream.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

from hutch.actors import acting
from hutch.config import CLUSTER_PROVIDER
from hutch.errors import HutchError, InvalidError, UnavailableError
from hutch.models import SandboxState
from hutch.provider import NodesProvider, Provider, nodes_provider

if TYPE_CHECKING:
    from hutch.service import Service


def not_a_cluster() -> UnavailableError:
    return UnavailableError("this gateway is not a cluster's front door", hint="start it with hutch serve --cluster RAY_ADDRESS")


class Cluster:
    def __init__(self, svc: Service) -> None:
        self.svc = svc
        self._warm: asyncio.Task[Any] | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.svc.settings.cluster)

    def bind(self, provider: Provider) -> None:
        """At the provider's load: the drains kept in the store, and where node changes go."""
        nodes_provider(provider).bind_nodes(self.svc.store.nodes.drained(), self._seen)

    def _seen(self, node: dict[str, Any]) -> None:
        self.svc.store.nodes.seen(node["name"], node["state"], node)
        with acting(None):
            self.svc.store.events.append(
                "node_state", None, None, node=node["name"], state=node["state"], error=node.get("error")
            )

    def provider(self) -> NodesProvider:
        if not self.enabled:
            raise not_a_cluster()
        return nodes_provider(self.svc.provider(CLUSTER_PROVIDER))

    async def claim(self) -> None:
        """``hutch serve --cluster``: the one gateway of its cluster (``conflict`` naming the
        gateway that already is), before anything is adopted or placed."""
        if self.enabled:
            await self.provider().claim()

    def start(self) -> None:
        """A cluster gateway follows its nodes from its start (not from its first request)."""
        if self.enabled and self._warm is None:
            self._warm = asyncio.get_running_loop().create_task(self._first())

    async def _first(self) -> None:
        with contextlib.suppress(Exception):
            await self.provider().cluster()

    async def status(self) -> dict[str, Any]:
        doc = await self.provider().cluster()
        if doc["head"] == "down":
            raise UnavailableError(
                f"the Ray head at {doc['address']} does not answer ({doc['head_error']}); "
                f"{doc['nodes'].get('ready', 0)} node(s) still answer",
                hint="start the head again (ray start --head ...); hutch cluster nodes shows the nodes",
            )
        return doc

    async def nodes(self) -> list[dict[str, Any]]:
        return await self.provider().nodes()

    async def drain(self, name: str, drained: bool, move: bool = False) -> dict[str, Any]:
        """Take no new sandboxes on ``name``; with ``move``, its sandboxes go to other nodes
        too (each that cannot is listed with why, and stays where it is)."""
        if move and not drained:
            raise InvalidError("--move goes with a drain, not with --undo", hint="hutch cluster drain NODE --move")
        node = await self.provider().drain(name, drained)
        self.svc.store.nodes.drain(node["name"], drained)
        with acting(None):
            self.svc.store.events.append("node_drained" if drained else "node_undrained", None, None, node=node["name"])
        if move:
            outcome = await self._move_from(node["name"])
            node = await self.provider().drain(node["name"], drained) | outcome  # its record after the moves
        return node

    async def _move_from(self, name: str) -> dict[str, Any]:
        provider = self.provider()
        moved: list[dict[str, Any]] = []
        stayed: list[dict[str, Any]] = []
        for rec in self.svc.store.sandboxes.all((SandboxState.running, SandboxState.paused)):
            if rec.provider != CLUSTER_PROVIDER or rec.node != name:
                continue
            if rec.state == SandboxState.paused:
                stayed.append({"sandbox": rec.id, "name": rec.name, "reason": "paused: resume it to move it"})
                continue
            try:
                done = await provider.move(rec)
            except HutchError as exc:
                stayed.append({"sandbox": rec.id, "name": rec.name, "reason": exc.message})
                continue
            self.svc.store.sandboxes.update(rec.id, data=done["data"])
            with acting(None):
                self.svc.store.events.append(
                    "sandbox_moved", rec.id, None, node=done["to"], source=done["from"], left=done["left"]
                )
            moved.append({"sandbox": rec.id, "name": rec.name, "to": done["to"]})
        return {"moved": moved, "not_moved": stayed}
