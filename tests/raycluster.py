"""A real Ray cluster for tests: each node (head + workers) in a network namespace of its own.

Ray binds the machine's primary interface even when told 127.0.0.1, so no Ray process of a
test ever runs in the host's namespace. The head's namespace holds a bridge; every other
node's namespace is joined to it by a veth pair, and each node has its own address on
10.77.0.0/24 (private to these namespaces: nothing outside them can route there). The
gateway (the only Ray driver) runs in the head's namespace; tests reach it over its unix
socket, which a network namespace does not hide.

Everything started is stopped by PID: each ``ray start --block`` is a child of ours, and at
the end every process left in each namespace (``ip netns pids``) is killed, then the
namespaces are deleted.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SUBNET = "10.77.0"
DEADLINE = 240.0


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


def _ns_pids(ns: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


@dataclass
class Node:
    index: int
    ns: str
    ip: str
    home: Path  # the node's HUTCH_NODE_HOME (its daemon's state)
    temp: Path  # Ray's temp dir for this node
    proc: subprocess.Popen[bytes] | None = None

    @property
    def name(self) -> str:
        return self.ip

    def pids(self) -> list[int]:
        return _ns_pids(self.ns)

    def raylet_pids(self) -> list[int]:
        return [p for p in self.pids() if _comm(p) == "raylet"]

    def daemon_pids(self) -> list[int]:
        """The node's hutch daemon (``hutch serve`` in this namespace)."""
        found = []
        for p in self.pids():
            with contextlib.suppress(OSError):
                cmd = Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")
                if b"serve" in cmd and any(c.endswith(b"hutch") or c == b"hutch" for c in cmd):
                    found.append(p)
        return found


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


