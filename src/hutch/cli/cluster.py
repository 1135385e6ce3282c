"""cluster status|nodes|drain: a cluster gateway's nodes (hutch serve --cluster)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from hutch.cli.common import Ctx, emit, json_option, table
from hutch.units import format_size

if TYPE_CHECKING:
    from hutch import wire


@click.group()
def cluster() -> None:
    """A cluster gateway's nodes: sandboxes placed over the machines of a Ray cluster.

    The gateway (hutch serve --cluster RAY_ADDRESS) is the cluster's only Ray driver; each
    node runs its own hutch daemon, started by Ray, and every call on a sandbox goes to its
    node. On a gateway that is not a cluster these commands answer unavailable. They need
    an admin (the gateway's owner, its token, or a key with the admin scope).
    """


@cluster.command("status")
@json_option
@click.pass_obj
def status_(obj: Ctx) -> None:
    """The Ray head, the placement, how many nodes are in each state (exit 1 when the head is down)."""
    doc = obj.client.cluster_status()
    if obj.json:
        emit(doc)
        return
    states = ", ".join(f"{n} {s}" for s, n in doc["nodes"].items() if n) or "no nodes"
    click.echo(f"Ray head {doc['address']} {doc['head']}; placement {doc['placement']}; nodes: {states}")
    drained = f"; drained: {', '.join(doc['drained'])}" if doc["drained"] else ""
    click.echo(f"{doc['sandboxes']} sandboxes placed; a node silent {doc['detect_seconds']:g} s is lost{drained}")


def _room(room: wire.NodeRoom) -> str:
    pids = "-" if room["pids"] is None else str(room["pids"])
    return f"{format_size(max(0, room['memory']))}, {pids} pids, {room['sandboxes']} sbx"


@cluster.command()
@json_option
@click.pass_obj
def nodes(obj: Ctx) -> None:
    """Each node: its state, its sandboxes, its free room, its hutch version, how its daemon
    maps a sandbox's own users (range, subuid, single: what exec --user can do there)."""
    found = obj.client.cluster_nodes()
    if obj.json:
        emit(found)
        return
    rows = [
        [
            n["name"],
            n["state"] + (" (drained)" if n["drained"] else ""),
            str(n["sandboxes"]),
            _room(n["free"]),
            n["version"] or "-",
            n.get("users") or "-",
            n["error"] or "",
        ]
        for n in found
    ]
    table(rows, ["node", "state", "sandboxes", "free", "version", "users", "error"])


@cluster.command()
@click.argument("node")
@click.option("--undo", is_flag=True, help="Take new sandboxes on NODE again.")
@click.option(
    "--move",
    is_flag=True,
    help="Also move NODE's sandboxes to other nodes (same ids; their workspaces copied); those that cannot move "
    "(something runs in them, paused, no room) stay and are listed with why (exit 1).",
)
@json_option
@click.pass_obj
def drain(obj: Ctx, node: str, undo: bool, move: bool) -> None:
    """Place no new sandboxes on NODE (its name, or its Ray node id); those it has go on,
    or with --move go to other nodes.

    The drain is kept across gateway restarts. --undo lifts it.
    """
    doc = obj.client.cluster_drain(node, not undo, move)
    stayed = doc.get("not_moved", [])
    if obj.json:
        emit(doc)
    else:
        what = "drained: no new sandboxes go there" if doc["drained"] else "takes new sandboxes again"
        click.echo(f"node {doc['name']} ({doc['state']}, {doc['sandboxes']} sandboxes) {what}")
        for m in doc.get("moved", []):
            click.echo(f"moved {m['name'] or m['sandbox']} to {m['to']}")
        for s in stayed:
            click.echo(f"not moved {s['name'] or s['sandbox']}: {s['reason']}", err=True)
    if stayed:
        raise SystemExit(1)
