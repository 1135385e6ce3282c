"""A blocking connection speaking the agent protocol (the agent's side of a request)."""

from __future__ import annotations

import socket

from . import wire

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

CHUNK = 1 << 16
MAX_FDS = 8


class Connection:
    def __init__(self, sock: socket.socket, pending: bytes = b"") -> None:
        self.sock = sock
        self.reader = wire.Reader()
        self.reader.feed(pending)  # what the idle helper (hold.c) read of it before it handed over

    def first(self) -> tuple[Any, list[int]]:
        """The request that opens the connection, and the descriptors attached to it
        (None when the peer closed without a word)."""
        if self.reader.buf:
            return self.message(), []
        chunk, fds, _, _ = socket.recv_fds(self.sock, CHUNK, MAX_FDS)
        if not chunk:
            for fd in fds:
                socket.close(fd)
            return None, []
        self.reader.feed(chunk)
        try:
            return self.message(), fds
        except BaseException:
            for fd in fds:
                socket.close(fd)
            raise

    def _frame(self) -> tuple[int, bytes]:
        while True:
            got = self.reader.next()
            if got is not None:
                return got
            chunk = self.sock.recv(max(CHUNK, self.reader.missing()))
            if not chunk:
                raise wire.WireError("the connection closed inside a frame")
            self.reader.feed(chunk)

    def message(self) -> Any:
        kind, body = self._frame()
        if kind != wire.MESSAGE:
            raise wire.WireError(f"a message was expected, not a frame of type {kind}")
        return wire.decode(body)

    def data(self, size: int) -> bytes:
        """The ``size`` bytes of D frames that follow a message."""
        out = bytearray()
        while len(out) < size:
            kind, body = self._frame()
            if kind != wire.DATA or len(out) + len(body) > size:
                raise wire.WireError(f"{size} bytes of data were announced, the frames differ")
            out += body
        return bytes(out)

    def send(self, msg: Mapping[str, Any], payload: bytes | None = None) -> None:
        self.sock.sendall(wire.message(msg) if payload is None else wire.with_data(msg, payload))