@dataclass
class Cluster:
    root: Path
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    nodes: list[Node] = field(default_factory=list)
    bridge: str = ""

    @property
    def head(self) -> Node:
        return self.nodes[0]

    @property
    def address(self) -> str:
        return f"{self.head.ip}:6379"

    def env(self, node: Node) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HUTCH_", "RAY_"))}
        env |= {"HUTCH_NODE_HOME": str(node.home), "HUTCH_POOL_SIZE": "0"}  # the node's daemon: no warm pool here
        env |= {"RAY_USAGE_STATS_ENABLED": "0", "RAY_DISABLE_DOCKER_CPU_WARNING": "1"}
        # node loss is seen quickly (the defaults take up to a minute for a frozen node)
        env |= {"RAY_health_check_period_ms": "1000", "RAY_health_check_failure_threshold": "5"}
        env |= {"RAY_health_check_initial_delay_ms": "1000", "RAY_health_check_timeout_ms": "2000"}
        bindir = str(Path(sys.executable).parent)
        env["PATH"] = bindir + ":" + env.get("PATH", "/usr/bin:/bin")
        return env

    def add_namespace(self, index: int) -> Node:
        ns = f"hr{self.tag}{index}"
        ip = f"{SUBNET}.{index + 1}"
        node = Node(index, ns, ip, self.root / f"n{index}", self.root / f"r{index}")
        node.home.mkdir(mode=0o755, parents=True)
        node.temp.mkdir(parents=True)
        _run("ip", "netns", "add", ns)
        self.nodes.append(node)
        _run("ip", "-n", ns, "link", "set", "lo", "up")
        if index == 0:
            self.bridge = "br0"
            _run("ip", "-n", ns, "link", "add", "br0", "type", "bridge")
            _run("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", "br0")
            _run("ip", "-n", ns, "link", "set", "br0", "up")
            return node
        head = self.head.ns
        a, b = f"hv{self.tag}{index}a", f"hv{self.tag}{index}b"
        _run("ip", "link", "add", a, "type", "veth", "peer", "name", b)
        _run("ip", "link", "set", a, "netns", head)
        _run("ip", "link", "set", b, "netns", ns)
        _run("ip", "-n", head, "link", "set", a, "master", "br0")
        _run("ip", "-n", head, "link", "set", a, "up")
        _run("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", b)
        _run("ip", "-n", ns, "link", "set", b, "up")
        return node

    def start_ray(
        self, node: Node, resources: dict[str, float] | None = None, num_cpus: int = 2, env: dict[str, str] | None = None
    ) -> None:
        argv = ["ip", "netns", "exec", node.ns, str(Path(sys.executable).parent / "ray"), "start", "--block"]
        argv += ["--node-ip-address", node.ip, "--temp-dir", str(node.temp), "--disable-usage-stats"]
        argv += ["--num-cpus", str(num_cpus), "--object-store-memory", str(80 << 20)]
        if resources:
            argv += ["--resources", json.dumps(resources)]
        if node.index == 0:
            argv += ["--head", "--port", "6379", "--include-dashboard", "false"]
        else:
            argv += ["--address", self.address]
        log = open(self.root / f"ray{node.index}.log", "wb")  # noqa: SIM115 (kept for the process's life)
        node.proc = subprocess.Popen(
            argv, env=self.env(node) | (env or {}), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()

    def wait_raylet(self, node: Node) -> None:
        end = time.monotonic() + DEADLINE
        while not node.raylet_pids():
            if node.proc is not None and node.proc.poll() is not None:
                raise RuntimeError(f"ray start on {node.ip} ended: {(self.root / f'ray{node.index}.log').read_text()[-3000:]}")
            assert time.monotonic() < end, f"no raylet on {node.ip}"
            time.sleep(0.2)

    def kill_node(self, node: Node) -> None:
        """SIGKILL every process of the node (raylet, workers, its daemon): a machine lost."""
        for pid in node.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def teardown(self) -> None:
        for node in reversed(self.nodes):
            for _ in range(50):
                pids = node.pids()
                if not pids:
                    break
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                time.sleep(0.1)
            if node.proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    node.proc.wait(10)
        for node in reversed(self.nodes):
            subprocess.run(["ip", "netns", "del", node.ns], capture_output=True)


def start(root: Path, workers: int = 2, resources: list[dict[str, float] | None] | None = None) -> Cluster:
    """A head and ``workers`` worker nodes, each in its own namespace, all joined."""
    cluster = Cluster(root)
    try:
        for i in range(workers + 1):
            cluster.add_namespace(i)
        res = resources or [None] * (workers + 1)
        cluster.start_ray(cluster.head, res[0])
        cluster.wait_raylet(cluster.head)
        for node in cluster.nodes[1:]:
            cluster.start_ray(node, res[node.index])
        for node in cluster.nodes[1:]:
            cluster.wait_raylet(node)
    except BaseException:
        cluster.teardown()
        raise
    return cluster


class Gateway:
    """``hutch serve --cluster`` in the head's namespace (the only Ray driver); tests reach it
    over its unix socket."""

    def __init__(self, cluster: Cluster, home: Path, address: str | None = None, **env: str) -> None:
        self.cluster = cluster
        self.address = address or cluster.address
        self.home = home
        self.env = {k: v for k, v in cluster.env(cluster.head).items() if not k.startswith("HUTCH_")}
        self.env |= {"HUTCH_HOME": str(home), "HUTCH_POOL_SIZE": "0"} | env
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Gateway:
        from hutch.config import Settings
        from hutch.server.home import socket_answers

        argv = ["ip", "netns", "exec", self.cluster.head.ns, sys.executable, "-m", "hutch", "serve"]
        argv += ["--cluster", self.address]
        with open(self.home / "gateway.log", "ab") as log:
            self.proc = subprocess.Popen(argv, env=self.env, stdout=log, stderr=log)
        sock = Settings.load(home=self.home).socket_path
        end = time.monotonic() + DEADLINE
        while not socket_answers(sock):
            if self.proc.poll() is not None or time.monotonic() > end:
                raise RuntimeError("the gateway did not start: " + (self.home / "gateway.log").read_text()[-3000:])
            time.sleep(0.05)
        return self

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(30)

    def client(self) -> Any:
        from hutch.client import Client
        from hutch.config import Settings

        return Client(Settings.load(home=self.home), autostart=False)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
