"""Placement on a cluster's nodes (pure), and a daemon that is not a cluster's front door.

The cluster itself (real Ray, nodes in network namespaces) is tests/integration/test_cluster.py.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from fastapi.testclient import TestClient

from hutch.config import Settings
from hutch.errors import CapacityError, InvalidError, NotFoundError
from hutch.models import SandboxRecord, SandboxSpec, SandboxState
from hutch.providers.cluster import ClusterProvider
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


def test_a_nodes_record_says_how_its_daemon_maps_users() -> None:
    """What exec --user can do on a node shows in hutch cluster nodes: its actor's report, or None before it."""
    reported, silent = Node("a", "a-ray", {"hutch_memory": float(GIB)}), Node("b", "b-ray", state="starting")
    reported.users = "subuid"
    assert reported.describe(64)["users"] == "subuid" and silent.describe(64)["users"] is None
    from hutch.wire.cluster import NodeRecord

    assert set(reported.describe(64)) == set(NodeRecord.__annotations__)


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


def test_exec_user_is_refused_as_the_sandboxs_node_would_refuse_it(settings: Settings) -> None:
    """The gateway refuses exec --user before a run with the local provider's words, from the sandbox's
    spec and how its node's daemon maps users (its actor says; root maps a range of its own)."""
    provider = ClusterProvider(settings.replace(cluster="127.0.0.1:1"))  # Ray is never called here
    assert provider.monitor is not None and "exec_users" in provider.capabilities.declared()
    provider.monitor.nodes = {"n1": Node("n1", "r1", users="range"), "n2": Node("n2", "r2", users="single")}

    def rec(node: str, user: str | None) -> SandboxRecord:
        spec = SandboxSpec(provider="cluster", user=user)
        data = {"node": node, "node_sandbox": "sbx_on_node"}
        return SandboxRecord(id="sbx_gw", provider="cluster", state=SandboxState.running, spec=spec, created_at=time.time(),
                             updated_at=time.time(), data=data)  # fmt: skip

    for user in ("root", "nobody", "4242:4242"):
        provider.check_exec_user(rec("n1", "root"), user)  # the node switches: nothing to refuse here
    provider.check_exec_user(rec("n2", "root"), "0:0")
    for sandbox, user, why, hint in (
        (rec("n1", None), "root", "maps one uid", "--user root"),
        (rec("n1", "4242"), "root", "runs as 4242 (uid 4242): its agent gave up root", "--user root"),
        (rec("n2", "root"), "nobody", "only root (you) is mapped in sandbox sbx_gw", "usermod --add-subuids"),
    ):
        with pytest.raises(InvalidError) as err:
            provider.check_exec_user(sandbox, user)
        assert why in err.value.message and hint in (err.value.hint or ""), err.value


def test_a_node_refused_while_its_old_daemon_is_checked_keeps_the_reason() -> None:
    """A node came back with another hutch version: _connect refuses it while a health check of
    its previous daemon is still waiting; that check's failure must not replace the reason."""
    import asyncio

    from hutch.errors import UnavailableError
    from hutch.providers.cluster.monitor import Monitor

    class Stale:
        url = "https://10.0.0.9:7000"

        def __init__(self) -> None:
            self.asked = asyncio.Event()
            self.fail = asyncio.Event()

        async def health(self) -> None:
            self.asked.set()
            await self.fail.wait()
            raise UnavailableError("node n1 does not answer (ConnectError: All connection attempts failed)")

    async def main() -> None:
        monitor = Monitor(driver=None, detect=30.0, default_sandboxes=4)  # type: ignore[arg-type]
        n = node("n1")
        stale = Stale()
        n.client = stale  # type: ignore[assignment]
        check = asyncio.ensure_future(monitor._check(n, ray_alive=True))
        await stale.asked.wait()
        n.state, n.error = "refused", "node n1 runs hutch 0.0.1+other, this gateway runs 1: nothing is placed on it"
        stale.fail.set()
        await check
        assert n.state == "refused" and n.error is not None and "0.0.1+other" in n.error, n.error

    asyncio.run(main())
