"""The cluster provider: sandboxes placed on the nodes of a Ray cluster, each node running its
own hutch daemon with the local provider; this gateway is the only Ray driver.

Create picks a node with room (:mod:`~hutch.providers.cluster.nodes`), makes the sandbox
there through the node daemon's API and records the node in the sandbox's data (``hutch
get`` shows it). Every later call goes to that node's daemon over HTTPS with the gateway's
own credentials. Runs stream through the gateway and are spooled here (partial output of a
lost node stays readable). Node loss is followed by :mod:`~hutch.providers.cluster.monitor`.

Network policies, pause and push/pull are the node's own (:mod:`~hutch.providers.cluster.ops`).
Not built (declared absent, so the Service refuses them with ``invalid`` before anything is
made): images, mounts. Interactive runs use the node's attach WebSocket, connections to
exposed ports the node's port WebSocket (:mod:`~hutch.providers.cluster.tunnel`). Snapshots, forks and tenants' kept
workspaces are tars through this gateway (a fork's child is placed beside its source when
there is room; a tenant's workspace is kept here when its sandbox goes, for any node).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hutch.config import Settings
from hutch.errors import CapacityError, HutchError, InvalidError, UnavailableError
from hutch.models import FileEntry, RawOutput, SandboxRecord, SandboxSpec
from hutch.provider.core import Capabilities, CheckResult, ExecSpec
from hutch.provider.optional import CopyReport, OnGone, tenant_storage
from hutch.providers.cluster import ops, users
from hutch.providers.cluster.driver import Driver
from hutch.providers.cluster.http import NodeClient, run, sandbox
from hutch.providers.cluster.monitor import GATEWAY_LABEL, Monitor, OnEvent, OnNode, in_thread, unavailable
from hutch.providers.cluster.move import Moves
from hutch.providers.cluster.nodes import choose, find
from hutch.providers.cluster.spool import Spool
from hutch.providers.cluster.tunnel import Tunnels

PLACEMENTS = ("spread", "pack")
PREFER_LABEL = "hutch.prefer-node"  # set by the SDK inside a Ray task: the node it runs on
STARTING_WAIT = 120.0  # a create waits this long for nodes still starting before it is refused (capacity)
# the gateway's own parts of a spec (names, expiry, approvals ...) stay here; the node makes a plain local sandbox
NOT_SENT = {"name", "provider_options", "ttl", "idle_timeout", "on_expire", "tenant", "reuse_key", "require_approval"}
NOT_SENT |= {"parent", "workspace", "secret_names", "mounts", "image"}


def _not_a_cluster() -> UnavailableError:
    return UnavailableError("this gateway is not a cluster's front door", hint="start it with hutch serve --cluster RAY_ADDRESS")


def _raw(done: Mapping[str, Any], stdout: bytes = b"", stderr: bytes = b"") -> RawOutput:
    """A node's run outcome (its ``exit`` event or its run record) as this gateway's."""
    status, error = str(done.get("status")), done.get("error")
    timed_out = status == "timed_out"
    spawn = status in ("failed",) and done.get("exit_code") in (126, 127) and bool(error)
    reason = "idle_timeout" if timed_out and "idle" in str(error or "") else "timeout" if timed_out else None
    reason = "killed" if status == "killed" else "spawn" if spawn else reason
    return RawOutput(
        exit_code=int(done.get("exit_code") or 0),
        signal=int(done.get("signal") or 0),
        stdout=stdout,
        stderr=stderr,
        stdout_bytes=int(done.get("stdout_bytes") or 0),
        stderr_bytes=int(done.get("stderr_bytes") or 0),
        truncated_on_disk=bool(done.get("stored_truncated") or (done.get("truncated") and "run" not in done)),
        timed_out=timed_out,
        reason=reason,
        killed=status == "killed",
        oom_killed=status == "oom_killed",
        spawn_error=str(error) if spawn else None,
    )


def _chunk(event: Mapping[str, Any]) -> bytes:
    data = str(event.get("data", ""))
    return base64.b64decode(data) if event.get("base64") else data.encode()


class ClusterProvider:
    name = "cluster"
    capabilities = Capabilities(
        limits=frozenset({"memory", "pids", "cpus", "disk"}),
        survives_daemon=True,
        secrets=True,
        users=True,
        options=frozenset({"placement", "node"}),
        watch=True,
        events=True,
        ranged_reads=True,
        nodes=True,
        network=True,
        pause=True,
        transfer=True,
        workspace=True,
        interactive=True,
        ports=True,
        exec_users=True,
    )
    option_flags: Mapping[str, str] = {"placement": "placement (spread|pack)", "node": "node (a node's name)"}

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.driver = Driver(settings.cluster) if settings.cluster else None
        self.monitor = Monitor(self.driver, settings.cluster_detect, settings.cluster_node_sandboxes) if self.driver else None
        self.spool = Spool(settings.home / "cluster" / "sandboxes", settings.output_cap)
        self.relay = ops.Relay(self.spool.runs)
        self.tunnels = Tunnels()
        self.moves = Moves(settings.home / "cluster", self._node_spec)
        if self.monitor is not None:
            self.monitor.on_ready = self.relay.pull

    # -- the cluster -------------------------------------------------------------------------

    def _mon(self) -> Monitor:
        if self.monitor is None:
            raise _not_a_cluster()
        return self.monitor

    def bind_events(self, on_event: OnEvent) -> None:
        self.relay.on_event = on_event
        if self.monitor is not None:
            self.monitor.on_event = on_event

    def bind_nodes(self, drained: set[str], on_node: OnNode) -> None:
        if self.monitor is not None:
            self.monitor.drained = set(drained)
            self.monitor.on_node = on_node

    async def cluster(self) -> dict[str, Any]:
        mon = self._mon()
        await mon.first_round()
        nodes = [n.describe(mon.default_sandboxes) for n in mon.nodes.values()]
        states = {s: sum(1 for n in nodes if n["state"] == s) for s in ("starting", "ready", "unreachable", "lost", "refused")}
        return {
            "cluster": True,
            "address": self.settings.cluster,
            "head": "down" if mon.head_error else "up",
            "head_error": mon.head_error,
            "placement": self.settings.cluster_placement,
            "detect_seconds": mon.detect,
            "nodes": states,
            "sandboxes": sum(n["sandboxes"] for n in nodes),
            "drained": sorted(n["name"] for n in nodes if n["drained"]),
        }

    async def claim(self) -> None:
        """``hutch serve --cluster``: the cluster's gateway lease (:mod:`~hutch.providers.cluster.lease`)."""
        if self.monitor is not None:
            home = str(self.settings.home)
            await self.monitor.claim({"host": socket.gethostname(), "pid": os.getpid(), "home": home, "since": time.time()})

    async def nodes(self) -> list[dict[str, Any]]:
        mon = self._mon()
        await mon.first_round()
        return [n.describe(mon.default_sandboxes) for n in sorted(mon.nodes.values(), key=lambda n: n.name)]

    async def drain(self, name: str, drained: bool) -> dict[str, Any]:
        mon = self._mon()
        await mon.first_round()
        node = find(mon.nodes, name)
        node.drained = drained
        (mon.drained.add if drained else mon.drained.discard)(node.name)
        return node.describe(mon.default_sandboxes)

    # -- where a sandbox is ----------------------------------------------------------------

    def validate_options(self, spec: SandboxSpec) -> None:
        placement = spec.provider_options.get("placement")
        if placement is not None and placement not in PLACEMENTS:
            raise InvalidError(f"unknown placement {placement!r}", hint="use spread or pack")
        if spec.parent is not None:
            raise InvalidError("the cluster provider has no sub-agents", hint="create a sandbox of its own")

    def _where(self, rec: SandboxRecord) -> tuple[NodeClient, str]:
        mon = self._mon()
        data = self.moves.data(rec)
        name = str(data.get("node"))
        node = mon.nodes.get(name)
        if node is None or node.client is None or node.state in ("lost", "refused"):
            raise unavailable(node, name)
        return node.client, str(data["node_sandbox"])

    def _data(self, rec: SandboxRecord) -> dict[str, Any]:
        """Where ``rec`` is, also when the caller's record was read before a move."""
        return self.moves.moved.get(rec.id, rec.data)

    def _node_spec(self, rec: SandboxRecord) -> dict[str, Any]:
        """The create body of ``rec``'s sandbox on a node: a plain local sandbox, labelled with its gateway id."""
        spec = rec.spec.model_dump(mode="json", exclude=NOT_SENT)
        labels = {**rec.spec.labels, GATEWAY_LABEL: rec.id}
        return spec | {"provider": "local", "secrets": dict(rec.spec.secrets), "labels": labels}

    async def move(self, rec: SandboxRecord) -> dict[str, Any]:
        """``rec`` to another node, keeping its id (:mod:`~hutch.providers.cluster.move`)."""
        done = await self.moves.move(self._mon(), rec, self.settings.cluster_placement)
        self.relay.ids.pop(str(done["old"]), None)
        self.relay.ids[str(done["data"]["node_sandbox"])] = rec.id
        return done

    async def check(self) -> list[CheckResult]:
        if self.monitor is None:
            return [CheckResult("cluster", True, "not a cluster gateway (hutch serve --cluster RAY_ADDRESS makes one)")]
        try:
            doc = await self.cluster()
        except HutchError as exc:
            return [CheckResult("cluster", False, exc.message, exc.hint)]
        ready = doc["nodes"]["ready"]
        detail = f"Ray head {doc['address']} {doc['head']}; {ready} node(s) ready"
        return [CheckResult("cluster", doc["head"] == "up" and ready > 0, detail, "hutch cluster nodes")]

    # -- lifecycle ---------------------------------------------------------------------------

    async def create(self, rec: SandboxRecord) -> tuple[dict[str, Any], dict[str, str]]:
        mon = self._mon()
        await mon.first_round()
        mode = rec.spec.provider_options.get("placement") or self.settings.cluster_placement
        memory, pids = rec.spec.limits.memory, rec.spec.limits.pids
        # a node asked for, else the one the caller runs on (the SDK in a Ray task labels it)
        prefer = rec.spec.provider_options.get("node") or rec.spec.labels.get(PREFER_LABEL)
        seed = rec.data.get("root_seed") or {}
        prefer = prefer or (seed.get("data") or {}).get("node")  # a fork's child: beside its source, when it has room
        deadline = time.monotonic() + STARTING_WAIT
        while True:
            try:
                node = choose(list(mon.nodes.values()), memory, pids, mode, mon.default_sandboxes, prefer)
                break
            except CapacityError:  # nodes still starting (a gateway just started): wait for them, a while
                if time.monotonic() > deadline or not any(n.state in ("starting", "unreachable") for n in mon.nodes.values()):
                    raise
                await asyncio.sleep(mon.interval)
        node.placed[rec.id] = (memory, pids)  # reserved before the first await: two creates never take one slot
        assert node.client is not None
        try:
            made = await node.client.json("POST", "/v1/sandboxes", json=self._node_spec(rec))
        except BaseException:
            node.placed.pop(rec.id, None)
            raise
        data = {k: v for k, v in rec.data.items() if k != "root_seed"}  # the Service's own (tenant_storage)
        data |= {"node": node.name, "node_id": node.ray_id, "node_sandbox": made["id"]}
        kept = self._tenant_tar(rec)
        if kept is not None and kept.is_file():  # a tenant's workspace, kept here when its last sandbox went
            try:
                await ops.import_workspace(node.client, made["id"], kept, [])
            except BaseException:
                node.placed.pop(rec.id, None)
                with contextlib.suppress(HutchError):
                    await node.client.json("DELETE", sandbox(made["id"]))
                raise
        self.moves.keep(rec)
        return data, {k: f"{v} (on {node.name})" for k, v in dict(made.get("enforcement") or {}).items()}

    def watch(self, rec: SandboxRecord, on_gone: OnGone) -> bool:
        mon = self._mon()
        data = self._data(rec)
        node = mon.nodes.get(str(data.get("node")))
        if node is None or node.state == "lost":
            return False
        node.placed.setdefault(rec.id, (rec.spec.limits.memory, rec.spec.limits.pids))
        self.relay.ids[str(data.get("node_sandbox"))] = rec.id
        mon.follow(rec.id, on_gone)
        return True

    async def alive(self, rec: SandboxRecord) -> bool:
        mon = self._mon()
        data = self._data(rec)
        name = str(data.get("node"))
        node = await mon.settled(name, mon.detect + 60)
        if node is None or node.client is None or node.state in ("lost", "refused"):
            return False
        try:
            made = await node.client.json("GET", sandbox(str(data["node_sandbox"])))
        except UnavailableError:
            raise
        except HutchError:
            return False
        if made.get("state") not in ("running", "paused"):
            return False
        node.placed.setdefault(rec.id, (rec.spec.limits.memory, rec.spec.limits.pids))
        return True

    async def destroy(self, rec: SandboxRecord) -> bool:
        mon = self._mon()
        mon.unfollow(rec.id)
        await self.moves.settled(rec.id)  # a move going on ends first: then its new copy is the one destroyed
        data = self._data(rec)
        self.moves.forget(rec.id)
        self.relay.ids.pop(str(data.get("node_sandbox")), None)
        node = mon.nodes.get(str(data.get("node")))
        existed = False
        if node is not None and node.client is not None and node.state != "lost" and "node_sandbox" in data:
            kept = self._tenant_tar(rec)
            if kept is not None:  # the tenant's workspace stays on this gateway, for its next sandbox on any node
                part = kept.with_suffix(".part")
                with contextlib.suppress(HutchError):
                    await ops.export_workspace(node.client, str(data["node_sandbox"]), part)
                    part.replace(kept)
                part.unlink(missing_ok=True)
            done = await node.client.json("DELETE", sandbox(str(data["node_sandbox"])))
            existed = bool(done.get("existed", True))
        if node is not None:
            node.placed.pop(rec.id, None)
        self.spool.remove(rec.id)
        return existed

    async def close(self) -> None:
        await self.tunnels.close()
        if self.monitor is not None:
            await self.monitor.close()
        if self.driver is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(in_thread(self.driver.close), 30)

    # -- runs ------------------------------------------------------------------------------------

    def check_exec_user(self, rec: SandboxRecord, user: str) -> None:
        """ExecUsersProvider: the refusal the sandbox's node would give (see cluster/users.py)."""
        node = self.monitor.nodes.get(str(self._data(rec).get("node"))) if self.monitor is not None else None
        users.check(rec, user, node.users if node is not None else None)

    async def exec(self, rec: SandboxRecord, spec: ExecSpec) -> RawOutput:
        client, node_sandbox = self._where(rec)
        env = dict(spec.env)
        secrets = {k: env.pop(k) for k in list(env) if spec.redact and k in spec.redact}
        # redact: the node redacts its sandbox's secrets and these (None: this run asked for no redaction)
        body: dict[str, Any] = {"command": spec.argv, "env": env, "secrets": secrets, "redact": spec.redact is not None}
        body |= {"cwd": spec.cwd, "max_output": spec.max_output, "timeout": spec.timeout, "idle_timeout": spec.idle_timeout}
        if spec.user is not None:  # the node's agent switches (its local provider checks the sandbox again)
            body["user"] = spec.user
        if spec.stdin is not None:
            body |= {"stdin": base64.b64encode(spec.stdin).decode(), "stdin_base64": True}
        kept = {"stdout": bytearray(), "stderr": bytearray()}
        live = spec.stream and spec.on_output is not None
        done: dict[str, Any] | None = None
        if spec.interactive is not None:  # input and a terminal while it runs: the node's attach WebSocket
            events = ops.attach(client, node_sandbox, body, spec.interactive)
        else:
            events = client.stream("POST", sandbox(node_sandbox) + "/exec", params={"stream": "true"}, json=body)
        async for event in events:
            kind = event.get("type")
            if kind == "run":
                self.spool.begin(rec.id, spec.run_id, str(event["run_id"]))
                if spec.on_start is not None:
                    spec.on_start()
            elif kind in ("stdout", "stderr"):
                chunk = _chunk(event)
                self.spool.write(rec.id, spec.run_id, str(kind), chunk)
                if live and spec.on_output is not None:
                    await spec.on_output(str(kind), chunk)
                else:
                    room = spec.max_output - len(kept[str(kind)])
                    kept[str(kind)] += chunk[: max(0, room)]
            elif kind == "error":
                raise HutchError.from_dict(event)
            elif kind == "exit":
                done = event
        if done is None:
            raise client.unreachable(ConnectionError("the run's stream ended without its result"))
        return _raw(done, bytes(kept["stdout"]), bytes(kept["stderr"]))

    def _node_run(self, rec: SandboxRecord, run_id: str) -> str | None:
        return self.spool.node_run(rec.id, run_id)

    async def run_status(self, rec: SandboxRecord, run_id: str) -> RawOutput | None:
        node_run = self._node_run(rec, run_id)
        if node_run is None:
            return None
        try:
            client, _ = self._where(rec)
            record = await client.json("GET", run(node_run))
        except HutchError:
            return None
        return None if record.get("status") == "running" else _raw(record)

    async def runs_alive(self, rec: SandboxRecord) -> set[str]:
        client, node_sandbox = self._where(rec)
        running = await client.json("GET", sandbox(node_sandbox) + "/runs", params={"status": "running"})
        ours = self.spool.runs(rec.id)
        return {ours[r["id"]] for r in running if r["id"] in ours}

    async def kill_run(self, rec: SandboxRecord, run_id: str, sig: int) -> bool:
        node_run = self._node_run(rec, run_id)
        if node_run is None:
            return False
        client, _ = self._where(rec)
        done = await client.json("POST", run(node_run) + "/kill", json={"signal": sig})
        return bool(done.get("signalled"))

    async def read_output(self, rec: SandboxRecord, run_id: str, stream: str, offset: int, limit: int) -> tuple[bytes, int]:
        node_run = self._node_run(rec, run_id)
        if node_run is not None:
            try:
                client, _ = self._where(rec)
                params = {"stdout_offset": offset, "stderr_offset": offset, "limit": max(1, min(limit, 16 << 20))}
                page = (await client.json("GET", run(node_run) + "/output", params=params))[stream]
                return _chunk(page)[:limit], int(page["size"])
            except HutchError:
                pass  # the node is away, or the sandbox moved since (its old runs stayed): what streamed through here
        return self.spool.read(rec.id, run_id, stream, offset, limit)

    async def read_transcript(self, rec: SandboxRecord, offset: int, limit: int) -> tuple[list[dict[str, Any]], int, int]:
        client, node_sandbox = self._where(rec)
        params = {"offset": offset, "limit": max(1, min(limit, 16 << 20))}
        page = await client.json("GET", sandbox(node_sandbox) + "/logs", params=params)
        ours = self.spool.runs(rec.id)
        records = [
            {"offset": r["offset"], "run_id": ours.get(r["run_id"], r["run_id"]), "stream": r["stream"], "data": _chunk(r)}
            for r in page["records"]
        ]
        return records, int(page["next_offset"]), int(page["size"])

    async def ps(self, rec: SandboxRecord) -> list[dict[str, Any]]:
        client, node_sandbox = self._where(rec)
        procs: list[dict[str, Any]] = await client.json("GET", sandbox(node_sandbox) + "/ps")
        return procs

    # -- files -----------------------------------------------------------------------------------

    async def read_range(self, rec: SandboxRecord, path: str, offset: int, limit: int) -> tuple[bytes, bool, int | None]:
        client, node_sandbox = self._where(rec)
        params = {"path": path, "offset": offset, "limit": max(1, limit)}
        resp = await client.request("GET", sandbox(node_sandbox) + "/files", params=params)
        size = resp.headers.get("x-hutch-size")
        more = resp.headers.get("x-hutch-truncated") == "1"
        return resp.content[:limit], more, int(size) if size else None

    async def read_file(self, rec: SandboxRecord, path: str, limit: int) -> tuple[bytes, bool]:
        data, more, _ = await self.read_range(rec, path, 0, limit)
        return data, more

    async def write_file(self, rec: SandboxRecord, path: str, data: bytes, mode: int) -> None:
        client, node_sandbox = self._where(rec)
        await client.json("PUT", sandbox(node_sandbox) + "/files", params={"path": path, "mode": f"{mode:o}"}, content=data)

    async def list_files(self, rec: SandboxRecord, path: str) -> list[FileEntry]:
        client, node_sandbox = self._where(rec)
        entries = await client.json("GET", sandbox(node_sandbox) + "/ls", params={"path": path})
        return [FileEntry(**e) for e in entries]

    # -- network, pause, workspace transfer: the node's own ---------------------------------------

    async def set_network(self, rec: SandboxRecord) -> None:
        client, node_sandbox = self._where(rec)
        await ops.set_network(client, node_sandbox, rec.spec.network)

    async def connect_port(self, rec: SandboxRecord, port: int) -> socket.socket:
        """A connection to ``port`` inside the sandbox, through its node's port WebSocket."""
        client, node_sandbox = self._where(rec)
        return await self.tunnels.open(client, node_sandbox, port)

    async def pause(self, rec: SandboxRecord) -> str:
        client, node_sandbox = self._where(rec)
        return await ops.pause(client, node_sandbox)

    async def resume(self, rec: SandboxRecord) -> None:
        client, node_sandbox = self._where(rec)
        await ops.resume(client, node_sandbox)

    async def export_workspace(self, rec: SandboxRecord, dest: Path) -> int:
        client, node_sandbox = self._where(rec)
        return await ops.export_workspace(client, node_sandbox, dest)

    async def import_workspace(self, rec: SandboxRecord, src: Path | None, delete: list[str]) -> None:
        client, node_sandbox = self._where(rec)
        await ops.import_workspace(client, node_sandbox, src, delete)

    async def clone_workspace(self, src: SandboxRecord, dst: SandboxRecord) -> CopyReport:
        """A tar of ``src``'s workspace from its node, through this gateway, into ``dst``'s."""
        tmp = self.settings.home / "cluster" / f"clone-{dst.id}.tar"
        tmp.parent.mkdir(parents=True, exist_ok=True)
        try:
            await self.export_workspace(src, tmp)
            await self.import_workspace(dst, tmp, [])
        finally:
            tmp.unlink(missing_ok=True)
        here, there = self._data(src).get("node"), self._data(dst).get("node")
        return CopyReport(f"tar on node {here}" if here == there else f"tar from node {here} to node {there}")

    def _tenant_tar(self, rec: SandboxRecord) -> Path | None:
        storage = tenant_storage(rec)
        if storage is None:
            return None
        path = self.settings.home / "cluster" / "tenants" / f"{storage}.tar"
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        return path

    async def delete_tenant(self, name: str) -> bool:
        path = self.settings.home / "cluster" / "tenants" / f"{name}.tar"
        existed = path.is_file()
        path.unlink(missing_ok=True)
        return existed

    async def export_root(self, rec: SandboxRecord, dest: Path) -> int | None:
        return None  # no images: no writable root
