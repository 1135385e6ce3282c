"""The daemon asks a sandbox's agent which protocol it speaks (``ping``): the agent of another
version of hutch is told apart from one that does not answer. Fake agents on real sockets."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hutch.errors import IncompatibleError, UnavailableError
from hutch.providers.local import channel
from hutch.providers.local.agent import wire


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Callable[[bytes], str]]:
    """An agent that answers every connection with the given bytes, then closes it."""
    servers: list[socket.socket] = []

    def start(answer: bytes) -> str:
        path = str(tmp_path / f"agent{len(servers)}.sock")
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(path)
        server.listen(4)
        servers.append(server)

        def serve() -> None:
            while True:
                try:
                    conn, _ = server.accept()
                except OSError:
                    return
                with conn:
                    conn.recv(1 << 16)
                    conn.sendall(answer)

        threading.Thread(target=serve, daemon=True).start()
        return path

    yield start
    for server in servers:
        server.close()


def test_the_protocol_an_agent_answers_ping_with(agent: Callable[[bytes], str]) -> None:
    assert asyncio.run(channel.agent_protocol(agent(wire.message(wire.ok(pid=2, protocol=wire.PROTOCOL))))) == wire.PROTOCOL
    assert asyncio.run(channel.agent_protocol(agent(wire.message(wire.ok(pid=2, protocol=7))))) == 7


def test_an_agent_from_before_protocol_numbers_is_told_apart(agent: Callable[[bytes], str]) -> None:
    """The agent before the framed protocol read marshal and answered in JSON lines: it
    answers a framed ping with an error line, which is no frame of ours."""
    old = agent(b'{"error":{"kind":"internal","message":"bad marshal data (unknown type code)"}}\n')
    assert asyncio.run(channel.agent_protocol(old)) is None


def test_an_agent_that_does_not_answer_is_not_taken_for_another_version(tmp_path: Path, agent: Callable[[bytes], str]) -> None:
    with pytest.raises(UnavailableError):
        asyncio.run(channel.agent_protocol(str(tmp_path / "nobody.sock")))
    with pytest.raises(UnavailableError):  # closed without a word
        asyncio.run(channel.agent_protocol(agent(b"")))


def test_the_error_names_both_protocols_and_how_to_recover() -> None:
    err = channel.incompatible("old", 7, "/srv/old/workspace")
    assert isinstance(err, IncompatibleError) and err.kind == "conflict"
    assert f"protocol 7, this hutch speaks protocol {wire.PROTOCOL}" in err.message
    assert err.hint is not None and "hutch destroy old" in err.hint and "/srv/old/workspace" in err.hint
    older = channel.incompatible("old", None, "/srv/old/workspace")
    assert f"an older protocol than {wire.PROTOCOL}" in older.message
