"""Egress policy against real sandboxes, a real proxy and real upstream servers.

The upstream servers live in a network namespace the test creates, reached over a veth
pair on a random /30 of 198.18.0.0/15 (a range hutch does not treat as private), so an
"allowed" request really leaves the host's namespace. Names are mapped with the proxy's
hosts file (``HUTCH_EGRESS_HOSTS``): the resolver the tests control. Every test checks
the event as well as the failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import Daemon, destroy_all, sweep

from hutch import HutchError, Sandbox

SERVER = r"""
import http.server, socketserver, sys
addr, port, name, log = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        with open(log, "a") as f:
            f.write(self.requestline + "\n")
        body = ("upstream %s %s\n" % (name, self.path)).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
S((addr, port), H).serve_forever()
"""


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@dataclass
class Upstream:
    ns: str
    host_addr: str  # the host's end of the veth (one of the host's own addresses)
    addr: str  # the servers' address, inside the namespace
    hosts: Path  # the proxy's hosts file
    logs: dict[str, Path]  # server name -> its request log
    ports: dict[str, int]

    def requests(self, name: str) -> list[str]:
        path = self.logs[name]
        return path.read_text().splitlines() if path.exists() else []


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    assert os.geteuid() == 0, "these tests build a network namespace: run them as root (as CI does)"
    tag = secrets.token_hex(3)
    ns, hv, nv = f"hutch-t{tag}", f"hh{tag}", f"hn{tag}"
    base = random.randrange(0, 2 * 256 * 64) * 4
    net = [198, 18 + base // 65536, (base // 256) % 256, base % 256]
    host_addr = ".".join(map(str, [*net[:3], net[3] + 1]))
    addr = ".".join(map(str, [*net[:3], net[3] + 2]))
    tmp = Path(tempfile.mkdtemp(prefix="hutch-net-"))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        ip("netns", "add", ns)
        ip("link", "add", hv, "type", "veth", "peer", "name", nv)
        ip("link", "set", nv, "netns", ns)
        ip("addr", "add", f"{host_addr}/30", "dev", hv)
        ip("link", "set", hv, "up")
        ip("-n", ns, "addr", "add", f"{addr}/30", "dev", nv)
        ip("-n", ns, "link", "set", nv, "up")
        ip("-n", ns, "link", "set", "lo", "up")
        (tmp / "server.py").write_text(SERVER)
        ports = {"allowed": 8080, "denied": 8081, "other": 9090}
        logs = {name: tmp / f"{name}.log" for name in ports}
        for name, port in ports.items():
            procs.append(
                subprocess.Popen(
                    ["ip", "netns", "exec", ns, sys.executable, str(tmp / "server.py"), addr, str(port), name, str(logs[name])]
                )
            )
        hosts = tmp / "hosts"
        hosts.write_text(
            f"{addr} allowed.test api.allowed.test denied.test other.test\n"
            "127.0.0.1 loopback.allowed.test\n"
            "10.1.2.3 private.allowed.test\n"
            "169.254.169.254 metadata.allowed.test\n"
            f"::ffff:127.0.0.1 mapped.allowed.test\n"
            f"{host_addr} self.allowed.test\n"
        )
        deadline = time.monotonic() + 10
        for port in ports.values():
            while True:
                try:
                    socket.create_connection((addr, port), timeout=0.5).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, "upstream servers did not start"
                    time.sleep(0.05)
        yield Upstream(ns, host_addr, addr, hosts, logs, ports)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(5)
        with contextlib.suppress(subprocess.CalledProcessError):
            ip("link", "del", hv)
        with contextlib.suppress(subprocess.CalledProcessError):
            ip("netns", "del", ns)
        subprocess.run(["rm", "-rf", str(tmp)], check=False)


@pytest.fixture(scope="module")
def netd(upstream: Upstream) -> Iterator[Daemon]:
    home = Path(tempfile.mkdtemp(prefix="hutch-test-"))
    d = Daemon(home, HUTCH_EGRESS_HOSTS=str(upstream.hosts)).start()
    try:
        yield d
    finally:
        try:
            destroy_all(home)
        finally:
            d.stop()
            sweep(home)
            subprocess.run(["rm", "-rf", str(home)], check=False)


@pytest.fixture(params=["bwrap", "gvisor"])
def sbx(netd: Daemon, request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    """An allowlist sandbox under each runtime (gvisor: its own network stack, the agent's relay to the proxy)."""
    box = Sandbox.create(
        allow_hosts=["allowed.test", "*.allowed.test"], allow_ports=[8080], settings=netd.settings, runtime=request.param
    )
    try:
        yield box
    finally:
        box.destroy()


def events(d: Daemon, box: Sandbox, after: int = 0) -> list[dict[str, Any]]:
    with d.client() as c:
        return [e for e in c.events(box.id, types=["egress_allowed", "egress_denied"]) if e["seq"] > after]


def last_seq(d: Daemon, box: Sandbox) -> int:
    with d.client() as c:
        found = c.events(box.id)
    return max((e["seq"] for e in found), default=0)


def curl(box: Sandbox, *args: str) -> tuple[int, str, str]:
    r = box.exec(["curl", "-sS", "-m", "10", *args])
    return r.exit_code, r.stdout, r.stderr


def test_allowed_name_reaches_the_upstream_and_is_recorded(netd: Daemon, sbx: Sandbox, upstream: Upstream) -> None:
    code, out, err = curl(sbx, "http://allowed.test:8080/hello")
    assert code == 0, err
    assert out == "upstream allowed /hello\n"
    code, out, _ = curl(sbx, "--socks5-hostname", "127.0.0.1:3128", "http://api.allowed.test:8080/socks")
    assert out == "upstream allowed /socks\n"
    got = events(netd, sbx)
    assert [(e["type"], e["data"]["host"], e["data"]["protocol"]) for e in got] == [
        ("egress_allowed", "allowed.test", "http"),
        ("egress_allowed", "api.allowed.test", "socks5"),
    ]
    assert got[0]["data"]["address"] == upstream.addr and got[0]["data"]["rule"] == "--allow-host allowed.test"
    assert got[0]["run_id"] and got[0]["run_id"].startswith("run_")
    assert sbx.refresh()["egress"] == {"allowed": 2, "denied": 0}


def test_a_name_not_allowed_gets_403_naming_the_fix(netd: Daemon, sbx: Sandbox, upstream: Upstream) -> None:
    before = len(upstream.requests("denied"))
    code, out, _ = curl(sbx, "-i", "http://denied.test:8081/")
    assert "403 Forbidden" in out and "host_not_allowed" in out
    assert f"hutch policy {sbx.id} --allow-host denied.test" in out
    code, _, err = curl(sbx, "https://denied.test:8081/")
    assert code != 0 and "403" in err
    assert len(upstream.requests("denied")) == before
    got = events(netd, sbx)
    assert [(e["type"], e["data"]["reason"], e["data"]["protocol"]) for e in got] == [
        ("egress_denied", "host_not_allowed", "http"),
        ("egress_denied", "host_not_allowed", "connect"),
    ]
    assert got[0]["data"]["address"] is None  # never resolved, let alone connected


def test_ip_literals_need_a_cidr(netd: Daemon, sbx: Sandbox, upstream: Upstream) -> None:
    before = len(upstream.requests("allowed"))
    code, out, _ = curl(sbx, "-i", f"http://{upstream.addr}:8080/")
    assert "403 Forbidden" in out and "ip_literal" in out
    code, _, _err = curl(sbx, "--socks5", "127.0.0.1:3128", f"http://{upstream.addr}:8080/")
    assert code != 0
    got = events(netd, sbx)
    assert [(e["data"]["reason"], e["data"]["protocol"]) for e in got] == [("ip_literal", "http"), ("ip_literal", "socks5")]
    assert len(upstream.requests("allowed")) == before


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("loopback.allowed.test", "loopback_address"),
        ("private.allowed.test", "private_address"),
        ("metadata.allowed.test", "metadata_address"),
        ("mapped.allowed.test", "loopback_address"),
        ("self.allowed.test", "host_address"),
    ],
)
def test_allowed_names_that_resolve_to_forbidden_addresses(netd: Daemon, sbx: Sandbox, name: str, reason: str) -> None:
    _code, out, _ = curl(sbx, "-i", f"http://{name}:8080/")
    assert "403 Forbidden" in out and reason in out
    (event,) = events(netd, sbx)
    assert event["type"] == "egress_denied" and event["data"]["reason"] == reason
    assert event["data"]["host"] == name and event["data"]["address"]


