"""The daemon's side of the agent protocol (:mod:`hutch.providers.local.agent.wire`).

One unix-socket connection per request. Exec passes the run's stdin as a descriptor
(SCM_RIGHTS); the run's output comes back as O/E frames from its supervisor (also kept on
disk inside the sandbox), then a ``finished`` message with its status.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from hutch.errors import HutchError, IncompatibleError, InternalError, UnavailableError
from hutch.providers.local.agent import wire

STDIN_FRAME = 256 << 10  # input goes in I frames of at most this many bytes
RECV = 64 << 10  # (a larger read buffer costs an mmap per read)


class BrokenProtocolError(InternalError):
    """The agent answered, but not in this protocol's frames (an agent of another hutch, or a bug)."""


def _broken(exc: wire.WireError) -> InternalError:
    return BrokenProtocolError(f"the sandbox agent broke the protocol: {exc}", hint="recreate the sandbox")


class Channel:
    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self.sock: socket.socket | None = None
        self.reader = wire.Reader()
        self.sending = asyncio.Lock()

    async def __aenter__(self) -> Channel:
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        sock.setblocking(False)
        try:
            try:
                sock.connect(self.socket_path)  # at once, unless the agent's backlog is full
            except BlockingIOError:
                async with asyncio.timeout(5.0):
                    await loop.sock_connect(sock, self.socket_path)
        except (TimeoutError, OSError) as exc:
            sock.close()
            raise UnavailableError(
                f"the sandbox is not answering ({exc.__class__.__name__}: {exc})",
                hint="it may have died; check with hutch get",
            ) from exc
        self.sock = sock
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def send(self, msg: dict[str, Any], payload: bytes | None = None, fds: list[int] | None = None) -> None:
        """A request (and its data), blocking until the socket took it; ``fds`` ride on its first byte."""
        assert self.sock is not None
        first = wire.message(msg if payload is None else {**msg, "size": len(payload)})
        rest = b"" if payload is None else wire.data(wire.DATA, payload)
        self.sock.setblocking(True)
        try:
            if fds:
                first = first[socket.send_fds(self.sock, [first], fds) :]
            if first or rest:  # (nothing left may also mean the peer already answered and closed)
                self.sock.sendall(first + rest)
        finally:
            self.sock.setblocking(False)

    async def asend(self, frames: bytes) -> None:
        """Frames, without blocking the loop; frames from several tasks never interleave."""
        assert self.sock is not None
        async with self.sending:
            await asyncio.get_running_loop().sock_sendall(self.sock, frames)

    async def recv_frame(self, timeout: float | None = None) -> tuple[int, bytes] | None:
        """The next frame; None when the agent closed the connection."""
        assert self.sock is not None
        loop = asyncio.get_running_loop()
        while True:
            try:
                got = self.reader.next()
            except wire.WireError as exc:
                raise _broken(exc) from None
            if got is not None:
                return got
            want = max(RECV, self.reader.missing())
            try:
                if timeout is None:  # (a run without a deadline: no timer armed per read)
                    chunk = await loop.sock_recv(self.sock, want)
                else:
                    async with asyncio.timeout(timeout):  # (no task per read, unlike wait_for)
                        chunk = await loop.sock_recv(self.sock, want)
            except ConnectionError:  # the agent died (reset), as good as closed
                return None
            if not chunk:
                return None
            self.reader.feed(chunk)

    async def recv_message(self, timeout: float | None = None) -> dict[str, Any] | None:
        """The next message (an error message raised as its HutchError); None when closed."""
        got = await self.recv_frame(timeout)
        if got is None:
            return None
        return _message(*got)

    async def recv_data(self, size: int) -> bytes:
        """The ``size`` bytes of D frames after a message."""
        out = bytearray()
        while len(out) < size:
            got = await self.recv_frame()
            if got is None:
                raise UnavailableError("the sandbox agent closed the connection mid-transfer")
            kind, body = got
            if kind != wire.DATA or len(out) + len(body) > size:
                raise _broken(wire.WireError(f"{size} bytes of data were announced, the frames differ"))
            out += body
        return bytes(out)

    async def request(self, msg: dict[str, Any], payload: bytes | None = None, timeout: float = 60.0) -> dict[str, Any]:
        self.send(msg, payload)
        reply = await self.recv_message(timeout)
        if reply is None:
            raise UnavailableError("the sandbox agent closed the connection", hint="check the sandbox with hutch get")
        return reply


