"""Exposed ports (``hutch expose``): a server listening inside a sandbox, opened to the
outside through the daemon.

The Service keeps what is exposed (in memory, and in the store: an exposure outlives a
restart of the daemon, :meth:`Ports.restore`, and ends with its sandbox), checks who may
open it (public, or a signed token, or the owner's credentials), makes the connection into
the sandbox through its provider (:class:`~hutch.provider.PortsProvider`), and records
each change as an event. How a request reaches it is the server's
(:mod:`hutch.server.previews`): the ``front`` it binds here opens a loopback port for each
exposure on the local daemon and says the URLs.

Private URLs carry a token: an HMAC-SHA256, under a key of the daemon's own (kept
owner-only in its state directory so that links survive a restart of the daemon), of the
sandbox, the port and a nonce of the exposure; exposing the port again makes a new nonce,
so ``unexpose`` ends every link given before.
"""

from __future__ import annotations

import base64
import builtins
import hashlib
import hmac
import os
import secrets
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from hutch.actors import current
from hutch.errors import ConflictError, InvalidError, NotFoundError, UnavailableError
from hutch.provider import ports_provider

if TYPE_CHECKING:
    from hutch.service import Service

MAX_PORTS = 64  # per sandbox


@dataclass
class Exposed:
    sandbox_id: str
    port: int
    public: bool
    owner: str | None
    nonce: str = field(default_factory=lambda: secrets.token_hex(8))
    created_at: float = field(default_factory=time.time)
    local_port: int | None = None  # the daemon's loopback port for it (the local daemon)


class Front(Protocol):
    """How requests reach exposed ports (the server's side)."""

    async def opened(self, ex: Exposed) -> None: ...
    async def closed(self, ex: Exposed) -> None: ...
    def urls(self, ex: Exposed, token: str | None) -> list[str]: ...