def test_port_not_allowed(netd: Daemon, sbx: Sandbox, upstream: Upstream) -> None:
    _code, out, _ = curl(sbx, "-i", "http://allowed.test:9090/")
    assert "403 Forbidden" in out and "port_not_allowed" in out
    assert upstream.requests("other") == []
    (event,) = events(netd, sbx)
    assert event["data"]["reason"] == "port_not_allowed" and event["data"]["port"] == 9090


def test_nothing_gets_out_without_the_proxy(netd: Daemon, sbx: Sandbox, upstream: Upstream) -> None:
    probe = f"""
import socket
results = []
try:
    socket.create_connection(("{upstream.addr}", 8080), timeout=3)
    results.append("tcp-open")
except OSError as e:
    results.append("tcp-" + type(e).__name__)
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(b"x", ("{upstream.addr}", 53))
    results.append("udp-sent")
except OSError as e:
    results.append("udp-" + type(e).__name__)
try:
    socket.getaddrinfo("allowed.test", 80)
    results.append("dns-resolved")
except OSError as e:
    results.append("dns-" + type(e).__name__)
print(" ".join(results))
"""
    r = sbx.exec(["python3", "-c", probe])
    assert r.stdout.split() == ["tcp-OSError", "udp-OSError", "dns-gaierror"], r.stdout + r.stderr
    code, _, _ = curl(sbx, "--noproxy", "*", "http://allowed.test:8080/")
    assert code == 6  # could not resolve: there is no resolver inside
    code, _, _err = curl(sbx, "--noproxy", "*", f"http://{upstream.addr}:8080/")
    assert code == 7  # cannot connect: no route
    ifaces = sbx.exec(["cat", "/proc/net/dev"]).stdout
    assert [line.split(":")[0].strip() for line in ifaces.splitlines()[2:]] == ["lo"]
    assert events(netd, sbx) == []  # nothing even asked the proxy


