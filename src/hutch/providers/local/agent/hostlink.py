"""A supervisor's two bounded queues: live output for the daemon, input for the command.

Both are written without blocking (the supervisor's loop selects on them) and both are
bounded, which is how backpressure works: past SEND_BUFFER bytes the daemon has not
taken, the supervisor stops reading the command's pipes (the command then waits, like
any pipe writer); past INPUT_BUFFER bytes the command has not taken, it stops reading
the daemon's frames.
"""

from __future__ import annotations

import os

from . import wire
from .spawn import set_winsize

TYPE_CHECKING = False
if TYPE_CHECKING:
    from _socket import socket
    from collections.abc import Mapping
    from typing import Any

CHUNK = 1 << 16
SEND_BUFFER = 1 << 20  # live output queued for the daemon before the run's pipes stop being read
INPUT_BUFFER = 1 << 20  # input from the daemon held for the command before its frames stop being read


class HostLink:
    """The run's connection to the daemon; ``sock`` is None once the daemon went away
    (the run goes on, its output on disk)."""

    def __init__(self, sock: socket) -> None:
        sock.setblocking(False)
        self.sock: socket | None = sock
        self.reader = wire.Reader()
        self.sendq = bytearray()

    @property
    def fd(self) -> int:
        return -1 if self.sock is None else self.sock.fileno()

    @property
    def held(self) -> bool:
        """The daemon is SEND_BUFFER behind: the command's output waits."""
        return self.sock is not None and len(self.sendq) >= SEND_BUFFER

    def queue(self, msg: Mapping[str, Any]) -> None:
        if self.sock is not None:
            self.sendq += wire.message(msg)

    def queue_output(self, stream: str, data: bytes) -> None:
        if self.sock is not None and data:
            self.sendq += wire.frame(wire.STREAM[stream], data)

    def send_some(self) -> None:
        assert self.sock is not None
        try:
            del self.sendq[: self.sock.send(self.sendq[:CHUNK])]
        except BlockingIOError:
            pass
        except OSError:
            self.drop()

    def receive(self) -> list[tuple[int, bytes]] | None:
        """The whole frames that arrived; None when the daemon went away (or broke the protocol)."""
        assert self.sock is not None
        try:
            chunk = self.sock.recv(CHUNK)
        except BlockingIOError:
            return []
        except OSError:
            chunk = b""
        if not chunk:
            self.drop()
            return None
        self.reader.feed(chunk)
        frames: list[tuple[int, bytes]] = []
        try:
            while True:
                got = self.reader.next()
                if got is None:
                    return frames
                frames.append(got)
        except wire.WireError:
            self.drop()
            return None

    def drop(self) -> None:
        if self.sock is not None:
            self.sock.close()
        self.sock = None
        self.sendq.clear()

    def finish(self, last: bytes) -> None:
        """The rest of the live output, then the ``last`` frame, at the daemon's pace (it bounds the wait)."""
        if self.sock is None:
            return
        try:
            self.sock.setblocking(True)
            self.sock.sendall(self.sendq + last)
        except OSError:
            pass
        self.drop()


class Input:
    """Input from the daemon on its way to an interactive run's stdin (pipe or terminal)."""

    def __init__(self, fd: int | None, tty: bool) -> None:
        self.fd = fd
        self.tty = tty
        self.pending = bytearray()
        self.eof_asked = False
        if fd is not None:
            os.set_blocking(fd, False)

    @property
    def accepting(self) -> bool:
        return len(self.pending) < INPUT_BUFFER

    @property
    def writing(self) -> bool:
        return self.fd is not None and bool(self.pending)

    def add(self, data: bytes) -> None:
        if self.fd is not None:
            self.pending += data

    def eof(self) -> None:
        self.eof_asked = True
        if self.tty:
            self.pending += b"\x04"  # a terminal's end of input

    def resize(self, rows: int, cols: int) -> None:
        if self.tty and self.fd is not None:
            set_winsize(self.fd, rows, cols)

    def write_some(self) -> None:
        assert self.fd is not None
        try:
            del self.pending[: os.write(self.fd, self.pending[:CHUNK])]
        except BlockingIOError:
            pass
        except OSError:  # the command closed its input
            self.pending.clear()

    def settle(self) -> None:
        """Close a pipe once everything asked for went in and no more is coming."""
        if self.fd is not None and self.eof_asked and not self.pending and not self.tty:
            os.close(self.fd)
            self.fd = None
