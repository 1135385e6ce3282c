"""The egress proxy's splice relay (providers/local/splice.py) between real TCP sockets on
loopback, on asyncio's loop and on uvloop's: every byte both ways, what the readers held
first, end of file passed on, nothing left open."""

from __future__ import annotations

import asyncio
import hashlib
import os
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
