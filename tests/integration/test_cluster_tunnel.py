"""The port connection a cluster's gateway makes into a node's sandbox, without Ray: a real node
daemon (started as a node's Ray actor starts it, :class:`hutch.providers.cluster.daemon.NodeDaemon`,
on loopback with TLS and its token), a real server inside a real sandbox, and the gateway's side
(:class:`hutch.providers.cluster.tunnel.Tunnels`) over the node's ``ports/{port}/connect``
WebSocket. tests/integration/test_cluster.py reaches such a port through a gateway's exposure on
a 3-node cluster."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import sweep

from hutch.errors import NotFoundError, UnauthorizedError, UnavailableError
from hutch.providers.cluster.http import NodeClient, sandbox
from hutch.providers.cluster.tunnel import Tunnels

pytestmark = pytest.mark.integration

# an echo server that answers each connection's whole input only after its end (a half-close),
# then says goodbye and closes: the direction toward the sandbox ends first, the other goes on
SERVER = r"""
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(8)
while True:
    c, _ = s.accept()
    got = b""
    while chunk := c.recv(65536):
        got += chunk
    c.sendall(b"%d bytes, sha-free echo: " % len(got) + got[:16] + b" goodbye")
    c.close()
"""


@pytest.fixture
def node(hutch_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    from hutch.providers.cluster.daemon import NodeDaemon

    hutch_home.chmod(0o755)  # the sandbox user passes through the node home's parents (as under ray_cluster)
    home = hutch_home / "node"
    for name in [k for k in os.environ if k.startswith("HUTCH_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("HUTCH_NODE_HOME", str(home))
    monkeypatch.setenv("HUTCH_POOL_SIZE", "0")
    node_daemon = NodeDaemon("127.0.0.1")  # its daemon is this process's child: reaped below
    info = node_daemon.info()
    try:
        yield info
    finally:
        os.kill(int(info["pid"]), signal.SIGTERM)
        assert node_daemon.proc is not None
        try:
            node_daemon.proc.wait(60)
        except subprocess.TimeoutExpired:
            node_daemon.proc.kill()
            node_daemon.proc.wait(10)
        sweep(home)


@asynccontextmanager
async def _made(client: NodeClient) -> AsyncIterator[str]:
    made = await client.json("POST", "/v1/sandboxes", json={"provider": "local"})
    try:
        yield str(made["id"])
    finally:
        await client.json("DELETE", sandbox(made["id"]))


async def _open(tunnels: Tunnels, client: NodeClient, ref: str, port: int) -> socket.socket:
    deadline = time.monotonic() + 120
    while True:
        try:
            return await tunnels.open(client, ref, port)
        except UnavailableError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def _talk(sock: socket.socket, data: bytes) -> bytes:
    reader, writer = await asyncio.open_connection(sock=sock)
    writer.write(data)
    await writer.drain()
    writer.write_eof()  # the half-close travels to the server inside
    answer = await reader.read()
    writer.close()
    return answer


def test_a_connection_into_a_node_sandbox_both_ways_with_a_half_close(node: dict[str, Any]) -> None:
    async def main() -> None:
        client = NodeClient("n1", str(node["url"]), str(node["token"]), str(node["ca"]))
        tunnels = Tunnels()
        try:
            async with _made(client) as ref:
                with pytest.raises(UnavailableError) as none:  # nothing listens yet: the node says so
                    await tunnels.open(client, ref, 8123)
                assert "8123" in none.value.message and none.value.hint
                body = {"command": ["python3", "-c", SERVER, "8123"], "background": True}
                await client.json("POST", sandbox(ref) + "/exec", json=body)
                big = os.urandom(3 << 20)
                socks = [await _open(tunnels, client, ref, 8123) for _ in range(3)]  # three at once
                answers = await asyncio.gather(*(_talk(s, big[: (3 << 20) - i]) for i, s in enumerate(socks)))
                for i, answer in enumerate(answers):
                    assert answer == b"%d bytes, sha-free echo: " % ((3 << 20) - i) + big[:16] + b" goodbye"
                deadline = time.monotonic() + 30
                while tunnels.tasks:  # each relay ends with its connection
                    assert time.monotonic() < deadline, "a relay outlived its connection"
                    await asyncio.sleep(0.05)
        finally:
            await tunnels.close()
            await client.close()

    asyncio.run(main())


def test_the_node_refuses_a_port_connection_without_its_credentials(node: dict[str, Any]) -> None:
    async def main() -> None:
        good = NodeClient("n1", str(node["url"]), str(node["token"]), str(node["ca"]))
        bad = NodeClient("n1", str(node["url"]), "not-the-token", str(node["ca"]))
        try:
            async with _made(good) as ref:
                with pytest.raises(UnavailableError) as refused:
                    await Tunnels().open(bad, ref, 8123)
                assert "HTTP 401" in refused.value.message
                with pytest.raises(UnauthorizedError):
                    await bad.json("GET", sandbox(ref))
                with pytest.raises(NotFoundError):  # a sandbox the node does not have
                    await Tunnels().open(good, "sbx_nosuch", 8123)
        finally:
            await good.close()
            await bad.close()

    asyncio.run(main())