def test_chained_connect_does_not_reach_a_denied_host(netd: Daemon, sbx: Sandbox, upstream: Upstream) -> None:
    # 1. CONNECT to the proxy itself, by address: an IP literal, denied.
    script = """
import socket
s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
s.sendall(b"CONNECT 127.0.0.1:3128 HTTP/1.1\\r\\n\\r\\n")
print(s.recv(4096).split(b"\\r\\n")[0].decode())
"""
    assert sbx.exec(["python3", "-c", script]).stdout == "HTTP/1.1 403 Forbidden\n"
    # 2. A tunnel to an allowed host carrying a second CONNECT: the bytes go to that host, never to the denied one.
    script = """
import socket
s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
s.sendall(b"CONNECT allowed.test:8080 HTTP/1.1\\r\\nHost: allowed.test:8080\\r\\n\\r\\n")
print(s.recv(4096).split(b"\\r\\n")[0].decode())
s.sendall(b"CONNECT denied.test:8081 HTTP/1.1\\r\\nHost: denied.test:8081\\r\\n\\r\\n")
print(s.recv(4096).split(b"\\r\\n")[0].decode())
"""
    r = sbx.exec(["python3", "-c", script])
    lines = r.stdout.splitlines()
    assert lines[0] == "HTTP/1.1 200 Connection established"
    assert lines[1].startswith("HTTP/1.0 501")  # the allowed upstream answered it: it is not a proxy
    # 3. Pipelined absolute-form requests: the second one is not forwarded anywhere new.
    script = """
import socket
s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
s.sendall(b"GET http://allowed.test:8080/one HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n"
          b"GET http://denied.test:8081/two HTTP/1.1\\r\\nHost: denied.test\\r\\n\\r\\n")
data = b""
while chunk := s.recv(4096):
    data += chunk
print(data.decode())
"""
    r = sbx.exec(["python3", "-c", script])
    assert "upstream allowed /one" in r.stdout and "/two" not in r.stdout
    assert upstream.requests("denied") == []
    got = [(e["type"], e["data"]["host"], e["data"]["reason"]) for e in events(netd, sbx)]
    assert got == [
        ("egress_denied", "127.0.0.1", "ip_literal"),
        ("egress_allowed", "allowed.test", "allowed_host"),
        ("egress_allowed", "allowed.test", "allowed_host"),
    ]


