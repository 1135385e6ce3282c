"""A tunnel's bytes moved by the kernel: ``splice(2)`` from one socket into a pipe and from
the pipe into the other, woken by the event loop, so no chunk becomes a Python object.

Used by the egress proxy once a CONNECT or SOCKS tunnel is open (the proxy has nothing
more to read in it). The streams' transports stop reading, whatever their readers had
already buffered is sent first, and each direction is a loop over duplicates of the
sockets' descriptors (the event loop watches those, not the transports' own). When a
direction ends (end of file, or an error), the other side gets end of file; the tunnel
ends when both have.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from typing import cast

CHUNK = 1 << 16
FLAGS = os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK


def spliceable(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> int | None:
    """A duplicate of the stream's socket descriptor, its transport no longer reading; None
    when the stream is no plain TCP socket (then the caller copies as before)."""
    sock = writer.get_extra_info("socket")
    if sock is None or getattr(reader, "_buffer", None) is None or writer.get_extra_info("sslcontext") is not None:
        return None
    try:
        fd = os.dup(sock.fileno())
    except (OSError, AttributeError, ValueError):
        return None
    os.set_blocking(fd, False)
    cast(asyncio.Transport, writer.transport).pause_reading()  # (uvloop's are no asyncio.Transport subclass)
    return fd


def resume(writer: asyncio.StreamWriter, fd: int) -> None:
    """Undo :func:`spliceable` (the other side could not be spliced)."""
    os.close(fd)
    cast(asyncio.Transport, writer.transport).resume_reading()


def buffered(reader: asyncio.StreamReader) -> bytes:
    """What the reader holds already (read from the socket before the transport stopped)."""
    buf: bytearray = getattr(reader, "_buffer")  # noqa: B009 - StreamReader has no public way to take it without waiting
    data = bytes(buf)
    buf.clear()
    return data


async def _wait(fd: int, write: bool) -> None:
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    (loop.add_writer if write else loop.add_reader)(fd, wake)
    try:
        await ready
    finally:
        (loop.remove_writer if write else loop.remove_reader)(fd)


async def _send_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            await _wait(fd, True)


async def _one_way(src: int, dst: int, first: bytes) -> None:
    r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if first:
            await _send_all(dst, first)
        held = 0  # bytes in the pipe, not yet in dst
        while True:
            if held == 0:
                try:
                    n = os.splice(src, w, CHUNK, flags=FLAGS)
                except BlockingIOError:
                    await _wait(src, False)
                    continue
                if n == 0:
                    break
                held = n
            try:
                held -= os.splice(r, dst, held, flags=FLAGS)
            except BlockingIOError:
                await _wait(dst, True)
    except OSError:  # a reset: this way is over
        pass
    finally:
        os.close(r)
        os.close(w)
        with contextlib.suppress(OSError), socket.socket(fileno=os.dup(dst)) as other:
            other.shutdown(socket.SHUT_WR)  # the other side's end of file (closing the dup closes nothing else)


async def relay(a: int, a_first: bytes, b: int, b_first: bytes) -> None:
    """Both ways between the sockets ``a`` and ``b`` (duplicated descriptors, closed here),
    each starting with what its reader held."""
    try:
        await asyncio.gather(_one_way(a, b, a_first), _one_way(b, a, b_first))
    finally:
        os.close(a)
        os.close(b)
