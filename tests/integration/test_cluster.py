"""A cluster gateway on a real Ray cluster: three nodes (head + 2 workers), each in a network
namespace of its own, each running its own hutch daemon started by Ray (tests/raycluster.py).

The gateway (``hutch serve --cluster``) runs in the head's namespace as the only Ray driver;
the tests speak to it over its unix socket. Cases that perturb the cluster (a gateway
restart, a node killed) come last, in that order.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import hutch_env

import hutch
from hutch.client import Client
from hutch.config import Settings
from hutch.errors import CapacityError, InvalidError, UnavailableError
from hutch.providers.cluster.monitor import GATEWAY_LABEL

pytestmark = pytest.mark.integration
DEADLINE = 240.0
DETECT = 6.0  # the gateway's detection time for a silent node (HUTCH_CLUSTER_DETECT)


def until(check: Callable[[], Any], what: str, deadline: float = DEADLINE) -> Any:
    end = time.monotonic() + deadline
    while not (value := check()):
        assert time.monotonic() < end, f"gave up waiting for {what}"
        time.sleep(0.2)
    return value


class Front:
    """The gateway process and a client of it."""

    def __init__(self, cluster: Any, home: Path) -> None:
        from tests import raycluster

        self.cluster = cluster
        self.home = home
        self.gateway = raycluster.Gateway(cluster, home, HUTCH_CLUSTER_DETECT=str(DETECT))
        self.settings = Settings.load(home=home)
        self.client = Client(self.settings, autostart=False)

    def start(self) -> Front:
        self.gateway.start()
        until(lambda: sum(n["state"] == "ready" for n in self.nodes()) == 3, "three ready nodes")
        return self

    def nodes(self) -> list[dict[str, Any]]:
        try:
            return list(self.client.cluster_nodes())
        except UnavailableError:
            return []

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = hutch_env(self.home)
        return subprocess.run([sys.executable, "-m", "hutch", *args], env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def front(ray_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Front]:
    home = Path(ray_cluster.root) / "gw"
    home.mkdir()
    f = Front(ray_cluster, home).start()
    try:
        yield f
    finally:
        try:
            for rec in f.client.list():
                f.client.destroy(rec["id"])
        finally:
            f.client.close()
            f.gateway.stop()


def out(result: Any, stream: str = "stdout") -> str:
    text = result[stream]
    return base64.b64decode(text).decode() if result.get(f"{stream}_base64") else str(text)


def test_sandboxes_on_every_node_through_the_gateway(front: Front) -> None:
    c = front.client
    recs = [c.create({"limits": {"memory": 256 << 20}, "env": {"WHO": f"n{i}"}}) for i in range(3)]
    try:
        nodes = {r["node"] for r in recs}
        assert nodes == {n.ip for n in front.cluster.nodes}, "spread placement puts one on each node"
        for i, r in enumerate(recs):
            assert r["provider"] == "cluster"
            got = c.get(r["id"])
            assert got["node"] == r["node"] and got["state"] == "running"
            res = c.exec(r["id"], {"command": ["sh", "-c", "echo $WHO; echo err >&2; exit 3"]})
            assert (res["exit_code"], out(res).strip(), out(res, "stderr").strip()) == (3, f"n{i}", "err")
            c.write_file(r["id"], "/workspace/hello.txt", b"hello " + r["node"].encode(), 0o640)
            data, cut = c.read_file(r["id"], "/workspace/hello.txt")
            assert (data, cut) == (b"hello " + r["node"].encode(), False)
            names = {e["name"]: e for e in c.list_files(r["id"], "/workspace")}
            assert names["hello.txt"]["size"] == len(data) and names["hello.txt"]["mode"] & 0o777 == 0o640
            frames = list(c.exec_stream(r["id"], {"command": ["sh", "-c", "for i in 1 2 3; do echo line$i; done"]}))
            kinds = [f["type"] for f in frames]
            assert kinds[0] == "run" and kinds[-1] == "exit" and frames[-1]["exit_code"] == 0
            streamed = "".join(str(f["data"]) for f in frames if f["type"] == "stdout")
            assert streamed == "line1\nline2\nline3\n"
            run = c.start(r["id"], {"command": ["sh", "-c", "echo background; sleep 0.5; echo done"]})
            final = c.wait(run["id"], 120)
            assert final["status"] == "completed" and final["exit_code"] == 0
            page = c.output(run["id"])
            assert page["stdout"]["data"] == "background\ndone\n"
        listed = front.cli("list", "--json")
        assert listed.returncode == 0, listed.stderr
        assert {r["id"]: r["node"] for r in json.loads(listed.stdout)}.items() >= {r["id"]: r["node"] for r in recs}.items()
        shown = front.cli("get", recs[0]["id"])
        assert f"node:      {recs[0]['node']}" in shown.stdout
    finally:
        for r in recs:
            c.destroy(r["id"])
    for n in until(lambda: [n for n in front.nodes() if n["sandboxes"] == 0] if len(front.nodes()) == 3 else None, "free"):
        assert n["sandboxes"] == 0


def test_placement_respects_each_nodes_room(front: Front) -> None:
    c = front.client
    head, first, small = (n.ip for n in front.cluster.nodes)
    made: list[str] = []
    try:
        for name in (head, first):  # only the small node (4 sandboxes at most) takes new ones
            c.cluster_drain(name)
        for _ in range(4):
            rec = c.create({"limits": {"memory": 128 << 20}})
            made.append(rec["id"])
            assert rec["node"] == small
        with pytest.raises(CapacityError) as full:
            c.create({"limits": {"memory": 128 << 20}})
        assert "largest free slot" in full.value.message and small in full.value.message and "0 sandboxes" in full.value.message
        assert len(c.list()) == 4, "the refused create left no sandbox"
    finally:
        for sid in made:
            c.destroy(sid)
        for name in (head, first):
            c.cluster_drain(name, False)
    with pytest.raises(CapacityError) as big:
        c.create({"limits": {"memory": 16 << 30}})
    assert "largest free slot" in big.value.message and "(8G of memory" in big.value.message
    assert big.value.hint


def test_the_sdk_and_the_cli_choose_the_node_and_the_placement(front: Front) -> None:
    """Sandbox.create(node=, placement=), its async twin, and hutch create --node/--placement."""
    import asyncio

    worker = front.cluster.nodes[1].ip
    made: list[str] = []
    try:
        first = hutch.Sandbox.create(settings=front.settings, node=worker)
        made.append(first.id)
        assert first.info["node"] == worker
        packed = hutch.Sandbox.create(settings=front.settings, placement="pack")  # the fullest that fits: first's
        made.append(packed.id)
        assert packed.info["node"] == worker

        async def spread() -> str:
            sbx = await hutch.AsyncSandbox.create(settings=front.settings, placement="spread")
            made.append(sbx.id)
            await sbx.client.close()
            return str(sbx.info["node"])

        assert asyncio.run(spread()) != worker  # the emptiest: another node
        cli = front.cli("create", "--node", worker, "--placement", "spread", "--json")
        assert cli.returncode == 0, cli.stderr
        made.append(json.loads(cli.stdout)["id"])
        assert json.loads(cli.stdout)["node"] == worker  # a node asked for wins while it has room
    finally:
        for sid in made:
            front.client.destroy(sid)


def test_cluster_commands(front: Front) -> None:
    status = front.cli("cluster", "status", "--json")
    assert status.returncode == 0, status.stderr
    doc = json.loads(status.stdout)
    assert doc["cluster"] is True and doc["head"] == "up" and doc["nodes"]["ready"] == 3 and doc["placement"] == "spread"
    nodes = json.loads(front.cli("cluster", "nodes", "--json").stdout)
    assert {n["name"] for n in nodes} == {n.ip for n in front.cluster.nodes}
    assert all(n["version"] and n["url"].startswith("https://") for n in nodes)
    assert {n["users"] for n in nodes} == {"range"}  # every test node's daemon runs as root
    table = front.cli("cluster", "nodes").stdout.splitlines()
    assert table[0].split()[-2:] == ["USERS", "ERROR"] and all(row.split()[-1] == "range" for row in table[1:]), table
    target = front.cluster.nodes[1].ip
    drained = front.cli("cluster", "drain", target, "--json")
    assert drained.returncode == 0 and json.loads(drained.stdout)["drained"] is True
    try:
        recs = [front.client.create({}) for _ in range(2)]
        assert target not in {r["node"] for r in recs}, "a drained node takes nothing new"
        for r in recs:
            front.client.destroy(r["id"])
    finally:
        undone = front.cli("cluster", "drain", target, "--undo", "--json")
    assert undone.returncode == 0 and json.loads(undone.stdout)["drained"] is False
    unknown = front.cli("cluster", "drain", "10.99.0.9", "--json")
    assert unknown.returncode != 0 and json.loads(unknown.stdout)["error"]["kind"] == "not_found"


def test_drain_move_moves_what_it_can_and_says_why_not_for_the_rest(front: Front) -> None:
    """hutch cluster drain NODE --move: an idle sandbox goes to another node with its id, files,
    environment and secrets; one with a run going, one with a process left running and a
    paused one stay on the node, each listed with why; nothing is lost."""
    c = front.client
    victim = front.cluster.nodes[1]
    on = {"provider_options": {"node": victim.ip}}
    made: list[str] = []
    try:
        idle = c.create(on | {"name": "mover", "env": {"WHO": "moved"}, "secrets": {"TOKEN": "s3cr3t-42"}})
        busy, left, paused = (c.create(on) for _ in range(3))
        made += [r["id"] for r in (idle, busy, left, paused)]
        assert {r["node"] for r in (idle, busy, left, paused)} == {victim.ip}
        c.write_file(idle["id"], "/workspace/data/a.txt", b"alpha\n", 0o640)
        c.start(busy["id"], {"command": ["sleep", "600"]})
        c.exec(left["id"], {"command": ["sh", "-c", "sleep 600 >/dev/null 2>&1 &"]})
        c.pause(paused["id"])
        done = front.cli("cluster", "drain", victim.ip, "--move", "--json")
        assert done.returncode == 1, done.stderr  # some stayed: said, and the exit says so
        doc = json.loads(done.stdout)
        assert doc["drained"] is True and doc["sandboxes"] == 3
        [moved] = doc["moved"]
        assert (moved["sandbox"], moved["name"]) == (idle["id"], "mover") and moved["to"] != victim.ip
        why = {s["sandbox"]: s["reason"] for s in doc["not_moved"]}
        assert "run(s) going" in why[busy["id"]] and "process(es) still run" in why[left["id"]], why
        assert "paused" in why[paused["id"]] and set(why) == {busy["id"], left["id"], paused["id"]}
        now = c.get(idle["id"])
        assert now["node"] == moved["to"] and now["state"] == "running"
        assert c.read_file(idle["id"], "/workspace/data/a.txt") == (b"alpha\n", False)
        res = c.exec(idle["id"], {"command": ["sh", "-c", 'echo $WHO; test "$TOKEN" = s3cr3t-42 && echo same']})
        assert out(res) == "moved\nsame\n"
        [event] = c.events(idle["id"], types=["sandbox_moved"])
        assert (event["data"]["source"], event["data"]["node"], event["data"]["left"]) == (victim.ip, moved["to"], None)
        node = Client(Settings.load(home=victim.home), autostart=False)  # the old copy is gone from the node
        assert node.list(labels={GATEWAY_LABEL: idle["id"]}) == []
        assert len(node.list(labels={GATEWAY_LABEL: busy["id"]})) == 1
        assert out(c.exec(busy["id"], {"command": ["echo", "still here"]})) == "still here\n"
        assert c.resume(paused["id"])["state"] == "running"
    finally:
        for sid in made:
            c.destroy(sid)
        front.cli("cluster", "drain", victim.ip, "--undo")
    assert front.cli("cluster", "drain", victim.ip, "--undo", "--move").returncode != 0  # --move with --undo: refused


UPSTREAM = r"""
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"upstream on the head " + self.path.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
s = http.server.HTTPServer((sys.argv[1], 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"""


def test_network_policy_is_the_nodes_own_and_changes_live(front: Front) -> None:
    """A worker node's egress proxy enforces the policy; hutch policy changes it live."""
    head, worker = front.cluster.head, front.cluster.nodes[1]
    server = subprocess.Popen(
        ["ip", "netns", "exec", head.ns, sys.executable, "-c", UPSTREAM, head.ip], stdout=subprocess.PIPE, text=True
    )
    c = front.client
    rec = None
    try:
        assert server.stdout is not None
        url = f"http://{head.ip}:{int(server.stdout.readline())}/hi"
        spec: Any = {"network": {"mode": "allowlist", "allow_hosts": ["allowed.test"]}, "provider_options": {"node": worker.ip}}
        rec = c.create(spec)
        assert rec["node"] == worker.ip and rec["spec"]["network"]["allow_hosts"] == ["allowed.test"]

        def curl() -> str:
            res = c.exec(rec["id"], {"command": ["curl", "-sS", "-i", "-m", "20", url]})
            return out(res) + out(res, "stderr")

        first = curl()
        assert "403 Forbidden" in first and "ip_literal" in first, first  # the node's proxy answered
        port = int(url.split(":")[2].split("/")[0])
        changed = c.policy(rec["id"], {"cidrs": [f"{head.ip}/32"], "ports": [port], "remove_hosts": ["allowed.test"]})
        assert changed["spec"]["network"]["cidrs"] == [f"{head.ip}/32"] and changed["spec"]["network"]["allow_hosts"] == []
        assert "upstream on the head /hi" in curl()

        # the node's proxy recorded its decisions; the gateway relays them under its own ids
        def relayed() -> list[Any] | None:
            got = list(c.events(rec["id"], types=["egress_denied", "egress_allowed"]))
            return got if len(got) >= 2 else None

        egress = until(relayed, "the node's egress events on the gateway")
        assert [(e["type"], e["data"]["node"]) for e in egress] == [("egress_denied", worker.ip), ("egress_allowed", worker.ip)]
        assert egress[0]["data"]["reason"] == "ip_literal" and str(egress[0]["run_id"]).startswith("run_")
        assert c.get(rec["id"])["egress"] == {"allowed": 1, "denied": 1}
        c.policy(rec["id"], {"mode": "none"})
        res = c.exec(rec["id"], {"command": ["sh", "-c", f"curl -sS -m 10 -x http://127.0.0.1:3128 {url}"]})
        assert res["exit_code"] == 7 and "upstream" not in out(res)  # the node closed its listener
        assert [e["type"] for e in c.events(rec["id"])].count("policy_changed") == 2
    finally:
        server.kill()
        server.wait()
        if rec is not None:
            c.destroy(rec["id"])


def test_pause_resume_push_and_pull_on_a_remote_node(front: Front, tmp_path: Path) -> None:
    worker = front.cluster.nodes[2]
    c = front.client
    rec = c.create({"provider_options": {"node": worker.ip}})
    try:
        assert rec["node"] == worker.ip
        src = tmp_path / "src"
        (src / "sub").mkdir(parents=True)
        (src / "a.txt").write_text("alpha\n")
        (src / "sub" / "b.sh").write_text("#!/bin/sh\necho beta\n")
        (src / "sub" / "b.sh").chmod(0o755)
        assert c.push(rec["id"], str(src))["files_sent"] >= 2
        res = c.exec(rec["id"], {"command": ["sh", "-c", "cat a.txt; ./sub/b.sh"], "cwd": "/workspace"})
        assert out(res) == "alpha\nbeta\n"
        (src / "a.txt").unlink()
        (src / "c.txt").write_text("gamma\n")
        summary = c.push(rec["id"], str(src), delete=True, force=True)  # 1 of 2 files: over the guard
        assert (summary["files_sent"], summary["deleted"]) == (1, 1), summary
        res = c.exec(rec["id"], {"command": ["ls", "/workspace"]})
        assert out(res).split() == ["c.txt", "sub"]
        dest = tmp_path / "pulled"
        c.pull(rec["id"], str(dest))
        assert (dest / "c.txt").read_text() == "gamma\n" and (dest / "sub" / "b.sh").stat().st_mode & 0o777 == 0o755
        assert c.pause(rec["id"])["state"] == "paused"
        assert c.get(rec["id"])["state"] == "paused"
        node = Client(Settings.load(home=worker.home), autostart=False)  # the node's own daemon froze its sandbox
        assert [r["state"] for r in node.list(labels={GATEWAY_LABEL: rec["id"]})] == ["paused"]
        assert c.resume(rec["id"])["state"] == "running"
        assert out(c.exec(rec["id"], {"command": ["echo", "thawed"]})) == "thawed\n"
    finally:
        c.destroy(rec["id"])
    ran = front.cli("run", "--sync", str(src), "--pull", "--", "sh", "-c", "cat c.txt > made.txt")  # a one-shot sandbox
    assert ran.returncode == 0, ran.stderr
    assert (src / "made.txt").read_text() == "gamma\n"


def test_snapshots_forks_and_tenants_through_the_gateway(front: Front) -> None:
    worker = front.cluster.nodes[1]
    c = front.client
    made: list[str] = []
    try:
        rec = c.create({"provider_options": {"node": worker.ip}})
        made.append(rec["id"])
        c.write_file(rec["id"], "/workspace/a.txt", b"alpha\n", 0o600)
        c.snapshot_save(rec["id"], "cl-snap")
        restored = c.snapshot_restore("cl-snap")
        made.append(restored["id"])
        assert c.read_file(restored["id"], "/workspace/a.txt") == (b"alpha\n", False)
        c.snapshot_delete("cl-snap")
        forked = c.fork(rec["id"])
        assert (forked["created"], forked["failed"]) == (1, 0), forked
        child = forked["children"][0]
        made.append(child["sandbox"])
        assert c.get(child["sandbox"])["node"] == worker.ip and child["method"] == f"tar on node {worker.ip}"
        c.write_file(child["sandbox"], "/workspace/a.txt", b"changed in the fork\n", 0o600)
        assert c.read_file(rec["id"], "/workspace/a.txt") == (b"alpha\n", False)  # a copy, not a share
        # a tenant's workspace is kept on the gateway when its sandbox goes, and comes back on another node
        first = c.create({"tenant": "cl-tenant", "provider_options": {"node": worker.ip}})
        c.write_file(first["id"], "/workspace/kept.txt", b"kept\n", 0o600)
        c.destroy(first["id"])
        other = front.cluster.nodes[2].ip
        again = c.create({"tenant": "cl-tenant", "provider_options": {"node": other}})
        made.append(again["id"])
        assert again["node"] == other and c.read_file(again["id"], "/workspace/kept.txt") == (b"kept\n", False)
    finally:
        for ref in made:
            c.destroy(ref)
    assert c.delete_tenant("cl-tenant")["existed"]
    assert not (front.home / "cluster" / "tenants" / "cl-tenant.tar").exists()


def test_an_interactive_run_on_a_remote_node(front: Front) -> None:
    """hutch exec -i: the gateway feeds the node's attach WebSocket (the contract suite runs a terminal too)."""
    c = front.client
    rec = c.create({"provider_options": {"node": front.cluster.nodes[2].ip}})
    try:
        argv = [sys.executable, "-m", "hutch", "exec", "-i", rec["id"], "--", "sh", "-c", "read a; echo got $a; cat"]
        done = subprocess.run(argv, input="typed\nrest\n", env=hutch_env(front.home), capture_output=True, text=True, timeout=300)
        assert (done.returncode, done.stdout) == (0, "got typed\nrest\n"), done.stderr
    finally:
        c.destroy(rec["id"])


def test_exec_as_another_user_on_a_remote_node(front: Front) -> None:
    """exec --user through the gateway: a sandbox on a worker node that runs as root inside its own
    users runs one command as root, a named user or a uid (foreground, streamed, background, the CLI);
    sandboxes whose runs cannot switch users are refused with the local provider's words, before a run."""
    c = front.client
    worker = front.cluster.nodes[1].ip
    own = c.create({"user": "root", "provider_options": {"node": worker}})
    plain = c.create({"provider_options": {"node": worker}})
    gave_up = c.create({"user": "4242", "provider_options": {"node": worker}})
    try:
        assert own["node"] == worker

        def ids(user: str) -> list[str]:
            res = c.exec(own["id"], {"command": ["sh", "-c", "id -u; id -g"], "user": user, "timeout": 60.0})
            assert (res["exit_code"], res["status"]) == (0, "completed"), res
            return out(res).split()

        assert ids("root") == ["0", "0"]
        assert ids("nobody") == ["65534", "65534"]
        assert ids("4242:4343") == ["4242", "4343"]
        frames = list(c.exec_stream(own["id"], {"command": ["id", "-u"], "user": "1234"}))
        assert (frames[0]["type"], frames[-1]["type"], frames[-1]["exit_code"]) == ("run", "exit", 0), frames
        assert "".join(str(f["data"]) for f in frames if f["type"] == "stdout") == "1234\n"
        run = c.start(own["id"], {"command": ["id", "-u"], "user": "nobody"})
        final = c.wait(run["id"], 120)
        assert (final["status"], c.output(run["id"])["stdout"]["data"]) == ("completed", "65534\n"), final
        cli = front.cli("exec", "--user", "nobody", own["id"], "--", "id", "-u")
        assert (cli.returncode, cli.stdout) == (0, "65534\n"), cli.stderr
        argv = [sys.executable, "-m", "hutch", "exec", "-i", "--user", "4242", own["id"], "--"]
        argv += ["sh", "-c", "read a; id -u; echo $a"]
        done = subprocess.run(argv, input="typed\n", env=hutch_env(front.home), capture_output=True, text=True, timeout=300)
        assert (done.returncode, done.stdout) == (0, "4242\ntyped\n"), done.stderr  # the node's attach WebSocket carries it
        # a user the sandbox lacks fails that run on the node (exit 126, the node's reason), as on a local daemon
        ghost = c.exec(own["id"], {"command": ["id"], "user": "ghost"})
        assert (ghost["exit_code"], ghost["status"]) == (126, "failed") and "no user 'ghost'" in str(ghost["error"]), ghost
        for sid, why, hint in (
            (plain["id"], "maps one uid", "--user root"),
            (gave_up["id"], "runs as 4242 (uid 4242): its agent gave up root", "--user root"),
        ):
            before = c.runs(sid)
            for send in (
                lambda s=sid: c.exec(s, {"command": ["id"], "user": "nobody"}),
                lambda s=sid: list(c.exec_stream(s, {"command": ["id"], "user": "nobody"})),
                lambda s=sid: c.start(s, {"command": ["id"], "user": "nobody"}),
            ):
                with pytest.raises(InvalidError) as err:
                    send()
                assert why in err.value.message and hint in (err.value.hint or ""), err.value
            assert c.runs(sid) == before, "a refused exec --user was recorded"
            cli = front.cli("exec", "--user", "nobody", sid, "--", "id")
            assert cli.returncode == 2 and why in cli.stderr, cli
    finally:
        for rec in (own, plain, gave_up):
            c.destroy(rec["id"])


FETCH = r"""
import http.cookiejar, json, sys, urllib.request
opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
out = []
for url in sys.argv[1:]:
    try:
        with opener.open(url, timeout=60) as r:
            out.append([r.status, r.read().decode()])
    except urllib.error.HTTPError as e:
        out.append([e.code, e.read().decode()])
print(json.dumps(out))
"""


def test_an_exposed_port_on_a_remote_node_opens_on_the_gateway(front: Front) -> None:
    """hutch expose on a cluster: a server in a sandbox on a worker node, reached through the
    gateway's exposure (the gateway's loopback URL, in the gateway's own network namespace,
    as on a local daemon); each connection travels the node's port WebSocket."""
    c = front.client
    worker = front.cluster.nodes[2]
    rec = c.create({"provider_options": {"node": worker.ip}})

    def fetch(*urls: str) -> list[list[Any]]:
        argv = ["ip", "netns", "exec", front.cluster.head.ns, sys.executable, "-c", FETCH, *urls]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return list(json.loads(done.stdout))

    try:
        assert rec["node"] == worker.ip
        c.write_file(rec["id"], "/workspace/site/index.html", b"served from " + worker.ip.encode(), 0o644)
        server = ["python3", "-m", "http.server", "8000", "--bind", "127.0.0.1", "--directory", "/workspace/site"]
        c.start(rec["id"], {"command": server})
        private = c.expose(rec["id"], 8000)
        assert private["url"].startswith("http://127.0.0.1:") and "hutch_preview=" in private["url"]
        bare = private["url"].split("?")[0]
        got = until(lambda: (r := fetch(private["url"], bare)) and r[0][0] == 200 and r, "the server up, through the gateway")
        # the token traded for a cookie, then the page; the bare URL with that cookie too
        assert got == [[200, f"served from {worker.ip}"]] * 2
        assert fetch(bare)[0][0] == 401, "a private port without its token or cookie is refused"
        cli = front.cli("expose", rec["id"], "8000", "--public", "--json")
        assert cli.returncode == 0, cli.stderr
        public = json.loads(cli.stdout)["url"]
        assert fetch(public) == [[200, f"served from {worker.ip}"]]
        missing = c.expose(rec["id"], 8001, public=True)["url"]  # nothing listens there: the node says so
        [[status, page]] = fetch(missing)
        assert status == 502 and "8001" in page
    finally:
        c.destroy(rec["id"])


def test_a_ray_task_reaches_the_gateway_and_prefers_its_node(front: Front) -> None:
    """bench/cluster.py's job, small: Ray tasks pinned one per node, each making its sandbox with
    hutch.Sandbox.create() from inside the task; each sandbox lands on its task's node."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    try:
        import cluster as bench
    finally:
        sys.path.pop(0)
    doc = bench.run_job(front.cluster, front.home, snippets=9, tasks=3, pin=True)
    results = doc["results"]
    assert sorted(r["task_node"] for r in results) == sorted(n.ip for n in front.cluster.nodes)
    assert all(r["sandbox_node"] == r["task_node"] and r["ok"] == r["n"] == 3 for r in results), results


def test_a_gateway_that_is_not_a_cluster_says_unavailable(daemon: Any) -> None:
    env = hutch_env(daemon.home)
    res = subprocess.run([sys.executable, "-m", "hutch", "cluster", "status", "--json"], env=env, capture_output=True, text=True)
    assert res.returncode == 1
    err = json.loads(res.stdout)["error"]
    assert err["kind"] == "unavailable" and "not a cluster" in err["message"] and "--cluster" in err["hint"]


def test_a_ray_head_that_is_down_is_unavailable(front: Front) -> None:
    """A gateway whose --cluster names an address where no Ray head answers: unavailable, said clearly."""
    from tests import raycluster

    home = front.home.parent / "gw-nohead"
    home.mkdir()
    gateway = raycluster.Gateway(front.cluster, home, address=f"{front.cluster.head.ip}:6390").start()
    try:
        with Client(Settings.load(home=home), autostart=False) as c:
            with pytest.raises(UnavailableError) as info:
                c.cluster_status()
            assert "does not answer" in info.value.message and "6390" in info.value.message and info.value.hint
            with pytest.raises(UnavailableError):
                c.create({})
            assert all(r["state"] == "failed" for r in c.list(include_all=True)), "no live sandbox without a node"
    finally:
        gateway.stop()


def test_a_second_gateway_on_the_same_cluster_is_refused_naming_the_first(front: Front) -> None:
    """Each gateway counts only what it placed: a second one would overfill the nodes. The first
    holds the cluster's gateway lease (a Ray actor of its job); the second hutch serve --cluster
    exits with a conflict naming the first, and the first goes on."""
    from tests import raycluster

    home = front.home.parent / "gw-second"
    home.mkdir()
    second = raycluster.Gateway(front.cluster, home)
    try:
        with pytest.raises(RuntimeError) as refused:
            second.start()
        said = str(refused.value)
        assert "conflict" in said and f"another hutch gateway already drives the Ray cluster at {front.cluster.address}" in said
        assert f"HUTCH_HOME {front.home}" in said and "stop that one first" in said, said
        assert second.proc is not None and second.proc.wait(60) != 0
    finally:
        second.stop()
    assert front.client.cluster_status()["nodes"]["ready"] == 3
    rec = front.client.create({})
    assert out(front.client.exec(rec["id"], {"command": ["echo", "first"]})) == "first\n"
    front.client.destroy(rec["id"])


def test_a_node_whose_daemon_dies_while_its_ray_node_lives(front: Front) -> None:
    """Its sandboxes' calls answer unavailable naming the node (never a hang), Ray's actor starts
    the daemon again, and the sandbox is either adopted (back in time) or lost with an event naming
    the node: never silently gone."""
    c = front.client
    node = front.cluster.nodes[1]
    rec = c.create({"provider_options": {"node": node.ip}})
    assert rec["node"] == node.ip
    for pid in node.daemon_pids():
        os.kill(pid, signal.SIGKILL)
    seen = until(lambda: {n["name"]: n for n in front.nodes()}[node.ip]["state"] in ("unreachable", "lost") and True, "away")
    assert seen
    until(lambda: {n["name"]: n["state"] for n in front.nodes()}[node.ip] == "ready", "the daemon started again")
    state = c.get(rec["id"])["state"]
    if state == "running":
        assert out(c.exec(rec["id"], {"command": ["echo", "back"]})).strip() == "back"
    else:
        assert state == "lost"
        assert node.ip in c.events(rec["id"], types=["sandbox_lost"])[0]["data"]["message"]
    c.destroy(rec["id"])


def test_the_gateway_restarting_loses_nothing(front: Front) -> None:
    c = front.client
    rec = c.create({"env": {"KEPT": "in memory only"}})
    run = c.start(rec["id"], {"command": ["sh", "-c", "echo before; sleep 4; echo after"]})
    front.gateway.kill9()
    front.gateway.start()
    c.close()
    front.client = c = Client(front.settings, autostart=False)
    until(lambda: sum(n["state"] == "ready" for n in front.nodes()) == 3, "the nodes again")
    assert c.get(rec["id"])["state"] == "running" and c.get(rec["id"])["node"] == rec["node"]
    final = c.wait(run["id"], 120)
    assert final["status"] == "completed", final
    assert c.output(run["id"])["stdout"]["data"] == "before\nafter\n"
    assert out(c.exec(rec["id"], {"command": ["sh", "-c", "echo still here: $KEPT"]})).strip() == "still here: in memory only"
    # its environment's values are not in the store: the restarted gateway cannot make a copy elsewhere
    moved = front.cli("cluster", "drain", rec["node"], "--move", "--json")
    front.cli("cluster", "drain", rec["node"], "--undo")
    assert moved.returncode == 1 and json.loads(moved.stdout)["moved"] == []
    [stayed] = json.loads(moved.stdout)["not_moved"]
    assert stayed["sandbox"] == rec["id"] and "environment values and secrets" in stayed["reason"]
    assert c.get(rec["id"])["node"] == rec["node"] and c.get(rec["id"])["state"] == "running"
    c.destroy(rec["id"])


def test_a_lost_node_loses_its_sandboxes_and_only_them(front: Front) -> None:
    c = front.client
    victim = front.cluster.nodes[2]
    recs = {r["node"]: r for r in (c.create({}) for _ in range(3))}
    assert set(recs) == {n.ip for n in front.cluster.nodes}
    doomed = recs[victim.ip]
    run = c.start(doomed["id"], {"command": ["sh", "-c", "echo partial; sleep 600"]})
    until(lambda: c.output(run["id"])["stdout"]["data"] == "partial\n", "the run's first output")
    front.cluster.kill_node(victim)  # raylet, workers and the node's daemon: SIGKILL
    lost = until(lambda: c.get(doomed["id"])["state"] == "lost" and c.get(doomed["id"]), "the sandbox lost", DETECT + 120)
    assert victim.ip in (lost["error"] or "")
    events = c.events(doomed["id"], types=["sandbox_lost"])
    assert events and victim.ip in events[0]["data"]["message"]
    ended = c.run(run["id"])
    assert ended["status"] == "lost"
    assert c.output(run["id"])["stdout"]["data"] == "partial\n", "the partial output stays readable"
    for name, r in recs.items():
        if name != victim.ip:
            assert out(c.exec(r["id"], {"command": ["echo", "fine"]})).strip() == "fine"
    nodes = {n["name"]: n for n in front.nodes()}
    assert nodes[victim.ip]["state"] == "lost"
    placed = [c.create({}) for _ in range(3)]
    assert victim.ip not in {r["node"] for r in placed}, "nothing is placed on a lost node"
    for r in placed:
        c.destroy(r["id"])
    # the node comes back (its Ray node and a new daemon): its copy of the lost sandbox is removed, not adopted
    front.cluster.start_ray(victim, {"hutch_memory": float(8 << 30), "hutch_sandboxes": 4.0})
    until(lambda: {n["name"]: n["state"] for n in front.nodes()}.get(victim.ip) == "ready", "the node back")
    cleaned = until(lambda: c.events(doomed["id"], types=["sandbox_cleaned"]), "the node's copy cleaned")
    assert cleaned[0]["data"]["node"] == victim.ip
    assert c.get(doomed["id"])["state"] == "lost"
    fresh = c.create({"provider_options": {"node": victim.ip}})
    assert fresh["node"] == victim.ip
    c.destroy(fresh["id"])


def test_a_node_of_another_version_is_refused(front: Front, tmp_path: Path) -> None:
    c = front.client
    victim = front.cluster.nodes[2]
    front.cluster.kill_node(victim)
    until(lambda: {n["name"]: n["state"] for n in front.nodes()}.get(victim.ip) == "lost", "the node lost")
    other = tmp_path / "other"  # every python of that node sees another hutch version
    other.mkdir()
    (other / "sitecustomize.py").write_text("import hutch._version as v\nv.__version__ = '0.0.1+other'\n")
    room = {"hutch_memory": float(8 << 30), "hutch_sandboxes": 4.0}
    front.cluster.start_ray(victim, room, env={"PYTHONPATH": str(other)})
    refused = until(lambda: {n["name"]: n for n in front.nodes()}[victim.ip]["state"] == "refused" and front.nodes(), "refused")
    err = {n["name"]: n for n in refused}[victim.ip]["error"]
    assert "0.0.1+other" in err and hutch.__version__ in err and "nothing is placed" in err
    placed = c.create({"provider_options": {"node": victim.ip}})
    assert placed["node"] != victim.ip, "a refused node takes nothing"
    c.destroy(placed["id"])
    front.cluster.kill_node(victim)  # the same hutch again: taken back
    until(lambda: {n["name"]: n["state"] for n in front.nodes()}.get(victim.ip) != "refused", "the old node gone")
    front.cluster.start_ray(victim, room)
    until(lambda: {n["name"]: n["state"] for n in front.nodes()}.get(victim.ip) == "ready", "the node ready again")
