"""Host side of the agent protocol: one unix-socket connection per request.

Exec passes the workload's stdin/stdout/stderr as file descriptors (SCM_RIGHTS), so
output flows from the workload straight into the daemon's pipes; the agent only reports
the pid and the exit status.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import marshal
import os
import signal
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from hutch.errors import HutchError, InternalError, UnavailableError

MAX_HEADER = 1 << 20
STDIN_FRAME = 256 << 10  # one frame of interactive input, well under the agent's MAX_HEADER


class Channel:
    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self.sock: socket.socket | None = None
        self.buf = b""
        self.sending = asyncio.Lock()

    async def __aenter__(self) -> Channel:
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        sock.setblocking(False)
        try:
            await asyncio.wait_for(loop.sock_connect(sock, self.socket_path), 5.0)
        except (TimeoutError, OSError) as exc:
            sock.close()
            raise UnavailableError(
                f"the sandbox is not answering ({exc.__class__.__name__}: {exc})",
                hint="it may have died; check with hutch get, or destroy and recreate it",
            ) from exc
        self.sock = sock
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def send(self, header: dict[str, Any], payload: bytes = b"", fds: list[int] | None = None) -> None:
        assert self.sock is not None
        body = marshal.dumps(header, 2)
        data = len(body).to_bytes(4, "big") + body
        if fds:
            self.sock.setblocking(True)
            try:
                socket.send_fds(self.sock, [data], fds)
            finally:
                self.sock.setblocking(False)
            data = b""
        if data or payload:
            self.sock.setblocking(True)
            try:
                self.sock.sendall(data + payload)
            finally:
                self.sock.setblocking(False)

    async def asend(self, header: dict[str, Any]) -> None:
        """One frame, without blocking the loop; frames from several tasks never interleave."""
        assert self.sock is not None
        body = marshal.dumps(header, 2)
        async with self.sending:
            await asyncio.get_running_loop().sock_sendall(self.sock, len(body).to_bytes(4, "big") + body)

    async def recv_line(self, timeout: float | None = None) -> dict[str, Any] | None:
        assert self.sock is not None
        loop = asyncio.get_running_loop()
        while b"\n" not in self.buf:
            if len(self.buf) > MAX_HEADER:
                raise InternalError("oversized reply from the sandbox agent")
            try:
                chunk = await asyncio.wait_for(loop.sock_recv(self.sock, 65536), timeout)
            except ConnectionError:  # the agent died (reset), as good as closed
                return None
            if not chunk:
                return None
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        reply: dict[str, Any] = json.loads(line)
        if "error" in reply:
            raise HutchError.from_dict(reply)
        return reply

    async def recv_exact(self, size: int) -> bytes:
        assert self.sock is not None
        loop = asyncio.get_running_loop()
        out = bytearray(self.buf[:size])
        self.buf = self.buf[size:]
        while len(out) < size:
            try:
                chunk = await loop.sock_recv(self.sock, min(1 << 20, size - len(out)))
            except ConnectionError:
                chunk = b""
            if not chunk:
                raise UnavailableError("the sandbox agent closed the connection mid-transfer")
            out += chunk
        return bytes(out)

    async def request(self, header: dict[str, Any], payload: bytes = b"", timeout: float = 60.0) -> dict[str, Any]:
        self.send(header, payload)
        reply = await self.recv_line(timeout)
        if reply is None:
            raise UnavailableError("the sandbox agent closed the connection", hint="check the sandbox with hutch get")
        return reply


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
    while True:
        msg = await ch.recv_line(clock.left())
        if msg is None:
            raise UnavailableError("the sandbox went away during the run", hint="check with hutch get")
        if "stream" in msg:
            stream = "stderr" if msg["stream"] == "stderr" else "stdout"
            chunk = await ch.recv_exact(int(msg["size"]))
            collected.add(stream, chunk)
            if on_output is not None:
                await clock.hold(on_output(stream, chunk))
            continue
        return msg


async def _pump(ch: Channel, inbox: asyncio.Queue[dict[str, Any]]) -> None:
    """Forward a client's input (stdin bytes, resizes, EOF) to the run's supervisor, as
    fast as it takes it: a full socket waits here, and the client's input waits with it.

    Input goes in frames of at most STDIN_FRAME bytes: the supervisor drops the connection
    on a frame over MAX_HEADER, and a client may hand over any amount at once."""
    while True:
        msg = await inbox.get()
        data = msg.get("stdin")
        parts = [{"stdin": data[i : i + STDIN_FRAME]} for i in range(0, len(data), STDIN_FRAME)] if data else [msg]
        try:
            for part in parts:
                await ch.asend(part)
        except OSError:
            return


async def run_exec(
    socket_path: str,
    header: dict[str, Any],
    stdin: bytes | None,
    max_output: int,
    on_output: OnOutput | None = None,
    inbox: asyncio.Queue[dict[str, Any]] | None = None,
    on_start: Callable[[], None] | None = None,
) -> tuple[dict[str, Any], Collected]:
    """Run a command through the agent's supervisor and wait for its final status.

    Output arrives as frames (also written to disk inside the sandbox); at most
    ``max_output`` bytes per stream are kept here. ``on_output`` may wait (a slow
    client): the frames then wait in the socket, the supervisor stops reading the
    command's pipes, and the command waits too. ``on_start`` is called with the
    supervisor's first word (the run's pid, or its final status when it could not
    start): from then on the run lives in the sandbox whatever happens to the daemon.
    Returns the status and the output.
    """
    if stdin is not None:
        in_r, in_w = os.pipe2(os.O_CLOEXEC)
    else:
        in_r, in_w = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC), -1
    collected = Collected(max_output)
    feeder: asyncio.Task[None] | None = None
    pump: asyncio.Task[None] | None = None
    limit = header.get("timeout")
    try:
        async with Channel(socket_path) as ch:
            try:
                ch.send(header, fds=[in_r])
            finally:
                os.close(in_r)
            if in_w >= 0:
                feeder = asyncio.create_task(feed(in_w, stdin or b""))
                in_w = -1
            if inbox is not None:
                pump = asyncio.create_task(_pump(ch, inbox))
            first = await _next_message(ch, collected, on_output, _Clock(30.0))
            if on_start is not None:
                on_start()
            if "exit" in first:
                return first, collected
            try:
                reply = await _next_message(ch, collected, on_output, _Clock(limit + SAFETY if limit else None))
            except TimeoutError:
                await ch.asend({"kill": int(signal.SIGKILL), "reason": "timeout"})
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