def test_policy_changes_apply_live(netd: Daemon, sbx: Sandbox, upstream: Upstream) -> None:
    init = sbx.exec(["cat", "/proc/1/stat"]).stdout.split()[21]  # its start time: the same sandbox throughout
    code, out, _ = curl(sbx, "-i", "http://other.test:9090/")
    assert "403" in out
    policy = sbx.policy.update(allow_hosts=["other.test"], allow_ports=[9090])
    assert sbx.policy.get() == policy
    assert "other.test" in policy["allow_hosts"] and 9090 in policy["ports"]
    code, out, err = curl(sbx, "http://other.test:9090/now")
    assert code == 0 and out == "upstream other /now\n", err
    sbx.policy(deny_hosts=["*.allowed.test"])  # calling it is update()
    code, out, _ = curl(sbx, "-i", "http://api.allowed.test:8080/")
    assert "denied_host" in out
    assert sbx.exec(["cat", "/proc/1/stat"]).stdout.split()[21] == init  # never restarted
    with netd.client() as c:
        changes = c.events(sbx.id, types=["policy_changed"])
    assert len(changes) == 2
    assert "other.test" not in changes[0]["data"]["before"]["allow_hosts"]
    assert "other.test" in changes[0]["data"]["after"]["allow_hosts"]
    reasons = [e["data"]["reason"] for e in events(netd, sbx)]
    assert reasons == ["host_not_allowed", "allowed_host", "denied_host"]
    sbx.policy(network="none")
    r = sbx.exec(["sh", "-c", "echo ${HTTP_PROXY:-unset}; curl -sS -m 5 -x http://127.0.0.1:3128 http://other.test:9090/"])
    assert r.stdout.startswith("unset") and r.exit_code == 7  # the listener is gone: connection refused


def test_network_none_has_no_proxy_at_all(netd: Daemon) -> None:
    box = Sandbox.create(settings=netd.settings)
    try:
        assert box.network["mode"] == "none"
        r = box.exec(["sh", "-c", "env | grep -ci proxy; curl -sS -m 5 -x http://127.0.0.1:3128 http://allowed.test:8080/"])
        assert r.stdout.strip() == "0" and r.exit_code == 7
        assert box.refresh().get("egress") is None
        with netd.client() as c:
            assert c.events(box.id, types=["egress_allowed", "egress_denied"]) == []
    finally:
        box.destroy()


def test_open_mode_reaches_public_addresses_but_not_private_ones(netd: Daemon, upstream: Upstream) -> None:
    box = Sandbox.create(network="open", settings=netd.settings)
    try:
        _, out, _ = curl(box, f"http://{upstream.addr}:9090/ip")
        assert out == "upstream other /ip\n"
        _, out, _ = curl(box, "http://other.test:8081/name")
        assert out == "upstream denied /name\n"
        for target, reason in (
            ("http://127.0.0.2:8080/", "ip_literal"),  # 127.0.0.1 is in NO_PROXY
            ("http://loopback.allowed.test:8080/", "loopback_address"),
            (f"http://{upstream.host_addr}:8080/", "host_address"),
            ("http://self.allowed.test:8080/", "host_address"),
        ):
            _code, out, _ = curl(box, "-i", target)
            assert "403" in out and reason in out, (target, out)
        assert [e["data"]["reason"] for e in events(netd, box)] == [
            "open",
            "open",
            "ip_literal",
            "loopback_address",
            "host_address",
            "host_address",
        ]
    finally:
        box.destroy()


