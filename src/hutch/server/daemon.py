"""``hutch serve``: the Service behind the HTTP app on an owner-only unix socket."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable, Iterator

import uvicorn

from hutch.config import Settings
from hutch.errors import UnavailableError
from hutch.server.app import create_app
from hutch.server.launcher import prepare_home, socket_answers
from hutch.service import Service

log = logging.getLogger("hutch.daemon")


class _Server(uvicorn.Server):
    """uvicorn re-raises SIGTERM after serving, which would skip our cleanup: stop instead."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.handle_exit, sig, None)
        try:
            yield
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)


def _bind(path: str) -> socket.socket:
    if os.path.exists(path):
        os.unlink(path)  # stale: we hold the daemon lock, so nobody else serves it
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(path)
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(128)
    return sock


async def _serve(settings: Settings, lock_fd: int, announce: Callable[[], None] | None) -> None:
    service = Service(settings)
    report = await service.start()
    log.info(
        "adopted %d sandboxes, marked %d lost, cleaned %d", len(report["adopted"]), len(report["lost"]), len(report["cleaned"])
    )
    service.lifecycle.start_reaper()  # --ttl / --idle-timeout are enforced with or without a CLI
    app = create_app(service)
    (settings.home / "hutchd.pid").write_text(f"{os.getpid()}\n")  # before the socket answers
    sock = _bind(str(settings.socket_path))
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", timeout_graceful_shutdown=5)
    server = _Server(config)
    app.state.shutdown = lambda: setattr(server, "should_exit", True)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):  # from here on a signal means a clean stop
        loop.add_signal_handler(sig, server.handle_exit, sig, None)
    log.info("hutch daemon %d listening on %s", os.getpid(), settings.socket_path)
    if announce is not None:
        announce()
    try:
        await server.serve(sockets=[sock])
    finally:
        await service.close()
        for name in ("hutchd.pid", "hutchd.sock"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(settings.home / name)
        os.close(lock_fd)


def serve(settings: Settings, announce: Callable[[], None] | None = None) -> int:
    """Serve until stopped; ``announce`` is called once the socket accepts connections."""
    os.umask(0o077)  # the store, the log and the socket are the owner's alone
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    prepare_home(settings.home)
    lock_fd = os.open(settings.home / "hutchd.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock_fd)
        if socket_answers(settings.socket_path):
            log.info("a hutch daemon is already running for %s", settings.home)
            return 0
        raise UnavailableError("another hutch daemon holds the lock but does not answer", hint="hutch daemon stop") from None
    try:  # uvloop when installed (the default on Linux): a third less event-loop overhead per proxied request
        import uvloop
    except ImportError:
        asyncio.run(_serve(settings, lock_fd, announce))
    else:
        uvloop.run(_serve(settings, lock_fd, announce))
    return 0
