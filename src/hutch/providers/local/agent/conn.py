"""A blocking connection speaking the agent protocol (the agent's side of a request)."""

from __future__ import annotations

import os
import sys
from _socket import AF_UNIX, CMSG_LEN, SCM_RIGHTS, SOCK_STREAM, SOL_SOCKET
from _socket import socket as Socket  # noqa: N812 - the C type (socket.py imports enum: the agent's start)

from . import wire

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

CHUNK = 1 << 16
MAX_FDS = 8


def accept(listener: Socket) -> Socket:
    """``socket.accept`` of the C type: the connection (blocking), or BlockingIOError."""
    fd, _ = listener._accept()  # type: ignore[attr-defined]  # (what socket.socket.accept calls)
    return Socket(fileno=fd)


def bind(path: str) -> Socket:
    """A unix socket listening at ``path`` (0600; whatever was there replaced)."""
    with wire.ignoring(FileNotFoundError):
        os.unlink(path)
    sock = Socket(AF_UNIX, SOCK_STREAM)
    sock.bind(path)
    os.chmod(path, 0o600)
    sock.listen(64)
    return sock


INT = 4  # a C int, as SCM_RIGHTS carries descriptors (array("i"), which imports collections)


def send_fds(sock: Socket, data: bytes, fds: list[int]) -> int:
    """``socket.send_fds``: ``data`` with ``fds`` attached (SCM_RIGHTS)."""
    ints = b"".join(fd.to_bytes(INT, sys.byteorder, signed=True) for fd in fds)
    return sock.sendmsg([data], [(SOL_SOCKET, SCM_RIGHTS, ints)])


def recv_fds(sock: Socket, size: int, most: int) -> tuple[bytes, list[int]]:
    """``socket.recv_fds``: up to ``size`` bytes and the descriptors attached (at most ``most``)."""
    data, ancillary, _, _ = sock.recvmsg(size, CMSG_LEN(most * INT))
    fds: list[int] = []
    for level, kind, body in ancillary:
        if level == SOL_SOCKET and kind == SCM_RIGHTS:
            fds += (int.from_bytes(body[i : i + INT], sys.byteorder, signed=True) for i in range(0, len(body) - INT + 1, INT))
    return data, fds


class Connection:
    def __init__(self, sock: Socket, pending: bytes = b"", fds: list[int] | None = None) -> None:
        self.sock = sock
        self.reader = wire.Reader()
        self.reader.feed(pending)  # what the idle helper (hold.c) read of it before it handed over
        self.fds = fds or []  # and the descriptors that came with that

    def first(self) -> tuple[Any, list[int]]:
        """The request that opens the connection, and the descriptors attached to it
        (None when the peer closed without a word)."""
        if self.reader.buf:
            fds, self.fds = self.fds, []
        else:
            chunk, fds = recv_fds(self.sock, CHUNK, MAX_FDS)
            if not chunk:
                for fd in fds:
                    os.close(fd)
                return None, []
            self.reader.feed(chunk)
        try:
            return self.message(), fds
        except BaseException:
            for fd in fds:
                os.close(fd)
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
