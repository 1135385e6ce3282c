"""The sync client keeps connections to the local daemon alive between requests
(hutch.client.transport.Kept), against a real HTTP/1.1 server on a unix socket that counts
its connections: one connection carries consecutive requests; one the server closed, one
that ended with "connection: close", one older than half of http_keepalive, and a forked
child's copy are never used again; at most Kept.LIMIT are kept."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import pytest

from hutch.client import Client, http1
from hutch.client import transport as transport_module
from hutch.config import Settings
from hutch.errors import UnavailableError

BODY = b'{"ok": true}'


class Server:
    """An HTTP/1.1 server on a unix socket: every request answered, a connection served until
    its client closes it (or, with ``close_after``, closed after that many answers)."""

    def __init__(
        self, path: Path, close_after: int = 0, close_header: bool = False, reset_next: bool = False, die_on: int = 0
    ) -> None:
        path.unlink(missing_ok=True)
        self.srv = socket.socket(socket.AF_UNIX)
        self.srv.bind(str(path))
        self.srv.listen(16)
        self.close_after = close_after
        self.close_header = close_header
        self.reset_next = reset_next  # after an answer: close when the next request arrives, unread (its client is reset)
        self.closed = threading.Event()
        self.die_on = die_on  # the request (counted from 1) read and left without an answer, its connection closed
        self.connections = 0
        self.requests = 0
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.srv.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        answered = 0
        data = b""
        with conn:
            while True:
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                head, _, data = data.partition(b"\r\n\r\n")
                length = next((int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length:")), 0)
                while len(data) < length:
                    data += conn.recv(65536)
                data = data[length:]
                with self.lock:
                    self.requests += 1
                    if self.requests == self.die_on:
                        return
                extra = b"connection: close\r\n" if self.close_header else b""
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n%scontent-length: %d\r\n\r\n%s"
                    % (extra, len(BODY), BODY)
                )
                answered += 1
                if self.reset_next and not data:
                    conn.recv(1, socket.MSG_PEEK)  # the next request is there: closed under it
                    self.reset_next = False
                    return
                if self.close_header or (self.close_after and answered >= self.close_after):
                    self.closed.set()
                    return

    def stop(self) -> None:
        self.srv.close()


@pytest.fixture
def local(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> Settings:
    """Settings for a local daemon's socket (the server's), and kept connections of this test's own."""
    (tmp_path / "h").mkdir(mode=0o700)
    clean_env.setattr(transport_module, "KEPT", transport_module.Kept())
    return Settings.load(home=tmp_path / "h")


def _get(c: Client) -> None:
    assert c.request("GET", "/v1/health").json() == {"ok": True}


def test_consecutive_requests_share_one_connection(local: Settings) -> None:
    server = Server(local.socket_path)
    try:
        c = Client(local, autostart=False)
        for _ in range(5):
            _get(c)
        c.request("POST", "/v1/x", json={"a": 1})
        other = Client(local, autostart=False)  # another client of the process (an SDK makes one per sandbox)
        _get(other)
        assert (server.connections, server.requests) == (1, 7)
    finally:
        server.stop()


def test_a_connection_the_daemon_closed_is_not_used_again(local: Settings) -> None:
    server = Server(local.socket_path, close_after=1)  # as a daemon that stopped, or closed it while idle
    try:
        c = Client(local, autostart=False)
        for _ in range(3):
            server.closed.clear()
            _get(c)
            assert server.closed.wait(5)
            c.request("POST", "/v1/x", json={"a": 1})  # not sent on the closed connection: a POST is not retried
            assert server.closed.wait(5)
        assert (server.connections, server.requests) == (6, 6)
    finally:
        server.stop()


def test_a_request_the_daemon_reset_unread_is_sent_again_on_a_new_connection(local: Settings) -> None:
    server = Server(local.socket_path, reset_next=True)  # closes the kept connection under the next request
    try:
        c = Client(local, autostart=False)
        _get(c)
        assert c.request("POST", "/v1/x", json={"a": 1}).json() == {"ok": True}  # it was not performed: sent again
        assert (server.connections, server.requests) == (2, 2)
    finally:
        server.stop()


def test_a_request_the_daemon_read_and_died_on_is_not_sent_again(local: Settings) -> None:
    server = Server(local.socket_path, die_on=2)  # reads the second request, and closes without an answer
    try:
        c = Client(local, autostart=False)
        _get(c)
        with pytest.raises(UnavailableError):
            c.request("POST", "/v1/x", json={"a": 1})  # on the kept connection: it may have been performed
        assert (server.connections, server.requests) == (1, 2)
    finally:
        server.stop()


def test_connection_close_and_old_connections_are_not_used_again(local: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    server = Server(local.socket_path, close_header=True)
    try:
        c = Client(local, autostart=False)
        _get(c)
        _get(c)
        assert server.connections == 2
    finally:
        server.stop()
    server = Server(local.socket_path)
    try:
        c = Client(local, autostart=False)
        _get(c)
        _get(c)
        assert server.connections == 1
        clock = [1000.0]
        monkeypatch.setattr(transport_module.time, "monotonic", lambda: clock[0])
        _get(c)  # on the kept connection, let go again at 1000
        clock[0] += local.http_keepalive / 2 - 0.01
        _get(c)
        assert server.connections == 1
        clock[0] += local.http_keepalive / 2  # the daemon closes it after http_keepalive: half of it is the most
        _get(c)
        assert server.connections == 2
    finally:
        server.stop()


def test_at_most_limit_connections_are_kept(local: Settings) -> None:
    server = Server(local.socket_path)
    try:
        c = Client(local, autostart=False)
        held = [transport_module.KEPT.take(local.socket_file, 60.0) for _ in range(3)]  # nothing kept yet
        assert held == [None, None, None]
        conns = [c.endpoint.connection() for _ in range(transport_module.Kept.LIMIT + 3)]
        for conn in conns:
            conn.request("GET", "/v1/health", headers={})
            conn.getresponse().read()
            assert conn.done()
            transport_module.KEPT.give(local.socket_file, conn)
        assert len(transport_module.KEPT.idle) == transport_module.Kept.LIMIT
        assert sum(conn.sock is None for conn in conns) == 3  # the oldest, closed
        _get(c)
        assert server.connections == len(conns)  # the request went on a kept one
    finally:
        server.stop()


def test_a_forked_child_opens_its_own_connection(local: Settings) -> None:
    server = Server(local.socket_path)
    try:
        c = Client(local, autostart=False)
        _get(c)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: a request of its own, on a connection of its own
            try:
                _get(c)
                os.write(write, b"ok")
            finally:
                os._exit(0)
        os.close(write)
        assert os.read(read, 2) == b"ok"
        os.waitpid(pid, 0)
        os.close(read)
        _get(c)  # the parent's connection is still its own, and still open
        assert (server.connections, server.requests) == (2, 3)
    finally:
        server.stop()


def test_a_request_that_could_not_be_sent_on_a_closed_kept_connection_goes_on_a_new_one(
    local: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon closed the kept connection just after the quiet check (a race): the request
    cannot be written (EPIPE) and no answer comes; it never reached the daemon whole, so it
    goes on a new connection, a POST too, and is performed once."""
    server = Server(local.socket_path, close_after=1)
    try:
        c = Client(local, autostart=False)
        _get(c)
        assert server.closed.wait(5)
        monkeypatch.setattr(http1.Connection, "quiet", lambda self: self.sock is not None)  # the race: it looked open
        assert c.request("POST", "/v1/x", json={"a": 1}).json() == {"ok": True}
        assert (server.connections, server.requests) == (2, 2)
    finally:
        server.stop()
