"""A cluster gateway's bodies (``hutch serve --cluster``): the cluster, its nodes, a drain."""

from __future__ import annotations

from typing import Literal, TypedDict

__all__ = ["ClusterStatus", "DrainRequest", "Drained", "MovedSandbox", "NodeRecord", "NodeRoom", "NodeState", "StayedSandbox"]

NodeState = Literal["starting", "ready", "unreachable", "lost", "refused"]


class NodeRoom(TypedDict):
    memory: int  # bytes
    pids: int | None  # None: no bound
    sandboxes: int


class NodeRecord(TypedDict):
    """``GET /v1/cluster/nodes``: one node of the cluster as the gateway follows it."""

    name: str  # the node's address
    ray_node_id: str
    state: NodeState
    drained: bool  # takes no new sandboxes (hutch cluster drain)
    url: str | None  # its daemon
    version: str | None  # its hutch
    error: str | None  # why it is not ready
    sandboxes: int  # placed on it by this gateway
    users: str | None  # how its daemon maps a sandbox's own users: range, subuid, single (None: not reported yet)
    capacity: NodeRoom
    free: NodeRoom


class ClusterStatus(TypedDict):
    """``GET /v1/cluster``: the cluster as a whole."""

    cluster: bool
    address: str  # the Ray head
    head: Literal["up", "down"]
    head_error: str | None
    placement: Literal["spread", "pack"]
    detect_seconds: float  # a node silent this long is lost
    nodes: dict[str, int]  # how many nodes in each state
    sandboxes: int
    drained: list[str]


class DrainRequest(TypedDict, total=False):
    """``POST /v1/cluster/nodes/{name}/drain``: take no new sandboxes there (``drained: false``
    undoes it); with ``move``, its sandboxes go to other nodes too."""

    drained: bool
    move: bool


class MovedSandbox(TypedDict):
    """A sandbox a drain moved: same id, another node."""

    sandbox: str
    name: str | None
    to: str


class StayedSandbox(TypedDict):
    """A sandbox a drain could not move (it stays where it is), and why."""

    sandbox: str
    name: str | None
    reason: str


class Drained(NodeRecord, total=False):
    """The answer of a drain: the node's record; with ``move``, what moved and what did not."""

    moved: list[MovedSandbox]
    not_moved: list[StayedSandbox]
