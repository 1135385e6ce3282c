"""A tunnel's bytes moved between two sockets by the event loop's own callbacks: copied while
they are few, then by the kernel with ``splice(2)`` through a pipe, so a large transfer's
chunks never become Python objects.

Used by the egress proxy once a CONNECT or SOCKS tunnel is open or a request forwarded (the
proxy has nothing more to read in it). The streams' transports stop reading, whatever their
readers had already buffered is sent first, and each direction moves bytes from one
socket's duplicated descriptor to the other's when the loop says it can: no task, no
future per wait, each descriptor watched for as long as its direction waits on it. Most
tunnels carry one short request and its answer: those are read and written as they come
(a pipe costs three system calls and a short answer gains nothing from it); a direction
that has moved :data:`SPLICE_AFTER` bytes goes on through a pipe. A full destination stops
the reading of its source (backpressure both ways). When a direction ends (end of file, or
an error), the other side gets end of file; the tunnel ends when both have, or when the
other way has moved no byte for :data:`HALF_OPEN_IDLE` seconds (a client gone for good looks
like one that only stopped sending; an upstream that never closes would hold it forever).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import socket
from collections.abc import Iterator
from typing import cast

CHUNK = 1 << 16
SPLICE_AFTER = 1 << 16  # bytes a direction copies before it takes a pipe
TURN = 16  # chunks a direction moves per wake-up before it lets the loop run
HALF_OPEN_IDLE = 60.0  # a tunnel one side has ended: over after this long without a byte the other way
FLAGS = os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK


async def dial(address: str, port: int, family: int, timeout: float) -> socket.socket:
    """A plain non-blocking TCP socket connected to ``address``: no transport, no stream (the
    relay moves its bytes). A connection the kernel completes inside ``connect`` (loopback
    does) costs no wait; otherwise the loop watches for it, at most ``timeout`` seconds."""
    sock = socket.socket(family, socket.SOCK_STREAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC)
    try:
        err = sock.connect_ex((address, port))
        if err == errno.EINPROGRESS:
            if not _connected(sock):
                loop = asyncio.get_running_loop()
                ready: asyncio.Future[None] = loop.create_future()
                loop.add_writer(sock.fileno(), _settle, ready)
                try:
                    async with asyncio.timeout(timeout):
                        await ready
                finally:
                    loop.remove_writer(sock.fileno())
            err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            raise OSError(err, os.strerror(err))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as the loop's own transports do
    except BaseException:
        sock.close()
        raise
    return sock


def _settle(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_result(None)


@contextlib.contextmanager
def closing_on_error(sock: socket.socket) -> Iterator[None]:
    """``sock`` closed if the block fails (it stays open otherwise)."""
    try:
        yield
    except BaseException:
        sock.close()
        raise


async def streams(sock: socket.socket) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Streams over a connected socket: theirs from here (closed here if they cannot be made)."""
    with closing_on_error(sock):
        return await asyncio.open_connection(sock=sock)


def _connected(sock: socket.socket) -> bool:
    try:
        sock.getpeername()  # ENOTCONN while the handshake is on (or failed: then the wait says how)
    except OSError:
        return False
    return True


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


class _Way:
    """One direction, ``src`` to ``dst``: what was read and not yet written (bytes while
    copying, a count in the pipe once splicing), and what the loop watches for it."""

    def __init__(self, src: int, dst: int, first: bytes) -> None:
        self.src, self.dst = src, dst
        self.pending = memoryview(first)
        self.pipe: tuple[int, int] | None = None
        self.held = 0  # bytes in the pipe, not yet in dst
        self.moved = 0
        self.reading = self.writing = False
        self.done = False

    def waiting(self) -> bool:
        return bool(self.pending) or self.held > 0

    def move(self) -> bool:
        """Bytes on, until a side would block; True when this direction is over."""
        for _ in range(TURN):
            if self.pending:
                self.pending = self.pending[os.write(self.dst, self.pending) :]
                continue
            if self.held:
                assert self.pipe is not None
                self.held -= os.splice(self.pipe[0], self.dst, self.held, flags=FLAGS)
                continue
            if self.pipe is None:
                data = os.read(self.src, CHUNK)
                if not data:
                    return True
                self.pending = memoryview(data)
                self.moved += len(data)
                if self.moved >= SPLICE_AFTER:
                    self.pipe = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
            else:
                self.held = os.splice(self.src, self.pipe[1], CHUNK, flags=FLAGS)
                self.moved += self.held
                if self.held == 0:
                    return True
        return False

    def close(self) -> None:
        if self.pipe is not None:
            os.close(self.pipe[0])
            os.close(self.pipe[1])
            self.pipe = None


class _Relay:
    def __init__(self, loop: asyncio.AbstractEventLoop, ways: list[_Way]) -> None:
        self.loop = loop
        self.ways = ways
        self.over: asyncio.Future[None] = loop.create_future()
        self.idle: asyncio.TimerHandle | None = None  # while one way is over: the other's idle check

    def step(self, way: _Way) -> None:
        if way.done:
            return
        try:
            ended = way.move()
        except (BlockingIOError, InterruptedError):
            ended = False
        except OSError:  # a reset: this way is over
            ended = True
        if ended:
            self._end(way)
        else:  # watch what it waits for: the destination while it holds bytes (its source unread), else the source
            self._watch(way, read=not way.waiting(), write=way.waiting())

    def _watch(self, way: _Way, read: bool, write: bool) -> None:
        if read != way.reading:
            (self.loop.add_reader(way.src, self.step, way) if read else self.loop.remove_reader(way.src))
            way.reading = read
        if write != way.writing:
            (self.loop.add_writer(way.dst, self.step, way) if write else self.loop.remove_writer(way.dst))
            way.writing = write

    def _end(self, way: _Way) -> None:
        self._watch(way, read=False, write=False)
        way.done = True
        way.close()
        with contextlib.suppress(OSError), socket.socket(fileno=os.dup(way.dst)) as other:
            other.shutdown(socket.SHUT_WR)  # the other side's end of file (closing the dup closes nothing else)
        if all(w.done for w in self.ways):
            self._finish()
        elif self.idle is None:  # half open: the peer that closed may be gone for good (nothing tells)
            self._check_idle(-1)

    def _check_idle(self, seen: int) -> None:
        """Over when the way still open moved nothing since the last look, HALF_OPEN_IDLE ago."""
        way = next((w for w in self.ways if not w.done), None)
        if way is None or way.moved == seen:
            self._finish()
        else:
            self.idle = self.loop.call_later(HALF_OPEN_IDLE, self._check_idle, way.moved)

    def _finish(self) -> None:
        if self.idle is not None:  # (a check due in the same turn as the end finds nothing to do)
            self.idle.cancel()
        if not self.over.done():
            self.over.set_result(None)

    def stop(self) -> None:
        if self.idle is not None:
            self.idle.cancel()
        for way in self.ways:
            self._watch(way, read=False, write=False)
            way.close()


async def relay(a: int, a_first: bytes, b: int, b_first: bytes) -> None:
    """Both ways between the sockets ``a`` and ``b`` (duplicated descriptors, closed here),
    each starting with what its reader held."""
    loop = asyncio.get_running_loop()
    run = _Relay(loop, [_Way(a, b, a_first), _Way(b, a, b_first)])
    try:
        for way in run.ways:
            run.step(way)
        await run.over
    finally:
        run.stop()
        os.close(a)
        os.close(b)
