"""The daemon's side of the agent protocol, against a fake agent on a real unix socket."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hutch.errors import InvalidError
from hutch.providers.local import channel
from hutch.providers.local.agent import wire

OUT = 3 << 20  # what the fake run writes to stdout, in 64 KiB frames


class FakeAgent:
    """Answers each connection with ``reply(conn, request, fds)``; keeps what it was sent."""

    def __init__(self, path: Path, reply: Callable[[socket.socket, dict[str, Any], list[int]], None]) -> None:
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(path))
        self.server.listen(8)
        self.reply = reply
        self.requests: list[tuple[dict[str, Any], int]] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with conn:
                data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 4)
                reader = wire.Reader()
                reader.feed(data)
                got = reader.next()
                assert got is not None and got[0] == wire.MESSAGE
                req = wire.decode(got[1])
                self.requests.append((req, len(fds)))
                for fd in fds:
                    os.close(fd)
                self.reply(conn, req, fds)

    def close(self) -> None:
        self.server.close()


def _run(conn: socket.socket, req: dict[str, Any], fds: list[int]) -> None:
    conn.sendall(wire.message({"type": "started", "pid": 7}))
    chunk = b"o" * (64 << 10)
    for _ in range(OUT // len(chunk)):
        conn.sendall(wire.frame(wire.STDOUT, chunk))
    conn.sendall(wire.frame(wire.STDERR, b"warning\n"))
    conn.sendall(wire.message({"type": "finished", "exit": 0, "signal": 0, "reason": None, "stdout_bytes": OUT}))


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[tuple[str, FakeAgent]]:
    path = tmp_path / "agent.sock"
    fake = FakeAgent(path, _run)
    yield str(path), fake
    fake.close()


def test_a_streamed_run_goes_to_its_watcher_and_is_not_kept(agent: tuple[str, FakeAgent]) -> None:
    path, fake = agent
    seen = {"stdout": 0, "stderr": 0}
    started: list[bool] = []

    async def on_output(stream: str, chunk: bytes) -> None:
        seen[stream] += len(chunk)

    header = {"type": "exec", "run_id": "run_x", "argv": ["true"], "timeout": None}
    reply, kept = asyncio.run(channel.run_exec(path, header, None, 1 << 20, on_output, on_start=lambda: started.append(True)))
    assert reply["type"] == "finished" and reply["stdout_bytes"] == OUT
    assert seen == {"stdout": OUT, "stderr": 8}
    assert started == [True]
    # the host keeps nothing of a run someone streams: it would only be decoded to be dropped
    assert kept.data == {"stdout": b"", "stderr": b""}
    assert fake.requests == [(header, 1)]  # the run's stdin went along as a descriptor


def test_a_run_nobody_watches_keeps_its_output_up_to_the_cap(agent: tuple[str, FakeAgent]) -> None:
    path, _ = agent
    reply, kept = asyncio.run(channel.run_exec(path, {"type": "exec", "run_id": "run_x"}, b"in", 1 << 20))
    assert reply["exit"] == 0
    assert kept.data["stdout"] == b"o" * (1 << 20) and kept.data["stderr"] == b"warning\n"


def test_an_error_answer_is_raised_as_its_kind(tmp_path: Path) -> None:
    def refuse(conn: socket.socket, req: dict[str, Any], fds: list[int]) -> None:
        conn.sendall(wire.message(wire.error("invalid", "exec needs a run id", "say which run")))

    fake = FakeAgent(tmp_path / "a.sock", refuse)
    try:
        with pytest.raises(InvalidError) as err:
            asyncio.run(channel.run_exec(str(tmp_path / "a.sock"), {"type": "exec"}, None, 10))
        assert err.value.message == "exec needs a run id" and err.value.hint == "say which run"
    finally:
        fake.close()


def test_a_read_gathers_the_data_frames_it_was_promised(tmp_path: Path) -> None:
    payload = os.urandom((2 << 20) + 5)  # more than one frame of data

    def read(conn: socket.socket, req: dict[str, Any], fds: list[int]) -> None:
        conn.sendall(wire.with_data(wire.ok(total=len(payload), truncated=False), payload))

    fake = FakeAgent(tmp_path / "a.sock", read)

    async def go() -> bytes:
        async with channel.Channel(str(tmp_path / "a.sock")) as ch:
            reply = await ch.request({"type": "read", "path": "/x", "offset": 0, "limit": 1 << 30})
            return await ch.recv_data(int(reply["size"]))

    try:
        assert asyncio.run(go()) == payload
    finally:
        fake.close()


def test_input_is_sent_as_frames_the_supervisor_can_take(agent: tuple[str, FakeAgent]) -> None:
    big = os.urandom(channel.STDIN_FRAME * 2 + 1)
    frames = channel._frames({"stdin": big})
    reader = wire.Reader()
    reader.feed(frames)
    parts = []
    while (got := reader.next()) is not None:
        assert got[0] == wire.STDIN
        parts.append(got[1])
    assert b"".join(parts) == big and max(map(len, parts)) == channel.STDIN_FRAME
    assert wire.decode(channel._frames({"resize": (40, 120)})[wire.HEADER :]) == {"type": "resize", "rows": 40, "cols": 120}
    assert wire.decode(channel._frames({"hangup": True})[wire.HEADER :]) == {"type": "hangup"}