def _message(kind: int, body: bytes) -> dict[str, Any]:
    if kind != wire.MESSAGE:
        raise _broken(wire.WireError(f"a message was expected, not a frame of type {kind}"))
    try:
        msg: dict[str, Any] = wire.decode(body)
    except wire.WireError as exc:
        raise _broken(exc) from None
    if msg["type"] == "error":
        raise HutchError.from_dict(msg)
    return msg


async def feed(fd: int, data: bytes) -> None:
    """Write ``data`` to a pipe without blocking the loop, then close it."""
    loop = asyncio.get_running_loop()
    os.set_blocking(fd, False)
    view = memoryview(data)
    try:
        while view:
            try:
                n = os.write(fd, view)
                view = view[n:]
            except BlockingIOError:
                ready = loop.create_future()
                loop.add_writer(fd, ready.set_result, None)
                try:
                    await ready
                finally:
                    loop.remove_writer(fd)
    except (BrokenPipeError, ConnectionResetError):
        pass
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)


KILL_CONFIRM = 15.0
SAFETY = 10.0  # the supervisor enforces timeouts; the host steps in only if it does not

OnOutput = Callable[[str, bytes], Awaitable[None]]


@dataclass
class Collected:
    """What the host keeps of a run's output: at most ``cap`` bytes per stream."""

    cap: int
    data: dict[str, bytearray] = field(default_factory=lambda: {"stdout": bytearray(), "stderr": bytearray()})

    def add(self, stream: str, chunk: bytes) -> None:
        buf = self.data[stream]
        room = self.cap - len(buf)
        if room > 0:
            buf += chunk[:room]


class _Clock:
    """The host's safety deadline of a run, paused while the run waits for its client:
    a slow reader holds the run up (backpressure) without looking like a stuck sandbox."""

    def __init__(self, limit: float | None) -> None:
        self.deadline = None if limit is None else time.monotonic() + limit

    def left(self) -> float | None:
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    async def hold(self, waiting: Awaitable[None]) -> None:
        start = time.monotonic()
        try:
            await waiting
        finally:
            if self.deadline is not None:
                self.deadline += time.monotonic() - start


async def _next_message(ch: Channel, collected: Collected, on_output: OnOutput | None, clock: _Clock) -> dict[str, Any]:
    """The supervisor's next message; output frames on the way go to ``on_output`` when
    someone watches live, and are kept (up to the cap) only when nobody does."""
    while True:
        got = await ch.recv_frame(clock.left())
        if got is None:
            raise UnavailableError("the sandbox went away during the run", hint="check with hutch get")
        kind, body = got
        stream = wire.OUTPUT.get(kind)
        if stream is None:
            return _message(kind, body)
        if on_output is None:
            collected.add(stream, body)
        else:
            await clock.hold(on_output(stream, body))


def _frames(msg: dict[str, Any]) -> bytes:
    """A client's input (``stdin`` bytes, ``resize``, ``eof``, ``hangup``) as frames for the supervisor."""
    if "stdin" in msg:
        data: bytes = msg["stdin"]
        return b"".join(wire.frame(wire.STDIN, data[i : i + STDIN_FRAME]) for i in range(0, len(data), STDIN_FRAME))
    if "resize" in msg:
        rows, cols = msg["resize"]
        return wire.message({"type": "resize", "rows": int(rows), "cols": int(cols)})
    if "eof" in msg:
        return wire.message({"type": "eof"})
    if "hangup" in msg:
        return wire.message({"type": "hangup"})
    return b""


async def _pump(ch: Channel, inbox: asyncio.Queue[dict[str, Any]]) -> None:
    """Forward a client's input to the run's supervisor, as fast as it takes it: a full
    socket waits here, and the client's input waits with it."""
    while True:
        frames = _frames(await inbox.get())
        try:
            if frames:
                await ch.asend(frames)
        except OSError:
            return


_DEVNULL: list[int] = []


