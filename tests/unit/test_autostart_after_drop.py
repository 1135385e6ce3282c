"""hutch run's answer cut short by a daemon that dies (kill -9): the client destroys the
sandbox the run made through a daemon it starts again. Its DELETE may meet the dying
daemon's socket once (dropped: sent again to that daemon, which is gone, so refused); a call
whose first try was dropped does not start a daemon (a keyed create sent to a new daemon
could be made twice), so the orphan's destroy is asked again, and that call starts one.
Before, the sandbox stayed running whenever the first DELETE was dropped (seen under load)."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from hutch.client import AsyncClient, Client
from hutch.config import Settings

BODY = b'{"sandbox": "sbx_1", "destroyed": true}'
ANSWER = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(BODY), BODY)


def _listen(path: Path) -> socket.socket:
    path.unlink(missing_ok=True)
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(str(path))
    srv.listen(8)
    return srv


def _dying(path: Path) -> threading.Thread:
    """Takes one request and closes without an answer, then stops listening (the file stays)."""
    srv = _listen(path)

    def serve() -> None:
        conn, _ = srv.accept()
        conn.recv(65536)
        conn.close()
        srv.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def _answering(path: Path, started: list[str]) -> None:
    """What ensure_daemon does here: a daemon that answers every request on the socket."""
    started.append(str(path))
    srv = _listen(path)

    def serve() -> None:
        while True:
            conn, _ = srv.accept()
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            conn.sendall(ANSWER)
            conn.close()

    threading.Thread(target=serve, daemon=True).start()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    for key in [k for k in os.environ if k.startswith("HUTCH_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("HUTCH_HOME", str(tmp_path / "h"))
    (tmp_path / "h").mkdir(mode=0o700)
    return Settings.load()


def test_the_sync_client_destroys_an_orphan_after_a_dropped_request(home: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[str] = []
    monkeypatch.setattr("hutch.client.launcher.ensure_daemon", lambda s: _answering(s.socket_path, started))
    dying = _dying(home.socket_path)
    with Client(home) as c:
        assert c._orphaned("sbx_1")["destroyed"] is True  # type: ignore[index]
    dying.join(5)
    assert started == [str(home.socket_path)]


def test_the_async_client_destroys_an_orphan_after_a_dropped_request(home: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[str] = []
    monkeypatch.setattr("hutch.client.launcher.ensure_daemon", lambda s: _answering(s.socket_path, started))
    dying = _dying(home.socket_path)

    async def go() -> Any:
        c = AsyncClient(home)
        try:
            return await c._orphaned("sbx_1")
        finally:
            await c.close()

    assert asyncio.run(go())["destroyed"] is True
    dying.join(5)
    assert started == [str(home.socket_path)]
