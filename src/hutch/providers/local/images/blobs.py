"""Blobs by digest: ``<root>/blobs/sha256/<hex>``, written only after their sha256 is verified.

A blob is written to ``<root>/tmp/<hex>.partial`` while it streams in, hashed as it goes, and
moved into ``blobs/`` in one rename once its size and digest match: a blob in ``blobs/`` is always
whole and verified; a mismatch or a full disk keeps nothing. A transfer cut by the network keeps
its partial file so that the next attempt asks the registry for the rest only (HTTP Range);
``hutch image prune`` removes partial files no transfer holds. One writer per blob at a time
(an exclusive ``flock`` on the partial file, across processes too).

A layer is unpacked while it downloads: :meth:`BlobWriter.follow` reads the partial file as
it grows and ends only once the blob is verified and stored; a transfer that fails, is
refused or starts over raises :class:`AbandonedError` in the reader instead, so an unpack that
follows a download can never finish on bytes that were not verified.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import io
import os
import secrets
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hutch.errors import CapacityError, InvalidError
from hutch.imageref import check_digest

CHUNK = 1 << 20
FULL_HINT = "free space on the disk of hutch's state directory (hutch image prune removes what no image uses)"


def disk_full(exc: OSError, what: str) -> CapacityError | None:
    """A full disk (or quota) as a clear ``capacity`` error; None for any other OSError."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return CapacityError(f"the disk is full: cannot store {what}", hint=FULL_HINT)
    return None


class BusyError(Exception):
    """Another writer holds this blob's partial file."""


class AbandonedError(Exception):
    """The blob a :class:`Following` reader followed was not stored (its transfer failed or started over)."""


