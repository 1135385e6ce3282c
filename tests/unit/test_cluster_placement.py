"""Placement on a cluster's nodes (pure), and a daemon that is not a cluster's front door.

The cluster itself (real Ray, nodes in network namespaces) is tests/integration/test_cluster.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from hutch.errors import CapacityError, NotFoundError
from hutch.providers.cluster.nodes import Node, choose, find

GIB = 1 << 30


def node(name: str, memory: int = 8 * GIB, placed: int = 0, state: str = "ready", **res: float) -> Node:
    n = Node(name, f"{name}-ray", {"hutch_memory": float(memory), **res}, state=state)
    n.client = object()  # type: ignore[assignment]  # placeable needs a daemon to talk to; never called here
    n.placed = {f"sbx{i}": (GIB, 100) for i in range(placed)}
    return n


def test_spread_takes_the_emptiest_node_and_pack_the_fullest_that_fits() -> None:
    nodes = [node("a", placed=2), node("b", placed=0), node("c", placed=1, hutch_sandboxes=2)]
    assert choose(nodes, GIB, 100, "spread", 64).name == "b"
    assert choose(nodes, GIB, 100, "pack", 64).name == "a"
    assert choose(nodes, GIB, 100, "spread", 64, prefer="c").name == "c", "a preferred node with room"
    nodes[2].placed["x"] = (GIB, 100)  # c is full now (2 of 2)
    assert choose(nodes, GIB, 100, "spread", 64, prefer="c").name == "b", "a full preferred node is passed over"


def test_lost_drained_and_refused_nodes_take_nothing() -> None:
    lost, drained, refused = node("a", state="lost"), node("b"), node("c", state="refused")
    drained.drained = True
    with pytest.raises(CapacityError) as info:
        choose([lost, drained, refused], GIB, 100, "spread", 64)
    assert "none is ready" in info.value.message and "b drained" in info.value.message and info.value.hint


def test_no_room_names_the_largest_free_slot() -> None:
    nodes = [node("a", memory=4 * GIB, placed=1), node("b", memory=8 * GIB, placed=2, hutch_pids=1000)]
    with pytest.raises(CapacityError) as info:
        choose(nodes, 16 * GIB, 100, "spread", 64)
    msg = info.value.message
    assert "16G" in msg and "largest free slot is on b (6G of memory, 62 sandboxes, 800 pids)" in msg, msg
    assert choose(nodes, GIB, 900, "pack", 64).name == "a", "b has 800 pids left, a no bound"


def test_pids_bound_a_node() -> None:
    only = [node("b", hutch_pids=1000, placed=2)]  # 800 left
    with pytest.raises(CapacityError):
        choose(only, GIB, 900, "spread", 64)
    assert choose(only, GIB, 800, "spread", 64).name == "b"


def test_nodes_are_found_by_name_or_ray_id() -> None:
    nodes = {"a": node("a"), "b": node("b")}
    assert find(nodes, "b").name == "b" and find(nodes, "a-ray").name == "a"
    with pytest.raises(NotFoundError) as info:
        find(nodes, "zz")
    assert "a, b" in (info.value.hint or "")


def test_a_daemon_that_is_not_a_cluster_answers_unavailable(app_client: TestClient) -> None:
    for method, path, body in (
        ("GET", "/v1/cluster", None),
        ("GET", "/v1/cluster/nodes", None),
        ("POST", "/v1/cluster/nodes/n1/drain", {"drained": True}),
    ):
        resp = app_client.request(method, path, json=body)
        err: dict[str, Any] = resp.json()["error"]
        assert (resp.status_code, err["kind"]) == (503, "unavailable"), (path, err)
        assert "not a cluster" in err["message"] and "--cluster" in err["hint"]
