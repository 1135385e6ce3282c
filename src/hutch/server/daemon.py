"""``hutch serve``: the Service behind the HTTP app on an owner-only unix socket."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn

from hutch import fdlimit
from hutch.config import Settings
from hutch.credentials import Credential, load_file
from hutch.errors import ConflictError, HutchError, InvalidError, UnavailableError
from hutch.server.app import create_app
from hutch.server.auth import Auth
from hutch.server.e2b import hosts as e2b_hosts
from hutch.server.home import prepare_home, socket_answers
from hutch.server.previews import Previews
from hutch.server.remote import Listener, bind, listener, slow_clients
from hutch.server.tls import protocols, ssl_options
from hutch.service import Service
from hutch.service.claims import StepHook, no_step

log = logging.getLogger("hutch.daemon")


class _Server(uvicorn.Server):
    """uvicorn re-raises SIGTERM after serving, which would skip our cleanup: stop instead."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # _serve installed the loop's handlers: they stop every server of the daemon


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


async def _serve(
    settings: Settings,
    lock_fd: int,
    announce: Callable[[], None] | None,
    tcp: tuple[Listener, socket.socket] | None,
    own: list[Credential],
    on_step: StepHook,
) -> None:
    service = Service(settings, on_step=on_step)
    service.keyring.use_file(own)
    try:
        await service.cluster.claim()  # one gateway per Ray cluster: a second is refused, naming the first
    except HutchError:
        await service.close()
        os.close(lock_fd)
        raise
    report = await service.start()
    log.info(
        "adopted %d sandboxes, marked %d lost, cleaned %d, kept %d made by another version of hutch",
        *(len(report[k]) for k in ("adopted", "lost", "cleaned", "incompatible")),
    )
    service.pool.start()  # the warm pool fills in the background
    service.cluster.start()  # a cluster gateway follows its nodes from the start
    service.lifecycle.start_reaper()  # --ttl / --idle-timeout are enforced with or without a CLI
    service.keyring.start()  # callers' credentials are absorbed; the daemon's own are tried for waiting accounts
    app = create_app(service)
    # From here on a signal means a clean stop: before the pid file and the socket exist, as a
    # caller that sees the socket answer may send SIGTERM at once (hutch daemon stop), and the
    # default action would leave both behind. A stop that comes before the servers exist
    # stops them as soon as they have started.
    servers: list[tuple[_Server, socket.socket]] = []
    stopping: list[int] = []

    def stop_all(sig: int | None = None) -> None:
        stopping.append(sig or signal.SIGTERM)
        for server, _ in servers:
            server.handle_exit(stopping[-1], None)

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop_all, sig)
    (settings.home / "hutchd.pid").write_text(f"{os.getpid()}\n")  # before the socket answers
    sock = _bind(str(settings.socket_path))
    common: dict[str, Any] = {
        "log_level": "warning",
        "access_log": False,
        "lifespan": "off",
        "timeout_graceful_shutdown": 5,
        "timeout_keep_alive": settings.http_keepalive,  # clients drop idle connections after half of it
    }
    servers.append((_Server(uvicorn.Config(Auth(app, service, local=True), **common)), sock))
    if tcp is not None:
        lst, tcp_sock = tcp
        tls: dict[str, Any] = {"ssl_certfile": lst.tls_cert, "ssl_keyfile": lst.tls_key} if lst.tls_cert else {}
        edge = Auth(app, service, token=lst.token, require_cert=lst.require_cert)  # the token, an API key, a certificate
        base = settings.public_url or lst.url
        previews = Previews(service, base_url=base, domain=settings.preview_domain, may_open=edge.may_open)
        tls |= ssl_options(lst.client_ca)
        front = previews.middleware(edge)
        if settings.e2b_domain:
            front = e2b_hosts.Hosts(front, settings.e2b_domain)  # E2B_DOMAIN mode's host names
        servers.append((_Server(uvicorn.Config(front, **common, **tls, **protocols(slow_clients(settings)))), tcp_sock))
    else:
        Previews(service, http=slow_clients(settings))  # exposed ports on loopback ports of their own
    restored = await service.ports.restore()  # what was exposed before a restart, for the sandboxes still there
    if restored:
        log.info("exposed %d ports again", restored)
    app.state.shutdown = stop_all
    if stopping:
        stop_all(stopping[-1])
    log.info("hutch daemon %d listening on %s", os.getpid(), settings.socket_path)
    if tcp is not None:
        log.info("and on %s (%s required)", tcp[0].url, "a token or an API key" if tcp[0].token else "an API key")
    if announce is not None:
        announce()

    async def run(server: _Server, s: socket.socket) -> None:
        try:
            await server.serve(sockets=[s])
        finally:
            stop_all()  # one listener ending stops the daemon

    try:
        await asyncio.gather(*(run(server, s) for server, s in servers))
    finally:
        await service.close()
        for name in ("hutchd.pid", "hutchd.sock"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(settings.home / name)
        os.close(lock_fd)


def serve(settings: Settings, announce: Callable[[Listener | None], None] | None = None, *, on_step: StepHook = no_step) -> int:
    """Serve until stopped; ``announce`` is called once the sockets accept connections
    (with the TCP listener, its port resolved, when ``--listen`` asked for one). ``on_step``
    is the Service's hook at each step of a claim's lifecycle (a seam for tests)."""
    lst = listener(settings)  # bad --listen/--token-file/TLS options fail before anything starts
    own = load_file(settings.credentials_file) if settings.credentials_file else []  # refused unless owner-only
    os.umask(0o077)  # the store, the log and the socket are the owner's alone
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    prepare_home(settings.home)
    before, after = fdlimit.raise_soft()  # hundreds of idle sandboxes hold more than 1024 descriptors
    if after != before:
        log.info("raised the open-file limit from %d to %d", before, after)
    lock_fd = os.open(settings.home / "hutchd.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock_fd)
        if socket_answers(settings.socket_path) and lst is not None:
            raise ConflictError(
                f"a hutch daemon already runs for {settings.home}: it cannot add --listen",
                hint="stop it first (hutch daemon stop), then run hutch serve --listen ...",
            ) from None
        if socket_answers(settings.socket_path):
            log.info("a hutch daemon is already running for %s", settings.home)
            return 0
        raise UnavailableError("another hutch daemon holds the lock but does not answer", hint="hutch daemon stop") from None
    tcp = None
    if lst is not None:
        try:
            tcp_sock = bind(lst)
        except InvalidError:
            os.close(lock_fd)
            raise
        lst = dataclasses.replace(lst, port=tcp_sock.getsockname()[1])
        tcp = (lst, tcp_sock)
    main = _serve(settings, lock_fd, (lambda: announce(lst)) if announce else None, tcp, own, on_step)
    try:  # uvloop when installed (the default on Linux): a third less event-loop overhead per proxied request
        import uvloop
    except ImportError:
        asyncio.run(main)
    else:
        uvloop.run(main)
    return 0