def _devnull() -> int:
    """``/dev/null``, opened once: a run without input gets it as its stdin (the sandbox gets its own copy)."""
    if not _DEVNULL:
        _DEVNULL.append(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
    return _DEVNULL[0]


async def run_exec(
    socket_path: str,
    header: dict[str, Any],
    stdin: bytes | None,
    max_output: int,
    on_output: OnOutput | None = None,
    inbox: asyncio.Queue[dict[str, Any]] | None = None,
    on_start: Callable[[], None] | None = None,
    on_sent: Callable[[], None] | None = None,
) -> tuple[dict[str, Any], Collected]:
    """Run a command through the agent's supervisor and wait for its final status.

    Output arrives as frames (also written to disk inside the sandbox). With
    ``on_output``, every chunk goes there and nothing is kept here (the caller has it);
    ``on_output`` may wait (a slow client): the frames then wait in the socket, the
    supervisor stops reading the command's pipes, and the command waits too. Without it,
    at most ``max_output`` bytes per stream are kept. ``on_start`` is called with the
    supervisor's first word (the run started, or its final status when it could not
    start): from then on the run lives in the sandbox whatever happens to the daemon.
    ``on_sent`` is called once the request is on its way (what it reads meanwhile costs the
    run nothing: the sandbox is starting it). Returns the status and the output kept.
    """
    if stdin is not None:
        in_r, in_w = os.pipe2(os.O_CLOEXEC)
    else:
        in_r, in_w = _devnull(), -1
    collected = Collected(max_output)
    feeder: asyncio.Task[None] | None = None
    pump: asyncio.Task[None] | None = None
    limit = header.get("timeout")
    try:
        async with Channel(socket_path) as ch:
            try:
                ch.send(header, fds=[in_r])
            finally:
                if in_w >= 0:
                    os.close(in_r)
            if on_sent is not None:
                on_sent()
            if in_w >= 0:
                feeder = asyncio.create_task(feed(in_w, stdin or b""))
                in_w = -1
            if inbox is not None:
                pump = asyncio.create_task(_pump(ch, inbox))
            first = await _next_message(ch, collected, on_output, _Clock(30.0))
            if on_start is not None:
                on_start()
            if first["type"] == "finished":
                return first, collected
            try:
                reply = await _next_message(ch, collected, on_output, _Clock(limit + SAFETY if limit else None))
            except TimeoutError:
                await ch.asend(wire.message({"type": "signal", "signal": int(signal.SIGKILL), "reason": "timeout"}))
                try:
                    reply = await _next_message(ch, collected, on_output, _Clock(KILL_CONFIRM))
                except TimeoutError:
                    reply = {"exit": 137, "signal": 9, "reason": "timeout", "spawn_error": "the sandbox did not confirm the kill"}
            return reply, collected
    finally:
        if in_w >= 0:
            os.close(in_w)
        if feeder is not None:
            feeder.cancel()
        if pump is not None:
            pump.cancel()


async def agent_protocol(socket_path: str) -> int | None:
    """The protocol the sandbox's agent speaks (its answer to ``ping``); None for one that
    answers in frames of its own (an agent from before protocol numbers: the first framed
    protocol is 1). Raises :class:`UnavailableError` when it does not answer at all."""
    try:
        async with Channel(socket_path) as ch:
            reply = await ch.request({"type": "ping"}, timeout=5.0)
    except BrokenProtocolError:
        return None
    protocol = reply.get("protocol")
    return protocol if isinstance(protocol, int) else None


def incompatible(sandbox: str, theirs: int | None, files: str) -> IncompatibleError:
    """What to tell about a sandbox whose agent speaks protocol ``theirs``, not this hutch's."""
    spoken = f"protocol {theirs}" if theirs is not None else f"an older protocol than {wire.PROTOCOL}"
    return IncompatibleError(
        f"sandbox {sandbox} was started by another version of hutch: its agent speaks {spoken}, "
        f"this hutch speaks protocol {wire.PROTOCOL}; it can only be destroyed",
        hint=f"destroy it and create it again: hutch destroy {sandbox} (until then its files stay "
        f"readable on this host under {files}, and its runs' output with hutch logs)",
    )
