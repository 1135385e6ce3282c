"""Exposed ports on the local daemon (``hutch expose``): a server inside a real sandbox,
reached from the host through the daemon's loopback port for it, HTTP and WebSocket."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from tests.conftest import Daemon, destroy_all, hutch_env

# A server for the sandbox: HTTP (GET echoes the path, POST echoes the body) and a WebSocket
# echo on /ws, standard library only (the sandbox has the host's python3, not websockets).
SERVER = r"""
import base64, hashlib, http.server, socketserver, struct, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_GET(self):
        if self.headers.get("Upgrade", "").lower() == "websocket":
            key = self.headers["Sec-WebSocket-Key"].encode()
            acc = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest()).decode()
            self.send_response(101); self.send_header("Upgrade", "websocket"); self.send_header("Connection", "Upgrade")
            self.send_header("Sec-WebSocket-Accept", acc); self.end_headers(); self.wfile.flush()
            while True:
                head = self.rfile.read(2)
                if len(head) < 2: return
                op, n = head[0] & 15, head[1] & 127
                if n == 126: n = struct.unpack(">H", self.rfile.read(2))[0]
                elif n == 127: n = struct.unpack(">Q", self.rfile.read(8))[0]
                mask = self.rfile.read(4); data = bytes(b ^ mask[i % 4] for i, b in enumerate(self.rfile.read(n)))
                if op == 8:
                    self.wfile.write(b"\x88\x00"); self.wfile.flush(); return
                reply = b"echo:" + data
                size = bytes([len(reply)]) if len(reply) < 126 else b"\x7e" + struct.pack(">H", len(reply))
                self.wfile.write(bytes([0x80 | op]) + size + reply)
                self.wfile.flush()
        if self.path.startswith("/redirect"):  # where an app sends its client: rewritten under a path prefix
            to = {"/redirect": "/target?x=1", "/redirect-abs": "http://127.0.0.1:8000/abs", "/redirect-away": "https://example.com/x"}
            self.send_response(302); self.send_header("Location", to[self.path]); self.send_header("Content-Length", "0")
            self.end_headers(); return
        seen = " cookie=" + self.headers.get("Cookie", "-") + " auth=" + self.headers.get("Authorization", "-")
        body = ("path=" + self.path + seen).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def do_POST(self):
        data = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(201); self.send_header("Content-Length", str(len(data))); self.end_headers(); self.wfile.write(data)
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
S(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hutch", *args], env=hutch_env(home), capture_output=True, text=True, timeout=120
    )


def start_server(daemon: Daemon, sid: str, port: int) -> None:
    c = daemon.client()
    c.write_file(sid, "/workspace/server.py", SERVER.encode())
    c.start(sid, {"command": ["python3", "/workspace/server.py", str(port)]})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # listening once a connection from inside succeeds
        probe = f"import socket; socket.create_connection(('127.0.0.1', {port}), 1)"
        if c.exec(sid, {"command": ["python3", "-c", probe]})["exit_code"] == 0:
            return
        time.sleep(0.2)
    raise AssertionError("the server inside did not start")


