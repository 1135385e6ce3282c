"""``Images`` and ``AsyncImages``: the image store from Python (what ``hutch image`` does).

    images = hutch.Images()
    done = images.pull("python:3.12-slim", on_progress=lambda frame: print(frame["type"]))
    images.import_("oci-archive:build/app.tar", "app:1")      # or a Path: a root filesystem directory or tarball
    with hutch.Sandbox.create(image="python:3.12-slim") as sbx: ...

A pull or an import returns its ``done`` frame (``image``: the stored image, ``transferred``:
blob bytes downloaded); ``on_progress`` sees every frame before it (``resolved``, ``layer``,
``progress``, ``received``). Failures raise :class:`hutch.HutchError` (nothing half-stored stays).
Local sources (``oci-archive:``, ``oci:``, ``docker-archive:``, ``rootfs:``, a ``Path``) are read
here and uploaded, so they work through a remote daemon too.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any, Self, cast

from hutch.client import AsyncClient, Client
from hutch.client.images import afollow, follow
from hutch.config import Settings

if TYPE_CHECKING:
    from hutch import wire

OnProgress = Callable[["wire.ImagePullFrame"], None]


def source_ref(source: str | os.PathLike[str]) -> str:
    """What ``import_`` takes: a reference (``oci-archive:PATH`` ...) or a path (a root filesystem)."""
    return source if isinstance(source, str) else f"rootfs:{os.fspath(source)}"


def _progress(on_progress: OnProgress | None) -> Callable[[dict[str, Any]], None] | None:
    """The frames ``on_progress`` sees: all but the last (``done``, or ``error``, which raises)."""
    if on_progress is None:
        return None
    call = on_progress

    def seen(frame: dict[str, Any]) -> None:
        if frame.get("type") not in ("done", "error"):
            call(cast("wire.ImagePullFrame", frame))

    return seen


class Images:
    """The image store of the daemon (local, started on demand) or the gateway ``settings`` point at."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.client = Client(settings)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.client.close()

    def pull(
        self, ref: str, *, insecure: bool = False, platform: str | None = None, on_progress: OnProgress | None = None
    ) -> wire.ImageDoneFrame:
        """Pull ``ref`` (``python:3.12-slim``, ``localhost:5000/team/img:tag``, ``NAME@sha256:...``)
        from its registry; the login comes from the environment or the docker config file."""
        frames = self.client.image_pull(ref, insecure=insecure, platform=platform)
        return cast("wire.ImageDoneFrame", follow(cast(Iterator[dict[str, Any]], frames), _progress(on_progress)))

    def import_(
        self,
        source: str | os.PathLike[str],
        name: str | None = None,
        *,
        changes: wire.CommitChanges | None = None,
        on_progress: OnProgress | None = None,
    ) -> wire.ImageDoneFrame:
        """Import ``source`` (``oci-archive:PATH[:REF]``, ``oci:DIR[:REF]``, ``docker-archive:PATH``,
        ``rootfs:PATH``; a path is a root filesystem directory or tarball) as ``name``; ``changes``
        (``env`` K=V entries, ``workdir``, ``user``, ``cmd``, ``entrypoint``) edit its config."""
        frames = self.client.image_import(source_ref(source), name, changes)
        return cast("wire.ImageDoneFrame", follow(cast(Iterator[dict[str, Any]], frames), _progress(on_progress)))

    def list(self) -> builtins.list[wire.ImageRecord]:
        """Stored images, newest first."""
        return self.client.images()

    def inspect(self, ref: str) -> wire.ImageRecord:
        """One image, by name, ``NAME@DIGEST``, id or unique id prefix."""
        return self.client.image_inspect(ref)

    def rm(self, ref: str, *, force: bool = False) -> wire.ImageRemoved:
        """Remove a name (the image once its last name goes), or the image by its id."""
        return self.client.image_rm(ref, force)

    def prune(self) -> wire.ImagePruned:
        """Remove the files no image and no live sandbox uses."""
        return self.client.image_prune()


class AsyncImages:
    """The asynchronous twin of :class:`Images`."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.client = AsyncClient(settings)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.client.close()

    async def pull(
        self, ref: str, *, insecure: bool = False, platform: str | None = None, on_progress: OnProgress | None = None
    ) -> wire.ImageDoneFrame:
        frames = self.client.image_pull(ref, insecure=insecure, platform=platform)
        return cast("wire.ImageDoneFrame", await afollow(cast(AsyncIterator[dict[str, Any]], frames), _progress(on_progress)))

    async def import_(
        self,
        source: str | os.PathLike[str],
        name: str | None = None,
        *,
        changes: wire.CommitChanges | None = None,
        on_progress: OnProgress | None = None,
    ) -> wire.ImageDoneFrame:
        frames = self.client.image_import(source_ref(source), name, changes)
        return cast("wire.ImageDoneFrame", await afollow(cast(AsyncIterator[dict[str, Any]], frames), _progress(on_progress)))

    async def list(self) -> builtins.list[wire.ImageRecord]:
        return await self.client.images()

    async def inspect(self, ref: str) -> wire.ImageRecord:
        return await self.client.image_inspect(ref)

    async def rm(self, ref: str, *, force: bool = False) -> wire.ImageRemoved:
        return await self.client.image_rm(ref, force)

    async def prune(self) -> wire.ImagePruned:
        return await self.client.image_prune()
