"""The egress relay of a gvisor sandbox: gVisor's network stack is its own, so the proxy's
port inside (127.0.0.1:3128) cannot be handed to the daemon as a descriptor. Instead the
agent forks this relay, which accepts there and carries each connection, byte for byte, to
the daemon's proxy over a unix socket the daemon placed in the sandbox (``/.hutch/net``).
The daemon's proxy decides every connection as for bwrap; the relay decides nothing.
"""

from __future__ import annotations

import os
import threading
from _socket import AF_UNIX, SHUT_WR, SOCK_STREAM
from _socket import socket as Socket  # noqa: N812 - the agent's sockets are the C type (conn.py)

from . import wire
from .conn import accept

CHUNK = 64 << 10


def _pump(src: Socket, dst: Socket) -> None:
    try:
        while data := src.recv(CHUNK):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with wire.ignoring(OSError):
            dst.shutdown(SHUT_WR)


def _carry(client: Socket, path: str) -> None:
    up = Socket(AF_UNIX, SOCK_STREAM)
    try:
        up.connect(path)
    except OSError:
        up.close()
        client.close()
        return
    back = threading.Thread(target=_pump, args=(up, client), daemon=True)
    back.start()
    _pump(client, up)
    back.join()
    up.close()
    client.close()


def start(listener: Socket, path: str, close: list[Socket]) -> int:
    """Fork the relay (its pid): accepts on ``listener``, each connection carried to ``path``."""
    pid = os.fork()
    if pid:
        return pid
    code = 0
    try:
        for sock in close:  # the agent's own sockets and its spares' links are not the relay's
            sock.close()
        while True:
            try:
                client = accept(listener)
            except InterruptedError:
                continue
            threading.Thread(target=_carry, args=(client, path), daemon=True).start()
    except BaseException:  # noqa: BLE001 - whatever it is, it goes to the sandbox's log
        code = 1
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)