def get(
    url: str, headers: dict[str, str] | None = None, method: str = "GET", body: bytes | None = None
) -> tuple[int, dict[str, str], bytes]:
    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname or "", u.port, timeout=60)
    try:
        conn.request(method, u.path + (f"?{u.query}" if u.query else ""), body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


@pytest.fixture
def served(daemon: Daemon) -> tuple[Daemon, str]:
    sid = daemon.client().create({})["id"]
    start_server(daemon, sid, 8000)
    return daemon, sid


def test_an_exposed_port_opens_from_the_host_private_by_token(served: tuple[Daemon, str]) -> None:
    daemon, sid = served
    r = cli(daemon.home, "expose", sid, "8000", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert {"sandbox", "port", "url", "public"} <= set(doc) and doc["sandbox"] == sid and doc["port"] == 8000
    assert doc["public"] is False and doc["url"].startswith("http://127.0.0.1:") and "hutch_preview=" in doc["url"]
    bare = doc["url"].split("?")[0]
    status, _, body = get(bare + "index.html")
    assert status == 401 and b"private" in body  # without the token: refused, and the page says why
    status, headers, _ = get(doc["url"])
    assert status == 303 and headers["location"] == "/"  # the token becomes a cookie ...
    cookie = headers["set-cookie"].split(";")[0]
    assert "HttpOnly" in headers["set-cookie"]
    status, _, body = get(bare + "a/b?x=1", {"Cookie": cookie + "; theirs=1"})
    assert status == 200 and body.startswith(b"path=/a/b?x=1 cookie=theirs=1 ")  # ... never passed on inside
    status, _, body = get(bare + "upload", {"Cookie": cookie}, "POST", b"x" * 300_000)
    assert status == 201 and body == b"x" * 300_000
    token = doc["url"].split("hutch_preview=")[1]
    status, _, body = get(bare + "q?hutch_preview=" + token, {}, "POST", b"made")
    assert status == 201 and body == b"made"  # the token opens a request that is not a GET as it is
    assert get(bare, {"Cookie": cookie.split("=")[0] + "=forged"})[0] == 401
    events = [e["type"] for e in daemon.client().events(sid)]
    assert "port_exposed" in events


def test_a_websocket_through_the_loopback_port(served: tuple[Daemon, str]) -> None:
    from websockets.sync.client import connect

    daemon, sid = served
    doc = daemon.client().expose(sid, 8000)
    url = doc["url"].replace("http://", "ws://").replace("/?", "/ws?")
    with connect(url, open_timeout=60) as ws:
        ws.send("hello")
        assert ws.recv(timeout=60) == "echo:hello"
        ws.send(b"\x00\x01")
        assert ws.recv(timeout=60) == b"echo:\x00\x01"
    with pytest.raises(Exception, match="401"):
        connect(url.split("?")[0], open_timeout=60)


def test_public_nothing_listening_unexpose_and_destroy(served: tuple[Daemon, str]) -> None:
    daemon, sid = served
    c = daemon.client()
    pub = c.expose(sid, 8000, public=True)
    assert "hutch_preview" not in pub["url"] and get(pub["url"] + "x")[0] == 200  # anyone with the URL
    empty = c.expose(sid, 9000)
    started = time.monotonic()
    status, headers, body = get(empty["url"])
    status, headers, body = get(empty["url"].split("?")[0], {"Cookie": headers["set-cookie"].split(";")[0]})
    assert status == 502 and b"nothing listens" in body and headers["content-type"].startswith("text/html")
    assert time.monotonic() - started < 60  # answered, not hung (a generous bound: a loaded machine)
    status, _, body = get(pub["url"] + "..%2F..%2Fetc/passwd")
    assert status == 400 and b".." in body
    r = cli(daemon.home, "unexpose", sid, "9000", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["closed"] is True
    with pytest.raises(OSError):
        get(empty["url"])  # its port is closed
    assert [p["port"] for p in c.ports(sid)] == [8000]
    c.destroy(sid)
    with pytest.raises(OSError):
        get(pub["url"])  # closed with its sandbox
    types = [e["type"] for e in c.events(sid)]
    assert types.count("port_unexposed") == 2


def test_exposures_outlive_a_restart_of_the_daemon(served: tuple[Daemon, str]) -> None:
    """Kept in the store: after a restart the port is exposed again (on a new loopback port),
    the token given before still opens it, no prefix rewrites a redirect; a destroyed
    sandbox's exposures do not come back."""
    daemon, sid = served
    c = daemon.client()
    before = c.expose(sid, 8000)
    gone = c.create({})["id"]
    c.expose(gone, 8001, public=True)
    daemon.stop()
    daemon.start()
    c = daemon.client()
    after = c.ports(sid)
    assert [p["port"] for p in after] == [8000] and after[0]["public"] is False
    token = before["url"].split("hutch_preview=")[1]
    assert after[0]["url"].split("hutch_preview=")[1] == token
    status, headers, _ = get(after[0]["url"])
    assert status == 303
    cookie = {"Cookie": headers["set-cookie"].split(";")[0]}
    status, _, body = get(after[0]["url"].split("?")[0] + "again", cookie)
    assert status == 200 and body.startswith(b"path=/again ")
    status, headers, _ = get(after[0]["url"].split("?")[0] + "redirect", cookie)
    assert status == 302 and headers["location"] == "/target?x=1"
    assert any(e["type"] == "port_exposed" and e["data"].get("restored") for e in c.events(sid))
    c.destroy(gone)
    daemon.stop()
    daemon.start()
    assert daemon.client().ports(sid)[0]["port"] == 8000
    assert daemon.client().ports(gone) == []


def test_bad_ports_are_refused(served: tuple[Daemon, str]) -> None:
    daemon, sid = served
    r = cli(daemon.home, "expose", sid, "70000")
    assert r.returncode == 2
    r = cli(daemon.home, "expose", "sbx_nosuch", "8000", "--json")
    assert r.returncode == 1 and json.loads(r.stdout)["error"]["kind"] == "not_found"


def test_a_slowloris_on_a_loopback_port_is_cut_off_and_others_are_served(hutch_home: Path) -> None:
    """Clients that send a request head one byte every two seconds are closed at the header
    deadline (4 s here), long before their head would be complete, and ordinary requests to
    the same port are answered meanwhile."""
    import select
    import socket

    d = Daemon(hutch_home, HUTCH_HEADER_TIMEOUT="4").start()
    try:
        sid = d.client().create({})["id"]
        start_server(d, sid, 8000)
        url = d.client().expose(sid, 8000, public=True)["url"]
        port = urlsplit(url).port
        head = b"GET /slow HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"s" * 40 + b"\r\n\r\n"  # 60+ s at a byte each 2 s
        slow = [socket.create_connection(("127.0.0.1", port or 0), timeout=60) for _ in range(5)]
        cut: dict[int, int] = {}  # connection -> bytes it had sent when the daemon closed it
        served = 0
        try:
            for sent in range(len(head)):
                for i, s in enumerate(slow):
                    if i in cut:
                        continue
                    try:
                        s.sendall(head[sent : sent + 1])
                    except OSError:
                        cut[i] = sent
                        continue
                    if select.select([s], [], [], 0)[0] and s.recv(1024) == b"":
                        cut[i] = sent
                if len(cut) == len(slow):
                    break
                status, _, body = get(url + "fast")  # another client, served while the slow ones wait
                assert status == 200 and body.startswith(b"path=/fast"), body
                served += 1
                time.sleep(2)
        finally:
            for s in slow:
                s.close()
        assert len(cut) == len(slow), f"still open after the whole head: {sorted(set(range(len(slow))) - set(cut))}"
        assert all(n < len(head) - 1 for n in cut.values()), cut  # cut off before their heads were complete
        assert served >= 1
        assert get(url + "after")[0] == 200  # the port still serves
    finally:
        try:
            destroy_all(hutch_home)
        finally:
            d.stop()