class BlobWriter:
    """One blob streaming in: ``write`` chunks, then ``commit`` (verify + move into place) or ``discard``."""

    def __init__(self, blobs: BlobStore, digest: str, size: int | None) -> None:
        self.blobs = blobs
        self.digest = digest
        self.size = size  # what the manifest says; more bytes than this are refused as they come
        self.partial = blobs.tmp / f"{digest[7:]}.partial"
        blobs.tmp.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(self.partial, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            raise BusyError(digest) from None
        self.hash = hashlib.sha256()
        self.offset = 0
        self._cond = threading.Condition()  # wakes the readers that follow the download
        self._end = ""  # "stored" | "lost" once the transfer is over
        self._restarts = 0
        self._resume()

    def _resume(self) -> None:
        """Hash what an earlier, interrupted transfer left (to ask only for the rest)."""
        end = os.lseek(self.fd, 0, os.SEEK_END)
        if self.size is not None and end > self.size:
            self.reset()
            return
        os.lseek(self.fd, 0, os.SEEK_SET)
        while True:
            chunk = os.read(self.fd, CHUNK)
            if not chunk:
                break
            self.hash.update(chunk)
            self.offset += len(chunk)

    def reset(self) -> None:
        """Start again from nothing (the server sent the whole blob instead of the rest)."""
        with self._cond:  # followers learn of the restart before the file shrinks (see Following.readinto)
            self._restarts += 1  # what a follower read is gone
            self.hash = hashlib.sha256()
            self.offset = 0
            os.ftruncate(self.fd, 0)
            os.lseek(self.fd, 0, os.SEEK_SET)
            self._cond.notify_all()

    def write(self, chunk: bytes | memoryview) -> None:
        if self.size is not None and self.offset + len(chunk) > self.size:
            self.discard()
            raise InvalidError(
                f"blob {self.digest} is larger than the {self.size} bytes its manifest says",
                hint="the registry sent something else than the manifest describes; nothing was kept",
            )
        try:
            view = memoryview(chunk)
            while view:
                view = view[os.write(self.fd, view) :]
        except OSError as exc:
            self.discard()
            raise disk_full(exc, f"blob {self.digest}") or exc from None
        self.hash.update(chunk)
        with self._cond:
            self.offset += len(chunk)
            self._cond.notify_all()

    def follow(self) -> Following:
        """A reader of this blob as it downloads (see :class:`Following`)."""
        return Following(self)

    def _finish(self, end: str) -> None:
        with self._cond:
            self._end = self._end or end
            self._cond.notify_all()

    def commit(self) -> Path:
        """Verify the size and the sha256, then move the blob into place; a mismatch keeps nothing."""
        got = "sha256:" + self.hash.hexdigest()
        if (self.size is not None and self.offset != self.size) or got != self.digest:
            self.discard()
            what = f"{self.offset} bytes with digest {got}" if got != self.digest else f"{self.offset} bytes"
            raise InvalidError(
                f"blob {self.digest} failed verification: received {what}"
                + (f", expected {self.size} bytes" if self.size is not None else ""),
                hint="the registry or the archive sent corrupted data; nothing was kept (try again)",
            )
        try:
            os.fsync(self.fd)
            dest = self.blobs.path(self.digest)
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.rename(self.partial, dest)
        except OSError as exc:
            self.discard()
            raise disk_full(exc, f"blob {self.digest}") or exc from None
        self._finish("stored")
        self.close()
        return dest

    def discard(self) -> None:
        with contextlib.suppress(OSError):
            self.partial.unlink()
        self.close()

    def close(self) -> None:
        self._finish("lost")
        if self.fd >= 0:
            os.close(self.fd)  # releases the lock
            self.fd = -1


class Following(io.RawIOBase):
    """The blob a :class:`BlobWriter` is writing, read as it grows (from another thread than the
    writer's): a read waits for bytes, ends (returns 0) only once the blob is verified and stored,
    and raises :class:`AbandonedError` when the transfer fails or starts over. A read checks the
    restart count again after reading the file: a reset bumps it before it truncates, so bytes (or
    a short read) from a file that was reset under the read are never returned."""

    def __init__(self, writer: BlobWriter) -> None:
        self.writer = writer
        self.fd = os.open(writer.partial, os.O_RDONLY | os.O_CLOEXEC)
        self.pos = 0
        self.restarts = writer._restarts

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        if whence not in (os.SEEK_SET, os.SEEK_CUR):
            raise OSError(errno.ESPIPE, "a followed blob seeks from its start or its position only")
        self.pos = max(0, offset + (self.pos if whence == os.SEEK_CUR else 0))
        return self.pos

    def tell(self) -> int:
        return self.pos

    def readinto(self, buffer: Any) -> int:
        w = self.writer
        with w._cond:
            while True:
                if w._restarts != self.restarts:
                    raise AbandonedError(f"the download of {w.digest} started over")
                have = w.offset - self.pos
                if have > 0:
                    break
                if w._end == "stored":
                    return 0
                if w._end:
                    raise AbandonedError(f"the download of {w.digest} was not stored")
                w._cond.wait(5.0)
        view = memoryview(buffer).cast("B")
        n = os.preadv(self.fd, [view[: min(len(view), have)]], self.pos)  # outside the lock: the writer goes on
        with w._cond:  # a reset may have truncated (or rewritten) the file during that read: never an end
            if w._restarts != self.restarts or n == 0:
                raise AbandonedError(f"the download of {w.digest} started over")
        self.pos += n
        return n

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        super().close()


class BlobStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.dir = root / "blobs" / "sha256"
        self.tmp = root / "tmp"

    def path(self, digest: str) -> Path:
        return self.dir / check_digest(digest)[7:]

    def has(self, digest: str) -> bool:
        return self.path(digest).is_file()

    def writer(self, digest: str, size: int | None) -> BlobWriter:
        """The writer for one blob (raises :class:`BusyError` while another one holds it)."""
        return BlobWriter(self, check_digest(digest), size)

    def put_bytes(self, data: bytes) -> str:
        """Store a small blob (a manifest, a config) and return its digest."""
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        if not self.has(digest):
            w = self.writer(digest, len(data))
            try:
                w.write(data)
                w.commit()
            finally:
                w.close()
        return digest

    def adopt(self, src: Path, digest: str) -> None:
        """Move ``src``, a file on the store's filesystem whose sha256 the caller computed as it
        wrote it (``digest``), into place as that blob (an existing blob of that digest wins)."""
        dest = self.path(digest)
        if dest.is_file():
            src.unlink(missing_ok=True)
            return
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.rename(src, dest)

    def read(self, digest: str, limit: int) -> bytes:
        """A small blob's bytes (at most ``limit``)."""
        with self.path(digest).open("rb") as f:
            data = f.read(limit + 1)
        if len(data) > limit:
            raise InvalidError(f"blob {digest} is larger than {limit} bytes", hint="a manifest or config this large is refused")
        return data

    def digests(self) -> list[str]:
        try:
            return sorted("sha256:" + p.name for p in self.dir.iterdir() if len(p.name) == 64)
        except FileNotFoundError:
            return []

    def remove(self, digest: str) -> int:
        """Delete a blob; the bytes freed."""
        path = self.path(digest)
        try:
            size = path.stat().st_size
            path.unlink()
        except FileNotFoundError:
            return 0
        return size

    def stale_partials(self) -> int:
        """Remove partial files no writer holds; the bytes freed."""
        freed = 0
        try:
            entries = list(self.tmp.glob("*.partial"))
        except OSError:
            return 0
        for p in entries:
            try:
                fd = os.open(p, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                freed += os.fstat(fd).st_size
                p.unlink()
            except (BlockingIOError, OSError):
                continue
            finally:
                os.close(fd)
        return freed


def put_stream(blobs: BlobStore, read: Callable[[int], bytes], limit: int, what: str) -> tuple[str, int]:
    """Store content whose digest is not known beforehand (read until ``read`` returns b''); its digest and size.
    More than ``limit`` bytes is refused as they come."""
    blobs.tmp.mkdir(parents=True, exist_ok=True)
    tmp = blobs.tmp / f"stream-{secrets.token_hex(8)}"
    h = hashlib.sha256()
    size = 0
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            while chunk := read(CHUNK):
                size += len(chunk)
                if size > limit:
                    raise InvalidError(f"{what} is larger than {limit} bytes", hint="nothing was kept")
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view) :]
                h.update(chunk)
            os.fsync(fd)
        finally:
            os.close(fd)
        digest = "sha256:" + h.hexdigest()
        dest = blobs.path(digest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.rename(tmp, dest)
    except OSError as exc:
        raise disk_full(exc, what) or exc from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
    return digest, size
