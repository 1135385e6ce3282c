"""--host-ca: a sandbox trusts the CA bundle of the machine it runs on, so TLS through hutch's egress
proxy verifies where a proxy of the network intercepts it with a CA of its own. Here the "intercepting"
CA is one the test makes: an HTTPS server in the test's network namespace presents a certificate it
signed, and the daemon's image_host_ca names it."""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import Daemon, destroy_all, sweep
from tests.integration.test_network import Upstream, upstream  # noqa: F401 - the namespace and its hosts file

TLS_SERVER = r"""
import http.server, ssl, sys
addr, port, cert, key = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"verified upstream\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
s = http.server.HTTPServer((addr, port), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
s.socket = ctx.wrap_socket(s.socket, server_side=True)
s.serve_forever()
"""
PORT = 8443
FETCH = "import urllib.request; print(urllib.request.urlopen('https://allowed.test:8443/', timeout=20).read().decode(), end='')"


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def tls(upstream: Upstream) -> Iterator[Path]:  # noqa: F811 - the fixture imported above
    """A CA of the test's own, and an HTTPS server for allowed.test whose certificate it signed."""
    tmp = Path(tempfile.mkdtemp(prefix="hutch-ca-"))
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=hutch test interception CA",
            "-keyout", str(tmp / "ca.key"), "-out", str(tmp / "ca.crt"))  # fmt: skip
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=allowed.test",
            "-keyout", str(tmp / "srv.key"), "-out", str(tmp / "srv.csr"))  # fmt: skip
    (tmp / "ext").write_text("subjectAltName=DNS:allowed.test\n")
    openssl("x509", "-req", "-in", str(tmp / "srv.csr"), "-CA", str(tmp / "ca.crt"), "-CAkey", str(tmp / "ca.key"),
            "-CAcreateserial", "-days", "2", "-extfile", str(tmp / "ext"), "-out", str(tmp / "srv.crt"))  # fmt: skip
    (tmp / "server.py").write_text(TLS_SERVER)
    argv = [sys.executable, str(tmp / "server.py"), upstream.addr, str(PORT), str(tmp / "srv.crt"), str(tmp / "srv.key")]
    proc = subprocess.Popen(["ip", "netns", "exec", upstream.ns, *argv])
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection((upstream.addr, PORT), timeout=0.5).close()
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, "the TLS server did not start"
                time.sleep(0.05)
        yield tmp / "ca.crt"
    finally:
        proc.kill()
        proc.wait(5)
        subprocess.run(["rm", "-rf", str(tmp)], check=False)


@pytest.fixture
def cad(upstream: Upstream, tls: Path) -> Iterator[Daemon]:  # noqa: F811
    home = Path(tempfile.mkdtemp(prefix="hutch-test-"))
    d = Daemon(home, HUTCH_EGRESS_HOSTS=str(upstream.hosts), HUTCH_IMAGE_HOST_CA=str(tls)).start()
    try:
        yield d
    finally:
        try:
            destroy_all(home)
        finally:
            d.stop()
            sweep(home)
            subprocess.run(["rm", "-rf", str(home)], check=False)


def test_tls_through_the_proxy_verifies_with_the_host_ca(cad: Daemon) -> None:
    net = {"mode": "allowlist", "allow_hosts": ["allowed.test"], "ports": [PORT]}
    with cad.client() as c:
        plain = str(c.create({"provider": "local", "network": net})["id"])
        trusting = str(c.create({"provider": "local", "network": net, "host_ca": True})["id"])

        r = c.exec(plain, {"command": ["python3", "-c", FETCH]})
        assert r["exit_code"] != 0 and "CERTIFICATE_VERIFY_FAILED" in str(r["stderr"]), r

        r = c.exec(trusting, {"command": ["python3", "-c", FETCH]})
        assert r["exit_code"] == 0, r
        assert r["stdout"] == "verified upstream\n"
        r = c.exec(trusting, {"command": ["/bin/sh", "-c", "echo $SSL_CERT_FILE $PIP_CERT; ls -l $SSL_CERT_FILE"]})
        assert str(r["stdout"]).split()[:3] == ["/.hutch/host-ca.crt", "/.hutch/host-ca.crt", "-r--r--r--"], r
        r = c.exec(trusting, {"command": ["/bin/sh", "-c", "echo x >> /.hutch/host-ca.crt"]})
        assert r["exit_code"] != 0, r  # the sandbox cannot change what it trusts for the host

        allowed = [e for e in c.events(trusting, types=["egress_allowed"])]
        assert [(e["data"]["host"], e["data"]["protocol"]) for e in allowed] == [("allowed.test", "connect")]
