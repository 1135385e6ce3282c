"""The egress proxy's splice relay (providers/local/splice.py) between real TCP sockets on
loopback, on asyncio's loop and on uvloop's: every byte both ways, what the readers held
first, end of file passed on, nothing left open."""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import uvloop

from hutch.providers.local import splice

MIB = 1 << 20

LOOPS: dict[str, Callable[[Coroutine[Any, Any, None]], None]] = {"asyncio": asyncio.run, "uvloop": uvloop.run}


async def _tunnel(size: int) -> None:
    """client <-> proxy (splice) <-> upstream; the upstream echoes a digest of what it got
    after sending ``size`` bytes of its own."""
    payload = os.urandom(size)

    async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(payload)
        got = hashlib.sha256()
        while chunk := await reader.read(MIB):
            got.update(chunk)
        writer.write(got.hexdigest().encode())
        writer.close()

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\n")  # the client's bytes after it are in the reader's buffer
        assert head == b"OPEN\n"
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", up_port)
        a, b = splice.spliceable(reader, writer), splice.spliceable(up_reader, up_writer)
        assert a is not None and b is not None
        await splice.relay(a, splice.buffered(reader), b, splice.buffered(up_reader))
        up_writer.close()
        writer.close()

    up = await asyncio.start_server(upstream, "127.0.0.1", 0)
    up_port = up.sockets[0].getsockname()[1]
    front = await asyncio.start_server(proxy, "127.0.0.1", 0)
    reader, writer = await asyncio.open_connection("127.0.0.1", front.sockets[0].getsockname()[1])
    sent = os.urandom(size)
    writer.write(b"OPEN\n" + sent[:1000])  # the first bytes ride with the header
    await writer.drain()
    writer.write(sent[1000:])
    writer.write_eof()
    received = await asyncio.wait_for(reader.read(), 300)
    assert received[:size] == payload
    assert received[size:] == hashlib.sha256(sent).hexdigest().encode()
    writer.close()
    for server in (up, front):
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_every_byte_both_ways_and_end_of_file(loop: str) -> None:
    LOOPS[loop](asyncio.sleep(0))  # (uvloop keeps two descriptors of its own from its first loop on)
    before = len(os.listdir("/proc/self/fd"))
    LOOPS[loop](_tunnel(8 * MIB))
    assert len(os.listdir("/proc/self/fd")) == before  # the duplicates and pipes are closed


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_a_short_exchange_is_copied_and_a_long_one_spliced(loop: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A request and its answer under SPLICE_AFTER bytes each take no pipe (three system calls
    a short answer gains nothing from); a direction that moves more goes on through one."""
    pipes: list[int] = []
    real = os.pipe2

    def counted(flags: int) -> tuple[int, int]:
        pipes.append(flags)
        return real(flags)

    monkeypatch.setattr(splice.os, "pipe2", counted)
    LOOPS[loop](_tunnel(splice.SPLICE_AFTER // 2))
    assert pipes == []
    LOOPS[loop](_tunnel(64 * splice.SPLICE_AFTER))  # (far more than a reader holds before the relay starts)
    assert len(pipes) == 2  # one per direction, each past SPLICE_AFTER


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("loop", LOOPS)
def test_dial_connects_a_plain_socket_the_relay_can_take(loop: str) -> None:
    """The proxy's upstream: a connected non-blocking socket (no transport), its first bytes
    sent by the relay ahead of the rest, the descriptor closed by the relay."""

    async def main() -> None:
        got: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

        async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            got.set_result(await reader.read())
            writer.write(b"pong")
            writer.close()

        server = await asyncio.start_server(upstream, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        sock = await splice.dial("127.0.0.1", port, socket.AF_INET, 5.0)
        assert not sock.getblocking()
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        client_side, proxy_side = socket.socketpair()
        client_side.sendall(b"-rest")
        client_side.shutdown(socket.SHUT_WR)
        proxy_side.setblocking(False)
        fd = sock.detach()
        await splice.relay(proxy_side.detach(), b"first", fd, b"")
        assert await got == b"first-rest"
        assert client_side.recv(100) == b"pong"
        with pytest.raises(OSError):
            os.fstat(fd)  # the relay closed it
        client_side.close()
        server.close()

    LOOPS[loop](main())


@pytest.mark.parametrize("loop", LOOPS)
def test_dial_refused_and_timed_out_leave_nothing_open(loop: str) -> None:
    async def main() -> None:
        free = socket.socket()
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
        free.close()  # nothing listens there now
        before = _open_fds()
        with pytest.raises(ConnectionRefusedError):
            await splice.dial("127.0.0.1", port, socket.AF_INET, 5.0)
        # A listener that accepts nothing, its queue full: the next handshake is not answered.
        full = socket.socket()
        full.bind(("127.0.0.1", 0))
        full.listen(0)
        queued = []
        with pytest.raises(TimeoutError):
            for _ in range(8):  # as many as the kernel queues before it stops answering
                queued.append(await splice.dial("127.0.0.1", full.getsockname()[1], socket.AF_INET, 0.5))
        assert queued, "the queue took no connection at all"
        for sock in queued:
            sock.close()
        full.close()
        assert _open_fds() == before

    LOOPS[loop](main())


@pytest.mark.parametrize("loop", LOOPS)
def test_dial_waits_for_a_handshake_that_completes_late(loop: str) -> None:
    """A handshake the kernel does not finish inside ``connect`` (a full accept queue, then
    room made): the loop watches the socket until it is connected."""

    async def main() -> None:
        full = socket.socket()
        full.bind(("127.0.0.1", 0))
        full.listen(0)
        port = full.getsockname()[1]
        queued = []
        with pytest.raises(TimeoutError):
            for _ in range(8):  # fill the queue (see above), keeping what it took
                queued.append(await splice.dial("127.0.0.1", port, socket.AF_INET, 0.3))
        late = asyncio.ensure_future(splice.dial("127.0.0.1", port, socket.AF_INET, 30.0))
        await asyncio.sleep(0.2)
        assert not late.done()
        for _ in queued:  # room in the queue: the retransmitted handshake gets in
            full.accept()[0].close()
        sock = await late
        assert sock.getpeername()[1] == port
        for s in [sock, *queued]:
            s.close()
        full.close()

    LOOPS[loop](main())


@pytest.mark.parametrize("loop", LOOPS)
def test_a_half_open_tunnel_ends_when_the_other_way_stays_silent(loop: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The client sent and closed; the upstream never answers nor closes: the relay is over
    after HALF_OPEN_IDLE without a byte, its descriptors closed. An upstream that keeps
    sending (slower than that, but sending) is relayed to its end."""
    monkeypatch.setattr(splice, "HALF_OPEN_IDLE", 1.0)

    async def main() -> None:
        async def tunnel(upstream_sends: bool) -> tuple[bytes, float]:
            client, proxy_a = socket.socketpair()
            proxy_b, up = socket.socketpair()
            for s in (proxy_a, proxy_b, up):
                s.setblocking(False)
            client.sendall(b"request")
            client.shutdown(socket.SHUT_WR)  # the client's end of file: half open from here
            fds = (proxy_a.fileno(), proxy_b.fileno())
            started = asyncio.get_running_loop().time()
            relay = asyncio.ensure_future(splice.relay(proxy_a.detach(), b"", proxy_b.detach(), b""))
            if upstream_sends:
                for _ in range(12):  # 0.1 s apart: each gap a tenth of the idle limit, the whole longer
                    await asyncio.sleep(0.1)
                    up.send(b"x")
                up.shutdown(socket.SHUT_WR)
            await asyncio.wait_for(relay, 10)
            took = asyncio.get_running_loop().time() - started
            for fd in fds:
                with pytest.raises(OSError):
                    os.fstat(fd)
            client.setblocking(True)
            client.settimeout(5)
            got = b""
            while chunk := client.recv(100):
                got += chunk
            assert up.recv(100) == b"request"
            client.close()
            up.close()
            return got, took

        got, took = await tunnel(upstream_sends=False)
        assert got == b"" and took >= 1.0
        got, took = await tunnel(upstream_sends=True)
        assert got == b"x" * 12 and took >= 1.2

    LOOPS[loop](main())
