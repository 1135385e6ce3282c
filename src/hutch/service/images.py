"""Image use-cases: pull, import, list, inspect, rm, prune (the store itself: providers/local/images).

A pull or an import is a stream of events (``wire.ImagePullFrame``) ending with ``done`` (the
image) or ``error``. Whatever fails, nothing half-stored stays: the files the attempt added
and no image uses are collected before the error is told (a transfer cut by the network keeps
its partial blob, so that pulling again resumes it; ``prune`` removes those too).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import IO, TYPE_CHECKING, Any, cast

from hutch import imageref as refs
from hutch.actors import OWNER_ID
from hutch.credentials import RegistryLogin
from hutch.errors import ConflictError, HutchError, InternalError, InvalidError
from hutch.models import LIVE_STATES
from hutch.provider import CheckResult
from hutch.providers.local.images import archive
from hutch.providers.local.images.build import Emit, build
from hutch.providers.local.images.manifests import host_platform
from hutch.providers.local.images.pull import PullOptions, keep_owners, pull
from hutch.providers.local.images.store import ImageStore

if TYPE_CHECKING:
    from hutch.service import Service

log = logging.getLogger("hutch.service")
THROTTLE = 0.2  # seconds between two progress (or received) events
MAX_IMPORT = 64 << 30  # bytes of one upload
FORMATS = ("oci", "docker", "rootfs")

Work = Callable[[Emit], Awaitable[dict[str, Any]]]


class Images:
    def __init__(self, service: Service) -> None:
        self.svc = service
        self.store = ImageStore(service.settings.home / "images", service.store.images)

    @property
    def source(self) -> ImageStore:
        """The ``ImageSource`` local sandboxes resolve their ``--image`` through."""
        return self.store

    # -- what uses an image ----------------------------------------------------------------

    def _stores_images(self, provider: str) -> bool:
        """Whether ``provider``'s sandboxes start from this store (a sandbox still being made has no image_id yet)."""
        try:
            return self.svc.provider(provider).capabilities.image_store
        except HutchError:
            return False

    def in_use(self, owner: str | None = None) -> dict[str, list[str]]:
        """Image id -> the live sandboxes made from it (``owner``'s only; None: everyone's)."""
        out: dict[str, list[str]] = {}
        for rec in self.svc.store.sandboxes.all(LIVE_STATES):
            image_id = rec.data.get("image_id") if isinstance(rec.data.get("image_id"), str) else None
            if image_id is None and rec.spec.image and self._stores_images(rec.provider):
                with contextlib.suppress(HutchError):
                    row = self.store.find(rec.spec.image, None, rec.owner)
                    image_id = row["id"] if row is not None else None
            if image_id is not None and (owner is None or rec.owner == owner):
                out.setdefault(image_id, []).append(rec.id)
        return out

    # -- whose images (service/access.py) --------------------------------------------------

    def _owner(self) -> str | None:
        """Whose images the request sees: its actor's (a key's own), or everyone's for an admin."""
        return self.svc.access.owner_filter()

    def describe(self, row: dict[str, Any], sandboxes: list[str] | None = None, owner: str | None = None) -> dict[str, Any]:
        """An image as the request's actor is shown it: a key never sees the daemon's host paths
        (``rootfs`` is empty for it), an admin does."""
        shown = self.store.describe(row, sandboxes, owner)
        if self._owner() is not None:
            shown["rootfs"] = ""
        return shown

    def admit(self, ref: str) -> str | None:
        """Before a sandbox is made from ``ref``: a key may start only from its own images (what
        another key holds does not exist for it); an admin from any. The id of the key's image,
        which the provider then starts from (``image_pin``): were the name removed meanwhile, the
        provider must not find another owner's image of that name (None: an admin's, any)."""
        owner = self._owner()
        if owner is not None:
            return str(self.store.lookup(ref, owner)["id"])
        return None

    # -- reading ---------------------------------------------------------------------------

    def check(self) -> CheckResult:
        """``hutch doctor``'s line: what the store holds, and how to get a useful image when it holds none."""
        rows = self.store.rows.all()
        if not rows:
            how = (
                "none stored; sandboxes without --image use the host's /usr. To get one: hutch image pull python:3.12-slim, "
                "or with no registry: mmdebstrap --variant=minbase bookworm - | hutch image import - debian:bookworm "
                "(docs/images.md)"
            )
            return CheckResult("images", True, how)
        names = [refs.familiar(n) for r in rows for n in r["names"] if "@" not in n]
        shown = ", ".join(names[:5]) + (" ..." if len(names) > 5 else "")
        return CheckResult("images", True, f"{len(rows)} stored ({shown or 'unnamed'}) in {self.store.root}")

    def list(self) -> list[dict[str, Any]]:
        owner = self._owner()
        used = self.in_use(owner)
        return [self.describe(row, used.get(row["id"])) for row in self.store.rows.all(owner)]

    def inspect(self, ref: str) -> dict[str, Any]:
        owner = self._owner()
        row = self.store.lookup(ref, owner, self.svc.access.owner())
        return self.describe(row, self.in_use(owner).get(row["id"]), owner)

    # -- pull and import -------------------------------------------------------------------

    def pull(
        self, ref: str, auth: RegistryLogin | None, *, insecure: bool = False, platform: str | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """Pull ``ref``: its events, ``done`` last (with the image and the blob bytes transferred)."""
        parsed = refs.parse(ref)
        if isinstance(parsed, refs.LocalRef):
            raise InvalidError(f"{ref} is a local source, not a registry reference", hint=f"hutch image import {ref} NAME")
        want = _platform(platform)
        opts = PullOptions(platform=want, insecure=insecure or self._insecure(parsed), keep_owners=keep_owners())

        async def work(emit: Emit) -> dict[str, Any]:
            row, transferred = await pull(self.store, parsed, auth, opts, emit)
            return {"image": self.describe(row, owner=self.svc.access.owner()), "transferred": transferred}

        return self._events(work)

    def _insecure(self, ref: refs.RegistryRef) -> bool:
        allowed = {h.strip() for h in self.svc.settings.insecure_registries.split(",") if h.strip()}
        return ref.domain in allowed

    def import_(
        self,
        fmt: str,
        chunks: AsyncIterator[bytes],
        *,
        name: str | None,
        ref: str | None,
        platform: str | None = None,
        changes: dict[str, Any] | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """Import an upload (``oci``: an OCI layout tar, ``docker``: docker save, ``rootfs``: a root filesystem tar);
        ``changes`` (env, workdir, user, cmd, entrypoint) edit its config as a commit's do."""
        if fmt not in FORMATS:
            raise InvalidError(f"unknown import format {fmt!r}", hint=f"one of {', '.join(FORMATS)}")
        target = refs.parse_registry(name) if name else None
        want = _platform(platform)

        async def work(emit: Emit) -> dict[str, Any]:
            body = Upload(chunks, asyncio.get_running_loop(), emit)
            try:  # the import reads the body as it arrives (a worker thread, pulling chunks from the loop)
                return await asyncio.to_thread(self._import_sync, fmt, body, target, ref, want, emit, changes)
            finally:
                await body.drain()

        return self._events(work)

    def _import_sync(
        self,
        fmt: str,
        stream: Upload,
        target: refs.RegistryRef | None,
        ref: str | None,
        want: str,
        emit: Emit,
        changes: dict[str, Any] | None,
    ) -> dict[str, Any]:
        carried: list[str] = []
        body = cast(IO[bytes], stream)  # read() is all tarfile and the blob store use
        if fmt == "rootfs":
            parts = archive.rootfs_parts(self.store, body, MAX_IMPORT, want, emit, keep_owners=keep_owners())
        else:
            got = archive.receive(self.store, body, MAX_IMPORT, emit)
            stream.finish()  # what follows the tar's end (its padding) is read now, not after the build
            if fmt == "oci":
                parts, carried = archive.oci_parts(self.store, got, ref, want)
            else:
                parts, carried = archive.docker_parts(self.store, got, want)
        names = [target.name] if target else _carried_names(carried)
        parts = archive.with_changes(self.store, parts, changes)
        row = build(self.store, parts, names, emit, keep_owners=keep_owners())
        return {"image": self.describe(row, owner=self.svc.access.owner()), "transferred": 0}

    async def _events(self, work: Work) -> AsyncIterator[dict[str, Any]]:
        """Run ``work`` (which emits events, from any thread), yield its events, then ``done`` or ``error``."""
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        last: dict[str, float] = {}
        loop_thread = threading.get_ident()

        def emit(event: dict[str, Any]) -> None:
            kind = event.get("type", "")
            if kind == "progress":
                key = f"{kind} {event.get('digest', '')}"
                now = time.monotonic()
                if now - last.get(key, 0.0) < THROTTLE:
                    return
                last[key] = now
            if threading.get_ident() == loop_thread:
                events.put_nowait(event)
            else:
                loop.call_soon_threadsafe(events.put_nowait, event)

        async def run() -> dict[str, Any]:
            lock = await asyncio.to_thread(_enter, self.store.shared())
            try:
                return await work(emit)
            finally:
                await asyncio.to_thread(lock.__exit__, None, None, None)

        task = asyncio.ensure_future(run())
        task.add_done_callback(lambda _t: events.put_nowait(None))
        try:
            while (event := await events.get()) is not None:
                yield event
            try:
                result = task.result()
            except HutchError as exc:
                await self._cleanup()
                yield {"type": "error", **exc.to_dict()}
                return
            except Exception as exc:
                log.exception("image transfer failed")
                await self._cleanup()
                yield {"type": "error", **InternalError(f"{type(exc).__name__}: {exc}").to_dict()}
                return
            yield {"type": "done", **result}
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task

    async def _cleanup(self) -> None:
        """After a failed pull or import: remove what it added that no image uses."""
        keep = self.kept()
        try:
            await asyncio.to_thread(self.store.collect, keep)
        except (HutchError, OSError) as exc:
            log.warning("cleaning up after a failed image transfer: %s", exc)

    # -- removing --------------------------------------------------------------------------

    async def remove(self, ref: str, force: bool = False) -> dict[str, Any]:
        owner = self._owner()
        row = self.store.lookup(ref, owner, self.svc.access.owner())
        users = self.in_use(owner).get(row["id"], [])  # a key is told only of its own sandboxes
        if users and not force:
            shown = ", ".join(users[:5]) + (" ..." if len(users) > 5 else "")
            raise ConflictError(
                f"image {ref!r} is used by {len(users)} live sandbox(es): {shown}",
                hint="destroy them first, or hutch image rm --force (its files stay until they are gone)",
            )
        pooled = self.svc.pool.image_ids(self.pool_find).get(row["id"], [])
        row, untagged, deleted = self.store.remove(ref, owner, self.svc.access.owner())
        await self.svc.pool.image_removed(row["id"], pooled, ref, self.pool_find)  # its pools are drained
        freed = 0
        if deleted:
            report = await asyncio.to_thread(self.store.collect, self.kept())
            freed = report["freed"]
        return {
            "image": row["id"],
            "untagged": [refs.familiar(n) for n in untagged],
            "deleted": deleted,
            "sandboxes": users,
            "freed": freed,
        }

    async def sweep(self) -> None:
        """At daemon start: remove the temporary directories an interrupted pull or import left."""
        if not self.store.root.is_dir():
            return
        try:
            report = await asyncio.to_thread(self.store.sweep)
        except (HutchError, OSError) as exc:
            log.warning("sweeping the image store: %s", exc)
            return
        if report["temporaries"]:
            log.info("image store: removed %d temporary directories left by an interrupted transfer", report["temporaries"])

    def kept(self) -> set[str]:
        """The images in use: by live sandboxes, and by the warm pool's shapes."""
        return set(self.in_use()) | set(self.svc.pool.image_ids(self.pool_find))

    def pool_find(self, text: str) -> dict[str, Any] | None:
        """The image a warm pool's shape names: as the local owner (who sets pools) resolves it."""
        return self.store.find(text, None, OWNER_ID)

    async def prune(self) -> dict[str, Any]:
        report = await asyncio.to_thread(self.store.collect, self.kept(), True)
        return dict(report)


def _platform(platform: str | None) -> str:
    host = host_platform()
    if platform is None or platform == host:
        return host
    if platform.split("/")[:2] != host.split("/")[:2]:
        raise InvalidError(
            f"this machine runs {host} images only, not {platform}",
            hint="drop --platform (images for another architecture cannot run here)",
        )
    return platform


def _carried_names(names: list[str]) -> list[str]:
    out = []
    for name in names:
        with contextlib.suppress(HutchError):
            out.append(refs.parse_registry(name).name)
    return out


def _enter(cm: contextlib.AbstractContextManager[None]) -> contextlib.AbstractContextManager[None]:
    cm.__enter__()
    return cm


class Upload(io.RawIOBase):
    """An upload's body as a blocking stream for a worker thread: each ``read`` takes what the
    event loop received next (the loop reads the request only when the import asks, so a slow
    import slows the client down, and nothing is spooled). ``received`` events tell the bytes
    so far (every THROTTLE seconds, and once at the end)."""

    def __init__(self, chunks: AsyncIterator[bytes], loop: asyncio.AbstractEventLoop, emit: Emit) -> None:
        self.chunks = chunks
        self.loop = loop
        self.emit = emit
        self.buffer = memoryview(b"")
        self.size = 0
        self.ended = False
        self.told = 0.0

    def readable(self) -> bool:
        return True

    def _next(self) -> bool:
        """Wait for the next chunk (from the worker thread); False at the end of the body."""
        if self.ended:
            return False
        try:
            chunk = asyncio.run_coroutine_threadsafe(_next_chunk(self.chunks), self.loop).result()
        except BaseException:
            self.ended = True
            raise
        if chunk is None:
            self.ended = True
            self.emit({"type": "received", "bytes": self.size})
            return False
        self.size += len(chunk)
        self.buffer = memoryview(chunk)
        now = time.monotonic()
        if now - self.told >= THROTTLE:
            self.told = now
            self.emit({"type": "received", "bytes": self.size})
        return True

    def read(self, size: int = -1) -> bytes:
        if size < 0:
            return self.readall()
        while not self.buffer:
            if not self._next():
                return b""
        if size >= len(self.buffer):
            out, self.buffer = self.buffer, memoryview(b"")
        else:
            out, self.buffer = self.buffer[:size], self.buffer[size:]
        return out.tobytes()

    def readinto(self, b: Any) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def finish(self) -> None:
        """Read the rest of the body (the worker thread): an archive's padding after its end."""
        self.buffer = memoryview(b"")
        while self._next():
            self.buffer = memoryview(b"")

    async def drain(self) -> None:
        """After the import (on the loop): take what is left of the body, so that the answer
        reaches a client still sending it (a socket closed with unread bytes resets)."""
        if self.ended:
            return
        self.ended = True
        with contextlib.suppress(Exception):
            while await _next_chunk(self.chunks) is not None:
                pass


async def _next_chunk(chunks: AsyncIterator[bytes]) -> bytes | None:
    """The body's next non-empty chunk, None at its end."""
    async for chunk in chunks:
        if chunk:
            return chunk
    return None
