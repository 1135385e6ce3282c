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
from dataclasses import dataclass, field
from typing import Any

from hutch.errors import HutchError, InternalError, UnavailableError

MAX_HEADER = 1 << 20


class Channel:
    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self.sock: socket.socket | None = None
        self.buf = b""

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

    async def recv_line(self, timeout: float | None = None) -> dict[str, Any] | None:
        assert self.sock is not None
        loop = asyncio.get_running_loop()
        while b"\n" not in self.buf:
            if len(self.buf) > MAX_HEADER:
                raise InternalError("oversized reply from the sandbox agent")
            chunk = await asyncio.wait_for(loop.sock_recv(self.sock, 65536), timeout)
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
            chunk = await loop.sock_recv(self.sock, min(1 << 20, size - len(out)))
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


@dataclass
class Capture:
    """Reads one pipe without blocking the loop, keeping at most ``cap`` bytes."""

    fd: int
    cap: int
    data: bytearray = field(default_factory=bytearray)
    total: int = 0
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def start(self) -> None:
        os.set_blocking(self.fd, False)
        asyncio.get_running_loop().add_reader(self.fd, self._readable)

    def _readable(self) -> None:
        try:
            chunk = os.read(self.fd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.close()
            return
        self.total += len(chunk)
        room = self.cap - len(self.data)
        if room > 0:
            self.data += chunk[:room]

    def close(self) -> None:
        if not self.done.is_set():
            asyncio.get_running_loop().remove_reader(self.fd)
            os.close(self.fd)
            self.done.set()


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


EXIT_GRACE = 0.25  # after the exit, how long descendants may keep the pipes before we stop reading
KILL_CONFIRM = 15.0


async def _recv_exit(ch: Channel) -> dict[str, Any]:
    while True:
        reply = await ch.recv_line()
        if reply is None:
            raise UnavailableError("the sandbox went away during the run", hint="check with hutch get")
        if "exit" in reply:
            return reply


async def run_exec(
    socket_path: str, header: dict[str, Any], stdin: bytes | None, timeout: float | None, max_output: int
) -> tuple[dict[str, Any], Capture, Capture, bool]:
    """Start a command through the agent, capture its output, enforce the wall timeout.

    Returns the agent's exit reply, the two captures and whether the timeout fired.
    """
    out_r, out_w = os.pipe2(os.O_CLOEXEC)
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    if stdin is not None:
        in_r, in_w = os.pipe2(os.O_CLOEXEC)
    else:
        in_r, in_w = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC), -1
    out, err = Capture(out_r, max_output), Capture(err_r, max_output)
    feeder: asyncio.Task[None] | None = None
    timed_out = False
    try:
        async with Channel(socket_path) as ch:
            try:
                ch.send(header, fds=[in_r, out_w, err_w])
            finally:
                for fd in (in_r, out_w, err_w):
                    os.close(fd)
            out.start()
            err.start()
            if in_w >= 0:
                feeder = asyncio.create_task(feed(in_w, stdin or b""))
                in_w = -1
            reply = await ch.recv_line(30.0)
            if reply is None:
                raise UnavailableError("the sandbox agent closed the connection", hint="check with hutch get")
            if "exit" not in reply:
                try:
                    reply = await asyncio.wait_for(_recv_exit(ch), timeout)
                except TimeoutError:
                    timed_out = True
                    ch.send({"kill": int(signal.SIGKILL)})
                    try:
                        reply = await asyncio.wait_for(_recv_exit(ch), KILL_CONFIRM)
                    except TimeoutError:
                        reply = {"exit": 137, "signal": 9, "spawn_error": "the sandbox did not confirm the kill"}
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(out.done.wait(), err.done.wait()), EXIT_GRACE)
    finally:
        out.close()
        err.close()
        if in_w >= 0:
            os.close(in_w)
        if feeder is not None:
            feeder.cancel()
    return reply, out, err, timed_out
