"""What a node's daemon does for a cluster sandbox beyond runs and files: its network policy
(the node's own egress proxy enforces it, and its decisions are relayed here as this
gateway's events), pause/resume and workspace transfer (push/pull).

Each is the node daemon's own API, called with the gateway's credentials; the node sandbox
is a plain local sandbox, so the node applies and enforces everything itself.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import posixpath
import secrets
import tarfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from hutch.errors import HutchError
from hutch.netpolicy import NetworkPolicy
from hutch.provider.core import Interactive
from hutch.providers.cluster.http import NodeClient, sandbox
from hutch.providers.cluster.monitor import OnEvent
from hutch.providers.cluster.nodes import Node

CHUNK = 1 << 20
EGRESS = ["egress_allowed", "egress_denied"]


async def set_network(client: NodeClient, ref: str, want: NetworkPolicy) -> None:
    """Bring the node sandbox's policy to ``want``. A node's policy changes by additions
    (hutch policy's own semantics): what ``want`` drops is removed by name, and ports or CIDRs
    that shrink start again from ``none`` (only new connections see any of it)."""
    made = await client.json("GET", sandbox(ref))
    have = NetworkPolicy.model_validate(made["spec"]["network"])
    if have == want:
        return
    url = sandbox(ref) + "/policy"
    if not (set(have.ports) <= set(want.ports) and set(have.cidrs) <= set(want.cidrs)):
        made = await client.json("POST", url, json={"mode": "none"})
        have = NetworkPolicy.model_validate(made["spec"]["network"])
    hosts = set(want.allow_hosts) | set(want.deny_hosts)
    change: dict[str, Any] = {
        "mode": want.mode,
        "allow_hosts": want.allow_hosts,
        "deny_hosts": want.deny_hosts,
        "ports": [p for p in want.ports if p not in have.ports],
        "cidrs": [c for c in want.cidrs if c not in have.cidrs],
        "remove_hosts": sorted((set(have.allow_hosts) | set(have.deny_hosts)) - hosts),
    }
    await client.json("POST", url, json={k: v for k, v in change.items() if v or k == "mode"})


async def pause(client: NodeClient, ref: str) -> str:
    done = await client.json("POST", sandbox(ref) + "/pause")
    message = str(done.get("message") or "")  # "paused (METHOD)" or "already paused"
    method = message.removeprefix("paused (").removesuffix(")") if message.startswith("paused (") else "node"
    return f"{method} on node {client.name}"


async def resume(client: NodeClient, ref: str) -> None:
    await client.json("POST", sandbox(ref) + "/resume")


async def export_workspace(client: NodeClient, ref: str, dest: Path) -> int:
    """The node's pull, written to ``dest`` as it arrives."""
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        async with client.raw_stream("GET", sandbox(ref) + "/pull") as chunks:
            async for chunk in chunks:
                os.write(fd, chunk)
    finally:
        os.close(fd)
    return dest.stat().st_size


async def import_workspace(client: NodeClient, ref: str, src: Path | None, delete: list[str]) -> None:
    """The node's push. The node sends what differs from what it last received and, with
    delete, removes what it received before and is no longer listed: so the manifest is the
    node's own (unchanged) less ``delete``, plus each member of ``src`` marked new."""
    kept: dict[str, Any] = await client.json("GET", sandbox(ref) + "/manifest")
    files = {p: e for p, e in dict(kept["files"]).items() if p not in set(delete)}
    if src is not None:
        mark = "push-" + secrets.token_hex(8)  # never equal to what the node holds: every member travels
        with tarfile.open(src) as tar:
            for m in tar.getmembers():
                name = posixpath.normpath(m.name)
                if name not in (".", ""):
                    files[name] = {"type": "dir" if m.isdir() else "file", "sha256": mark, "size": m.size}
    manifest = json.dumps({"files": files}).encode()

    async def body() -> AsyncIterator[bytes]:
        yield b"%d\n" % len(manifest) + manifest
        if src is not None:
            with src.open("rb") as f:
                while chunk := f.read(CHUNK):
                    yield chunk

    params = {"delete": "true" if delete else "false", "force": "true"}
    await client.json("POST", sandbox(ref) + "/push", params=params, content=body(), timeout=None)


class Relay:
    """The egress decisions each node's proxy records, told again on this gateway under the
    gateway's sandbox and run ids (``hutch events``, ``egress`` counts of ``hutch get``).

    Each node is read from where this gateway last read it; the first read starts at this
    gateway's start, so a restarted gateway does not tell an event twice (and does not tell
    what a node recorded while no gateway ran)."""

    def __init__(self, runs: Callable[[str], dict[str, str]]) -> None:
        self.runs = runs  # a gateway sandbox's node run ids -> its own run ids
        self.ids: dict[str, str] = {}  # node sandbox id -> gateway sandbox id
        self.on_event: OnEvent = lambda *a: None
        self.started = time.time()
        self.after: dict[str, int] = {}

    async def pull(self, node: Node) -> None:
        if node.client is None or not self.ids:
            return
        params: dict[str, Any] = {"type": EGRESS, "after": self.after.get(node.name, 0), "limit": 1000}
        if node.name not in self.after:
            params["since"] = self.started
        try:
            events = await node.client.json("GET", "/v1/events", params=params)
        except HutchError:
            return  # the next round reads from the same place
        for event in events:
            self.after[node.name] = max(self.after.get(node.name, 0), int(event["seq"]))
            gid = self.ids.get(str(event.get("sandbox_id")))
            if gid is None:
                continue
            node_run = event.get("run_id")
            run_id = self.runs(gid).get(str(node_run)) if node_run else None
            self.on_event(str(event["type"]), gid, run_id, dict(event.get("data") or {}) | {"node": node.name})


async def attach(client: NodeClient, ref: str, body: dict[str, Any], live: Interactive) -> AsyncIterator[dict[str, Any]]:
    """An interactive run on the node: its attach WebSocket, fed from ``live``'s inbox; the
    node's events, as its NDJSON stream gives them. A hangup here leaves the node's socket,
    so the node hangs the run up."""
    ws = await client.websocket(sandbox(ref) + "/attach")

    async def pump() -> None:
        while True:
            msg = await live.inbox.get()
            if "stdin" in msg:
                await ws.send(json.dumps({"type": "stdin", "data": base64.b64encode(msg["stdin"]).decode()}))
            elif "resize" in msg:
                rows, cols = msg["resize"]
                await ws.send(json.dumps({"type": "resize", "rows": rows, "cols": cols}))
            elif msg.get("eof"):
                await ws.send(json.dumps({"type": "eof"}))
            elif msg.get("hangup"):
                await ws.close()
                return

    feeder: asyncio.Task[None] | None = None
    try:
        await ws.send(json.dumps({"type": "start", "tty": live.tty, "rows": live.rows, "cols": live.cols} | body))
        feeder = asyncio.create_task(pump())
        async for raw in ws:
            event = json.loads(raw)
            yield event
            if event.get("type") in ("exit", "error"):
                break
    except Exception as exc:
        from websockets.exceptions import ConnectionClosed

        if isinstance(exc, ConnectionClosed | OSError):
            raise client.unreachable(exc) from None
        raise
    finally:
        if feeder is not None:
            feeder.cancel()
            with contextlib.suppress(BaseException):
                await feeder
        await ws.close()