def _key(home: Path) -> bytes:
    path = home / "preview.key"
    try:
        data = path.read_bytes()
        if len(data) == 32:
            return data
    except FileNotFoundError:
        pass
    data = secrets.token_bytes(32)
    tmp = path.with_name("preview.key.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    return data


class Ports:
    def __init__(self, service: Service) -> None:
        self.svc = service
        self.exposed: dict[tuple[str, int], Exposed] = {}
        self.front: Front | None = None
        self._secret: bytes | None = None

    @property
    def secret(self) -> bytes:
        if self._secret is None:
            self._secret = _key(self.svc.settings.home)
        return self._secret

    def token(self, ex: Exposed) -> str:
        mac = hmac.new(self.secret, f"{ex.sandbox_id}:{ex.port}:{ex.nonce}".encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac[:24]).decode()

    def token_ok(self, ex: Exposed, token: str) -> bool:
        return hmac.compare_digest(self.token(ex).encode(), token.encode("utf-8", "replace"))

    def describe(self, ex: Exposed) -> dict[str, Any]:
        urls = self.front.urls(ex, None if ex.public else self.token(ex)) if self.front is not None else []
        return {
            "sandbox": ex.sandbox_id,
            "port": ex.port,
            "url": urls[0] if urls else "",
            "public": ex.public,
            "urls": urls,
            "created_at": ex.created_at,
        }

    async def expose(self, ref: str, port: int, public: bool) -> dict[str, Any]:
        if not 0 < port < 65536:
            raise InvalidError(f"no such port {port}", hint="a port from 1 to 65535")
        rec = self.svc.live(ref)
        provider = self.svc.provider(rec.provider)
        ports_provider(provider)  # refused before anything is made
        caps = provider.capabilities.of_runtime(rec.spec.runtime)
        if caps is not None and not caps.ports:
            raise InvalidError(
                f"the {rec.spec.runtime} runtime cannot expose a port of its sandbox",
                hint="create the sandbox with --runtime bwrap to expose ports",
            )
        found = self.exposed.get((rec.id, port))
        if found is not None and found.public == public:
            return self.describe(found)  # idempotent: the same URL
        if found is None and sum(1 for sid, _ in self.exposed if sid == rec.id) >= MAX_PORTS:
            raise InvalidError(f"sandbox {rec.id} already exposes {MAX_PORTS} ports", hint="unexpose some first")
        if found is not None:
            await self._close(found, "changed")
        ex = Exposed(rec.id, port, public, self._owner())
        if self.front is not None:
            await self.front.opened(ex)
        self.exposed[(rec.id, port)] = ex
        self.svc.store.ports.put(rec.id, port, public, ex.owner, ex.nonce, ex.created_at)
        self.svc.store.events.append("port_exposed", rec.id, port=port, public=public, local_port=ex.local_port)
        return self.describe(ex)

    def list(self, ref: str) -> builtins.list[dict[str, Any]]:
        rec = self.svc.get(ref)
        return [self.describe(ex) for (sid, _), ex in sorted(self.exposed.items()) if sid == rec.id]

    async def unexpose(self, ref: str, port: int) -> dict[str, Any]:
        rec = self.svc.get(ref)
        ex = self.exposed.get((rec.id, port))
        if ex is not None:
            await self._close(ex, "unexposed")
        return {"sandbox": rec.id, "port": port, "closed": ex is not None}

    async def close_sandbox(self, sandbox_id: str, why: str = "destroyed") -> None:
        """Every port of a sandbox that is gone."""
        for ex in [ex for (sid, _), ex in self.exposed.items() if sid == sandbox_id]:
            await self._close(ex, why)

    async def restore(self) -> int:
        """At the daemon's start (its front bound): the exposures it had, for the sandboxes that
        are still running or paused, with their nonces (the links given before still open them;
        a local daemon's loopback port is a new one). Those of sandboxes gone are dropped."""
        live = self.svc.store.sandboxes.live_ids()
        restored = 0
        for row in self.svc.store.ports.all():
            if row["sandbox_id"] not in live:
                self.svc.store.ports.delete(row["sandbox_id"])
                continue
            ex = Exposed(row["sandbox_id"], row["port"], row["public"], row["owner"], row["nonce"], row["created_at"])
            if self.front is not None:
                await self.front.opened(ex)
            self.exposed[(ex.sandbox_id, ex.port)] = ex
            self.svc.store.events.append(
                "port_exposed", ex.sandbox_id, port=ex.port, public=ex.public, local_port=ex.local_port, restored=True
            )
            restored += 1
        return restored

    async def close_all(self) -> None:
        """The daemon stops: its servers close, the store keeps what was exposed (see restore)."""
        for ex in list(self.exposed.values()):
            if self.front is not None:
                await self.front.closed(ex)
        self.exposed.clear()

    async def _close(self, ex: Exposed, why: str) -> None:
        if self.exposed.get((ex.sandbox_id, ex.port)) is ex:
            del self.exposed[(ex.sandbox_id, ex.port)]
            self.svc.store.ports.delete(ex.sandbox_id, ex.port)
        if self.front is not None:
            await self.front.closed(ex)
        self.svc.store.events.append("port_unexposed", ex.sandbox_id, port=ex.port, reason=why)

    @staticmethod
    def _owner() -> str | None:
        return current().id

    # -- each connection -----------------------------------------------------------------

    def find(self, sandbox: str, port: int) -> Exposed:
        """The exposure of ``port`` of ``sandbox`` (an id, or a name); ``not_found`` otherwise."""
        ex = self.exposed.get((sandbox, port))
        if ex is None:
            try:
                ex = self.exposed.get((self.svc.get(sandbox).id, port))
            except (NotFoundError, InvalidError):
                ex = None
        if ex is None:
            raise NotFoundError(f"port {port} of sandbox {sandbox} is not exposed", hint=f"hutch expose {sandbox} {port}")
        return ex

    async def open(self, ref: str, port: int) -> socket.socket:
        """A connection to ``port`` inside sandbox ``ref``, exposed or not, for whoever may run
        commands in it (its owner, an admin): a cluster's gateway reaches the ports of its
        nodes' sandboxes this way (the node's ``/v1/sandboxes/{ref}/ports/{port}/connect``)."""
        if not 0 < port < 65536:
            raise InvalidError(f"no such port {port}", hint="a port from 1 to 65535")
        rec = self.svc.live(ref)
        return await ports_provider(self.svc.provider(rec.provider)).connect_port(rec, port)

    async def connect(self, ex: Exposed) -> socket.socket:
        """A new connection to the exposed port, inside its sandbox (activity, for --idle-timeout)."""
        try:
            rec = self.svc.live(ex.sandbox_id)
        except NotFoundError:  # gone: its ports go too
            await self._close(ex, "sandbox gone")
            raise
        except ConflictError as exc:  # paused, or of another version
            raise UnavailableError(exc.message, hint=exc.hint) from None
        return await ports_provider(self.svc.provider(rec.provider)).connect_port(rec, ex.port)