def test_a_secret_never_lands_anywhere(netd: Daemon) -> None:
    value = "s3cr3t-" + secrets.token_hex(8)
    run_value = "runonly-" + secrets.token_hex(8)
    env = {**netd.env, "HUTCH_TEST_TOKEN": value, "RUN_TOKEN": run_value}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "hutch", *args], env=env, capture_output=True, text=True, timeout=60)

    r = cli("create", "--json", "--secret", "TOKEN=env:HUTCH_TEST_TOKEN")
    assert r.returncode == 0, r.stderr
    sid = json.loads(r.stdout)["id"]
    try:
        script = 'echo "token=$TOKEN run=$RUN"; printf %s "$TOKEN" | cut -c1-5; printf %s "$TOKEN" >&2'
        r = cli("exec", "--json", "--secret", "RUN=env:RUN_TOKEN", sid, "--", "sh", "-c", script)
        result = json.loads(r.stdout)
        assert result["stdout"] == f"token=[redacted:TOKEN] run=[redacted:RUN]\n{value[:5]}\n"
        assert result["stderr"] == "[redacted:TOKEN]"
        # the value split across two writes is still caught
        r = cli("exec", "--json", sid, "--", "sh", "-c", f"printf %s {value[:6]}; sleep 0.3; printf '%s\\n' {value[6:]}")
        assert json.loads(r.stdout)["stdout"] == "[redacted:TOKEN]\n"
        get = cli("get", "--json", sid).stdout
        assert json.loads(get)["spec"]["secret_names"] == ["TOKEN"]
        logs = cli("logs", sid).stdout
        events_out = cli("events", "--json", sid).stdout
        assert "[redacted:TOKEN]" in logs
        for text in (get, logs, events_out, (netd.home / "test-daemon.log").read_text()):
            assert value not in text and run_value not in text
        state = b""
        for path in netd.home.rglob("*"):
            if path.is_file():
                state += path.read_bytes()
        assert value.encode() not in state and run_value.encode() not in state
        with sqlite3.connect(netd.home / "hutch.db") as db:
            dump = "\n".join(db.iterdump())
        assert value not in dump and run_value not in dump and "TOKEN" in dump
        # --no-redact shows it, for that run only
        r = cli("exec", "--json", "--no-redact", sid, "--", "sh", "-c", "echo $TOKEN")
        assert json.loads(r.stdout)["stdout"] == value + "\n"
    finally:
        cli("destroy", sid)


def test_bad_network_input_is_refused_before_anything_is_made(netd: Daemon) -> None:
    env = {**netd.env}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "hutch", *args], env=env, capture_output=True, text=True, timeout=60)

    cases = [
        (["--allow-host", "exa mple.com"], "invalid host name"),
        (["--allow-host", "*"], "invalid host name"),
        (["--allow-host", "*.com"], "too wide"),
        (["--allow-host", "10.0.0.1"], "is an IP address"),
        (["--allow-cidr", "10.0.0.0/33"], "invalid CIDR"),
        (["--allow-cidr", "nonsense"], "invalid CIDR"),
        (["--allow-host", "a.test", "--allow-port", "0"], "invalid port"),
        (["--allow-host", "a.test", "--allow-port", "70000"], "invalid port"),
        (["--network", "none", "--allow-host", "a.test"], "need a network"),
        (["--secret", "HUTCH_SURELY_UNSET_VAR"], "is not set"),
        (["--secret", "X=file:/nonexistent/secret"], "cannot read"),
        (["--secret", "X=vault:thing"], "invalid --secret"),
        (["--secret", "1BAD=env:PATH"], "invalid secret name"),
    ]
    for args, message in cases:
        r = cli("create", "--json", *args)
        assert r.returncode != 0, args
        err = json.loads(r.stdout)["error"]
        assert err["kind"] == "invalid" and message in err["message"], (args, err)
        assert err.get("hint"), args
    with netd.client() as c:
        assert c.list() == []
    with pytest.raises(HutchError) as exc:
        Sandbox.create(network="none", allow_hosts=["a.test"], settings=netd.settings)
    assert exc.value.kind == "invalid"


@pytest.mark.parametrize("runtime", ["bwrap", "gvisor"])
def test_the_network_comes_back_after_a_daemon_restart(upstream: Upstream, runtime: str) -> None:
    home = Path(tempfile.mkdtemp(prefix="hutch-test-"))
    d = Daemon(home, HUTCH_EGRESS_HOSTS=str(upstream.hosts)).start()
    try:
        box = Sandbox.create(allow_hosts=["allowed.test"], allow_ports=[8080], settings=d.settings, runtime=runtime)  # type: ignore[arg-type]
        assert curl(box, "http://allowed.test:8080/before")[1] == "upstream allowed /before\n"
        d.kill9()  # the proxy's accepting side dies with it; the port stays the sandbox's
        d = Daemon(home, HUTCH_EGRESS_HOSTS=str(upstream.hosts)).start()
        box = Sandbox.connect(box.id, settings=d.settings)
        assert curl(box, "http://allowed.test:8080/after")[1] == "upstream allowed /after\n"
        assert curl(box, "-i", "http://denied.test:8081/")[1].startswith("HTTP/1.1 403")
        reasons = [(e["type"], e["data"]["reason"]) for e in events(d, box)]
        assert reasons == [
            ("egress_allowed", "allowed_host"),
            ("egress_allowed", "allowed_host"),
            ("egress_denied", "host_not_allowed"),
        ]
    finally:
        try:
            destroy_all(home)
        finally:
            d.stop()
            sweep(home)
            subprocess.run(["rm", "-rf", str(home)], check=False)


