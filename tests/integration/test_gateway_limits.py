"""The gateway's limits on slow and many clients, with real sockets against a real
``hutch serve --listen`` over TLS: a body must keep a minimum rate (a byte at a time is cut
off, however steadily it comes), a command's typed input is not held to that rate, and past
``max_connections`` a new connection is refused with a clear answer.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.test_remote import RemoteDaemon, _make_cert, _run_daemon

from hutch.client import Client
from hutch.config import Settings

BODY_TIMEOUT = 3  # seconds; production: 60
CAP = 4  # max_connections here


class Gw:
    def __init__(self, d: RemoteDaemon, tmp: Path, cert: Path, token: str) -> None:
        self.d, self.tmp, self.cert, self.token = d, tmp, cert, token

    def client(self) -> Client:
        return Client(
            Settings.load(home=self.tmp / "client", host=self.d.url, token_file=str(self.tmp / "token"), ca_file=str(self.cert))
        )

    def tls_socket(self) -> ssl.SSLSocket:
        host, port = self.d.url.removeprefix("https://").rsplit(":", 1)
        ctx = ssl.create_default_context(cafile=str(self.cert))
        return ctx.wrap_socket(socket.create_connection((host, int(port)), timeout=60), server_hostname=host)


@pytest.fixture(scope="module")
def gw() -> Iterator[Gw]:
    home = Path(tempfile.mkdtemp(prefix="hutch-gwl-"))
    tmp = Path(tempfile.mkdtemp(prefix="hutch-gwl-client-"))
    token = secrets.token_urlsafe(32)
    (tmp / "token").write_text(token + "\n")
    (tmp / "token").chmod(0o600)
    cert, key = _make_cert(tmp)
    args = ("--listen", "127.0.0.1:0", "--token-file", str(tmp / "token"), "--tls-cert", str(cert), "--tls-key", str(key))
    env = {"HUTCH_BODY_TIMEOUT": str(BODY_TIMEOUT), "HUTCH_HEADER_TIMEOUT": "120", "HUTCH_MAX_CONNECTIONS": str(CAP)}
    try:
        for d in _run_daemon(home, *args, **env):
            yield Gw(d, tmp, cert, token)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)


def test_a_body_trickled_a_byte_at_a_time_is_cut_off(gw: Gw) -> None:
    """A byte every half second never stalls for BODY_TIMEOUT, so a per-byte stall rule keeps
    the connection for ever; the minimum rate ends it (at about BODY_TIMEOUT seconds)."""
    with gw.tls_socket() as s:
        s.sendall(
            f"POST /v1/sandboxes HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {gw.token}\r\n"
            "content-type: application/json\r\ncontent-length: 100000\r\n\r\n{".encode()
        )
        s.settimeout(0.5)
        sent, closed, deadline = 1, False, time.monotonic() + 120  # the loop's bound, not a timing claim
        while time.monotonic() < deadline and not closed:
            try:
                data = s.recv(65536)
                closed = data == b"" or data.startswith(b"HTTP/1.1 4")
            except TimeoutError:
                try:
                    s.sendall(b" ")  # JSON whitespace: a valid body, just slow
                    sent += 1
                except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
                    closed = True
            except (ConnectionResetError, ssl.SSLError):
                closed = True
        assert closed, f"a body trickled at 2 bytes a second held its connection for {sent} bytes"
    assert gw.client().list() == []  # the gateway serves on


def test_typed_input_is_not_held_to_the_body_rate(gw: Gw) -> None:
    """hutch run with streamed input: the command waits for a line that comes after twice
    BODY_TIMEOUT of silence, and still gets it (the run's own timeouts bound such a body)."""
    c = gw.client()
    box = c.create({"limits": {"memory": "256M"}})
    r, w = os.pipe()

    def late() -> None:
        time.sleep(BODY_TIMEOUT * 2)
        os.write(w, b"hello\n")
        os.close(w)

    typist = threading.Thread(target=late)
    typist.start()
    try:
        stream = c.run_once({"sandbox": box["id"], "exec": {"command": ["sh", "-c", "read x; echo got $x"]}}, stdin=r)
        out = "".join(str(f.get("data", "")) for f in stream if f.get("type") == "stdout")
    finally:
        typist.join()
        os.close(r)
        c.destroy(box["id"])
    assert out == "got hello\n"


def test_connections_past_the_cap_are_refused_clearly(gw: Gw) -> None:
    held = [gw.tls_socket() for _ in range(CAP)]  # idle connections (handshake done, no request)
    try:
        with gw.tls_socket() as extra:
            answer = b""
            while True:
                chunk = extra.recv(65536)
                if not chunk:
                    break
                answer += chunk
        head, _, body = answer.decode().partition("\r\n\r\n")
        assert head.startswith("HTTP/1.1 503 ") and "retry-after: 1" in head.lower(), head
        error = json.loads(body)["error"]
        assert error["kind"] == "unavailable" and "max_connections" in error["message"] and error["hint"]
    finally:
        for s in held:
            s.close()
    deadline = time.monotonic() + 60  # the held connections' closing reaches the gateway
    while True:
        try:
            assert gw.client().list() == []
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
