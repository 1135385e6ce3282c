"""The egress relay of a gvisor sandbox: gVisor's network stack is its own, so the proxy's
port inside (127.0.0.1:3128) cannot be handed to the daemon as a descriptor. Instead the
agent forks this relay, which accepts there and carries each connection, byte for byte, to
the daemon's proxy over a unix socket the daemon placed in the sandbox (``/.hutch/net``).
The daemon's proxy decides every connection as for bwrap; the relay decides nothing.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading

CHUNK = 64 << 10


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(CHUNK):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


def _carry(client: socket.socket, path: str) -> None:
    up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
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


def start(listener: socket.socket, path: str, close: list[socket.socket]) -> int:
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
                client, _ = listener.accept()
            except InterruptedError:
                continue
            threading.Thread(target=_carry, args=(client, path), daemon=True).start()
    except BaseException:  # noqa: BLE001 - whatever it is, it goes to the sandbox's log
        code = 1
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)
