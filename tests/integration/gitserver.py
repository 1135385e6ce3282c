"""Git repositories for the workspace-source tests: bare repositories made with the real git,
served over HTTP by ``git http-backend`` (CGI, behind a small http.server) inside a network
namespace the test creates, as tests/integration/test_network.py builds its upstreams (a veth
pair on a random /30 of 198.18.0.0/15, names mapped by the proxy's hosts file): plain HTTP on
port 8080, HTTPS on 8443 with a certificate of a CA made here (the daemon trusts it through
``HUTCH_EGRESS_CA``, as tests/integration/test_placeholders.py's upstreams)."""

from __future__ import annotations

import contextlib
import os
import random
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.integration.testca import ca_pem, make_ca, server_pem

# argv: root, address, port, token, log, cert (a PEM of certificate and key, or - for plain HTTP),
# gate. /private/... needs Basic x-access-token:TOKEN; while the file ``gate`` exists, an
# authenticated request is logged, then held until it is removed (a test looks at the client then).
SERVER = r"""
import base64, http.server, os, socketserver, ssl, subprocess, sys, time
root, addr, port, token, log, cert, gate = sys.argv[1:8]
port = int(port)
WANT = "Basic " + base64.b64encode(("x-access-token:" + token).encode()).decode()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.cgi()
    def do_POST(self):
        self.cgi()
    def body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""
    def cgi(self):
        path, _, query = self.path.partition("?")
        if "://" in path:  # absolute form, from a proxy
            path = "/" + path.split("://", 1)[1].split("/", 1)[1]
        auth = self.headers.get("Authorization", "")
        with open(log, "a") as f:
            f.write("%s %s auth=%s\n" % (self.command, path, "ok" if auth == WANT else ("bad" if auth else "none")))
        deadline = time.monotonic() + 300
        while auth == WANT and os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.05)
        if path.startswith("/private/") and auth != WANT:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = self.body()
        env = {"GIT_PROJECT_ROOT": root, "GIT_HTTP_EXPORT_ALL": "1", "PATH_INFO": path, "QUERY_STRING": query,
               "REQUEST_METHOD": self.command, "CONTENT_TYPE": self.headers.get("Content-Type", ""),
               "CONTENT_LENGTH": str(len(data)), "REMOTE_ADDR": self.client_address[0], "PATH": "/usr/bin:/bin",
               "HOME": root, "GIT_CONFIG_NOSYSTEM": "1", "HTTP_GIT_PROTOCOL": self.headers.get("Git-Protocol", "")}
        if self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
        out = subprocess.run(["git", "http-backend"], input=data, env=env, capture_output=True).stdout
        sep = b"\r\n\r\n" if b"\r\n\r\n" in out else b"\n\n"
        head, _, rest = out.partition(sep)
        status, headers = 200, []
        for line in head.decode().splitlines():
            k, _, v = line.partition(":")
            if k.lower() == "status":
                status = int(v.split()[0])
            elif k:
                headers.append((k, v.strip()))
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(rest)))
        self.end_headers()
        self.wfile.write(rest)
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

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com", "GIT_CONFIG_NOSYSTEM": "1"}  # fmt: skip


def git(*args: str, cwd: Path | None = None) -> str:
    env = {**os.environ, **GIT_ENV, "HOME": str(cwd or "/")}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


@dataclass
class Repo:
    path: Path  # the bare repository
    first: str  # commit ids
    second: str


def make_repo(base: Path, name: str, big: int = 0) -> Repo:
    """A bare repository ``name`` under ``base``: a.txt "one" (tagged v1), then "two" on main
    (with ``big`` bytes of random data in big.bin)."""
    work = base / f"{name}-work"
    work.mkdir(parents=True)
    git("init", "-q", "-b", "main", cwd=work)
    (work / "a.txt").write_text("one\n")
    git("add", ".", cwd=work)
    git("commit", "-qm", "one", cwd=work)
    git("tag", "v1", cwd=work)
    first = git("rev-parse", "HEAD", cwd=work)
    (work / "a.txt").write_text("two\n")
    if big:
        (work / "big.bin").write_bytes(os.urandom(big))
    git("add", ".", cwd=work)
    git("commit", "-qm", "two", cwd=work)
    second = git("rev-parse", "HEAD", cwd=work)
    bare = base / name
    bare.parent.mkdir(parents=True, exist_ok=True)
    git("clone", "-q", "--bare", str(work), str(bare))
    git("config", "http.receivepack", "false", cwd=bare)
    git("config", "uploadpack.allowReachableSHA1InWant", "true", cwd=bare)
    return Repo(bare, first, second)


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@dataclass
class GitHost:
    addr: str
    port: int
    hosts: Path  # the proxy's hosts file: git.test -> addr
    log: Path  # one line per request: METHOD PATH auth=ok|bad|none
    token: str
    tls_port: int  # HTTPS, with a certificate for git.test of the CA in ``ca``
    ca: Path
    gate: Path  # while it exists, authenticated requests are held (after they are logged)

    @property
    def base(self) -> str:
        return f"http://git.test:{self.port}"

    @property
    def tls_base(self) -> str:
        return f"https://git.test:{self.tls_port}"

    def requests(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []


@contextlib.contextmanager
def git_host(root: Path, tmp: Path) -> Iterator[GitHost]:
    """``git http-backend`` serving ``root`` on ports 8080 (HTTP) and 8443 (HTTPS) of a namespace
    made here (and removed)."""
    tag = secrets.token_hex(3)
    ns, hv, nv = f"hutch-g{tag}", f"gh{tag}", f"gn{tag}"
    base = random.randrange(0, 2 * 256 * 64) * 4
    net = [198, 18 + base // 65536, (base // 256) % 256, base % 256]
    host_addr = ".".join(map(str, [*net[:3], net[3] + 1]))
    addr = ".".join(map(str, [*net[:3], net[3] + 2]))
    token = "tok-" + secrets.token_hex(12)
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
        (tmp / "gitserver.py").write_text(SERVER)
        ca = make_ca("git test CA")
        (tmp / "ca.pem").write_bytes(ca_pem(ca))
        (tmp / "git.pem").write_bytes(server_pem(ca, ["git.test"]))
        log, gate = tmp / "git-requests.log", tmp / "gate"
        for port, cert in ((8080, "-"), (8443, str(tmp / "git.pem"))):
            argv = [sys.executable, str(tmp / "gitserver.py"), str(root), addr, str(port), token, str(log), cert, str(gate)]
            procs.append(subprocess.Popen(["ip", "netns", "exec", ns, *argv]))
        hosts = tmp / "hosts"
        hosts.write_text(f"{addr} git.test\n")
        deadline = time.monotonic() + 20
        for port, proc in zip((8080, 8443), procs, strict=True):
            while True:
                try:
                    socket.create_connection((addr, port), timeout=0.5).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline and proc.poll() is None, "the git server did not start"
                    time.sleep(0.05)
        yield GitHost(addr, 8080, hosts, log, token, 8443, tmp / "ca.pem", gate)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(5)
        with contextlib.suppress(subprocess.CalledProcessError):
            ip("link", "del", hv)
        with contextlib.suppress(subprocess.CalledProcessError):
            ip("netns", "del", ns)
