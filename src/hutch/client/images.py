"""The client side of images: the registry login a pull carries, and the upload an import sends.

An import reads its source here, where the command runs (so it works through a remote daemon
too), and streams it as one tar body: an ``oci-archive:`` or ``docker-archive:`` file as it is,
an ``oci:DIR`` layout or a ``rootfs:DIR`` directory as a tar made on the fly, a ``rootfs:``
tarball as it is, ``-`` from standard input. Device nodes and fifos of a directory are not
sent (a sandbox has its own ``/dev``).
"""

from __future__ import annotations

import json
import os
import stat
import tarfile
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from hutch import credentials, imageref
from hutch.client.endpoint import Endpoint
from hutch.errors import InvalidError, NotFoundError

CHUNK = 1 << 20


def login_headers(endpoint: Endpoint, ref: str) -> dict[str, str]:
    """The ``x-hutch-registry-auth`` header for pulling ``ref``, when the caller has a login for its registry."""
    parsed = imageref.parse(ref)
    if isinstance(parsed, imageref.LocalRef):
        raise InvalidError(f"{ref} is a local source, not a registry reference", hint=f"hutch image import {ref} NAME")
    login = credentials.registry_login(os.environ, parsed.domain)
    if login is None:
        return {}
    if not credentials.sendable(endpoint.scheme, endpoint.address, endpoint.remote):
        raise InvalidError(
            f"a registry login is sent only over the local socket or TLS, not to {endpoint.label}",
            hint="use an https:// HUTCH_HOST, or unset the login to pull anonymously",
        )
    return {credentials.REGISTRY_HEADER: credentials.encode_login(login)}


@dataclass
class Upload:
    """What an import sends: the format the daemon reads, its query, and the body's chunks."""

    format: str
    params: dict[str, Any]
    chunks: Iterator[bytes] = field(repr=False)


def _file_chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            yield chunk


def _fd_chunks(fd: int) -> Iterator[bytes]:
    while chunk := os.read(fd, CHUNK):
        yield chunk


def _skip_special(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    return None if info.ischr() or info.isblk() or info.isfifo() else info


def _tar_chunks(root: Path) -> Iterator[bytes]:
    """A tar of ``root``'s contents (names relative to it), made in a thread as it is read."""
    r, w = os.pipe()
    failure: list[BaseException] = []

    def write() -> None:
        try:
            with os.fdopen(w, "wb") as out, tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                for entry in sorted(os.listdir(root)):
                    tar.add(root / entry, arcname=entry, recursive=True, filter=_skip_special)
        except BaseException as exc:  # noqa: BLE001 - told to the reader
            failure.append(exc)

    thread = threading.Thread(target=write, name="hutch-image-tar", daemon=True)
    thread.start()
    try:
        yield from _fd_chunks(r)
    finally:
        os.close(r)  # a writer still going gets EPIPE and stops
        thread.join()
    if failure:
        exc = failure[0]
        if isinstance(exc, OSError):
            raise InvalidError(f"cannot read {root}: {exc}", hint="the directory must be readable by you") from None
        raise exc


def changes_param(changes: Mapping[str, Any] | None) -> dict[str, str]:
    """The import's ``changes`` query parameter (JSON), when there are any."""
    return {"changes": json.dumps(dict(changes), separators=(",", ":"))} if changes else {}


def upload(source: str, name: str | None) -> Upload:
    """The upload for ``source`` (``oci-archive:``, ``oci:``, ``docker-archive:``, ``rootfs:`` or ``-``)."""
    ref = imageref.parse(source)
    if isinstance(ref, imageref.RegistryRef):
        raise InvalidError(f"{source} is a registry reference, not a local source", hint=f"hutch image pull {source}")
    params: dict[str, Any] = {"name": name} if name else {}
    if name:
        imageref.parse_registry(name)  # a bad name is refused before anything is read
    if ref.transport == "stdin":
        return Upload("rootfs", params, _fd_chunks(0))
    path = Path(ref.path).expanduser()
    if not path.exists():
        raise NotFoundError(f"{path} does not exist", hint=f"check the path in {source}")
    try:
        st = path.stat()
    except OSError as exc:
        raise InvalidError(f"cannot read {path}: {exc.strerror}") from None
    is_dir = stat.S_ISDIR(st.st_mode)
    if ref.transport == "oci":
        if not is_dir or not (path / "index.json").is_file():
            raise InvalidError(f"{path} is not an OCI image layout (no index.json)", hint="oci:DIR takes a layout directory")
        return Upload("oci", params | ({"ref": ref.ref} if ref.ref else {}), _tar_chunks(path))
    if ref.transport == "rootfs":
        return Upload("rootfs", params, _tar_chunks(path) if is_dir else _file_chunks(path))
    if is_dir:
        raise InvalidError(f"{path} is a directory", hint=f"{ref.transport}: takes a tar file (oci:DIR takes a layout dir)")
    if ref.transport == "oci-archive":
        return Upload("oci", params | ({"ref": ref.ref} if ref.ref else {}), _file_chunks(path))
    return Upload("docker", params, _file_chunks(path))


async def aiter_chunks(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    """The upload's chunks for the async client, each read in a worker thread."""
    import asyncio

    done = object()
    while (chunk := await asyncio.to_thread(next, chunks, done)) is not done:
        yield cast(bytes, chunk)


def _frame(frame: dict[str, Any], on_frame: Callable[[dict[str, Any]], None] | None) -> dict[str, Any] | None:
    from hutch.errors import HutchError

    if on_frame is not None:
        on_frame(frame)
    if frame.get("type") == "error":
        raise HutchError.from_dict(frame["error"])
    return frame if frame.get("type") == "done" else None


def _cut() -> Exception:
    from hutch.errors import UnavailableError

    return UnavailableError("the daemon's answer ended before the image was done", hint="see hutch daemon logs; try again")


def follow(frames: Iterator[dict[str, Any]], on_frame: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Read a pull's or an import's frames to the end: the ``done`` frame; an ``error`` frame raises."""
    try:
        for frame in frames:
            if (done := _frame(frame, on_frame)) is not None:
                return done
    finally:
        close = getattr(frames, "close", None)
        if close is not None:
            close()
    raise _cut()


async def afollow(
    frames: AsyncIterator[dict[str, Any]], on_frame: Callable[[dict[str, Any]], None] | None = None
) -> dict[str, Any]:
    """:func:`follow` for the async client's frames."""
    try:
        async for frame in frames:
            if (done := _frame(frame, on_frame)) is not None:
                return done
    finally:
        aclose = getattr(frames, "aclose", None)
        if aclose is not None:
            await aclose()
    raise _cut()