def test_a_sandbox_cannot_exhaust_the_proxy(netd: Daemon, sbx: Sandbox) -> None:
    script = """
import socket, time
socks = [socket.create_connection(("127.0.0.1", 3128), timeout=5) for _ in range(300)]
for s in socks:
    s.setblocking(False)
deadline = time.monotonic() + 20
while True:
    closed = 0
    for s in socks:
        try:
            if s.recv(1) == b"":
                closed += 1
        except BlockingIOError:
            pass
    if closed >= 300 - 256 or time.monotonic() > deadline:
        break
    time.sleep(0.1)
print(closed)
"""
    r = sbx.exec(["python3", "-c", script])
    assert r.stdout.strip() == str(300 - 256), r.stdout + r.stderr
    # once those are gone, the proxy serves again
    assert curl(sbx, "http://allowed.test:8080/again")[1] == "upstream allowed /again\n"


def test_secrets_reach_every_run_of_a_reused_session(netd: Daemon, tmp_path: Path) -> None:
    value = "reuse-" + secrets.token_hex(8)
    env = {**netd.env, "SESSION_TOKEN": value}
    script = f'test "$TOKEN" = {value} && echo same; echo $TOKEN'
    outs = []
    for _ in range(2):  # the first run creates the session's sandbox, the second reuses it
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "hutch",
                "run",
                "--reuse",
                "--json",
                "--secret",
                "TOKEN=env:SESSION_TOKEN",
                "--",
                "sh",
                "-c",
                script,
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
        )
        outs.append(json.loads(r.stdout))
    assert [o["stdout"] for o in outs] == ["same\n[redacted:TOKEN]\n"] * 2
    assert outs[0]["sandbox_id"] == outs[1]["sandbox_id"]
    with netd.client() as c:
        c.destroy(outs[0]["sandbox_id"])


def test_a_gated_policy_change_needs_an_approval_from_the_sdk_too(netd: Daemon) -> None:
    from hutch.errors import ApprovalRequiredError

    box = Sandbox.create(allow_hosts=["allowed.test"], require_approval=["network.change"], settings=netd.settings)
    try:
        with pytest.raises(ApprovalRequiredError) as err:
            box.policy.update(allow_hosts=["other.test"])
        approval = err.value.approval_id
        assert approval and approval.startswith("apr_")
        assert box.policy.get()["allow_hosts"] == ["allowed.test"]  # nothing changed
        with netd.client() as c:
            c.decide(approval, True, by="test")
        assert box.policy.update(allow_hosts=["other.test"], approval=approval)["allow_hosts"] == ["allowed.test", "other.test"]
    finally:
        box.destroy()  # destroy is not gated for this sandbox


def test_a_range_taken_back_is_closed_at_once_the_rest_kept(netd: Daemon, sbx: Sandbox, upstream: Upstream) -> None:
    """--remove-cidr (and the SDK's remove_cidrs): the upstream's address, allowed by a CIDR,
    is an ip_literal refusal again on the next connection; the other rules stay."""
    before = sbx.policy.get()
    sbx.policy.update(allow_cidrs=[f"{upstream.addr}/32", "192.0.2.0/24"])
    code, out, err = curl(sbx, f"http://{upstream.addr}:8080/by-address")
    assert code == 0 and "/by-address" in out, err
    taken = sbx.policy.update(remove_cidrs=[f"{upstream.addr}/32"])
    assert taken["cidrs"] == sorted(set(before["cidrs"]) | {"192.0.2.0/24"}) and taken["allow_hosts"] == before["allow_hosts"]
    code, out, _ = curl(sbx, "-i", f"http://{upstream.addr}:8080/again")
    assert "403 Forbidden" in out and "ip_literal" in out
    with netd.client() as c:
        last = c.events(sbx.id, types=["policy_changed"])[-1]["data"]
    assert f"{upstream.addr}/32" in last["before"]["cidrs"] and f"{upstream.addr}/32" not in last["after"]["cidrs"]
    assert sbx.policy.update(remove_cidrs=["192.0.2.0/24"]) == before  # (the module's sandbox as it was)
