"""A sandbox's writable root (its overlay upper) as an OCI image layer: the tar ``hutch image
commit`` adds on top of the sandbox's image.

- an overlay whiteout (a 0/0 character device, or an empty file marked ``overlay.whiteout``)
  becomes the OCI whiteout ``DIR/.wh.NAME``;
- a directory overlay marked opaque (``overlay.opaque``) becomes the directory followed by
  ``DIR/.wh..wh..opq``: nothing of the layers below shows in it;
- owners are written as the image sees them: a host uid of the sandbox's range (or the
  user's own uid and subordinate range, hutch as a user) is mapped back to the uid inside;
  an owner outside the mapping becomes 65534 (nobody);
- hard links between files of the upper stay hard links; device nodes, fifos and sockets
  are left out (with a note); extended attributes are not carried (overlay's own marks
  never are); the mount points hutch makes (``/workspace``, ``/.hutch``, ``/proc``,
  ``/dev``, ``/sys``) are left out with whatever is under them.

The tar is uncompressed and written once, its sha256 (the layer's ``diff_id``) computed
while it is written. Files are opened through the walk's directory descriptors with
``O_NOFOLLOW``, so nothing the sandbox planted leads the daemon outside the upper; the
sandbox is paused meanwhile (the Service does it), and a file that changes size anyway is
cut or padded to the size its header says, with a note.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from hutch.providers.local.changes import MOUNT_POINTS, Walk, is_opaque, is_whiteout

NOBODY = 65534
CHUNK = 1 << 20
MAX_NOTES = 5
IdMap = Callable[[int], int]


def inverse(lines: tuple[tuple[int, int, int], ...]) -> IdMap:
    """Host id -> inside id under a ``(inside, outside, count)`` mapping; NOBODY if unmapped."""

    def back(host: int) -> int:
        for inside, outside, count in lines:
            if outside <= host < outside + count:
                return inside + (host - outside)
        return NOBODY

    return back


class _Hashing:
    """A binary sink that hashes and counts what goes through it."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.size += len(data)
        return self.out.write(data)

    def flush(self) -> None:
        self.out.flush()


class _Exact:
    """A file's bytes cut or zero-padded to ``size`` (a file that changed under a paused sandbox)."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd, self.left, self.short = fd, size, False

    def read(self, n: int = -1) -> bytes:
        want = self.left if n < 0 else min(n, self.left)
        if want <= 0:
            return b""
        data = os.read(self.fd, min(want, CHUNK))
        if not data:
            self.short = True
            data = bytes(min(want, CHUNK))
        self.left -= len(data)
        return data


def export(upper: Path, dest: Path, uid_of: IdMap, gid_of: IdMap) -> dict[str, Any]:
    """Write ``upper`` as a layer tar to ``dest``: ``{"diff_id", "size", "entries", "notes"}``."""
    walk = Walk()
    notes: list[str] = []
    links: dict[tuple[int, int], str] = {}
    entries = 0

    def note(text: str) -> None:
        if len(notes) < MAX_NOTES:
            notes.append(text)

    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as raw:
        sink = _Hashing(raw)
        with tarfile.open(fileobj=sink, mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
            for e in walk.entries(upper):
                if e.rel.split("/", 1)[0] in MOUNT_POINTS:
                    continue
                st = e.st
                parent, _, name = e.rel.rpartition("/")
                base = parent + "/" if parent else ""
                info = tarfile.TarInfo(e.rel)
                info.uid, info.gid = uid_of(st.st_uid), gid_of(st.st_gid)
                info.mode = stat.S_IMODE(st.st_mode)
                info.mtime = int(st.st_mtime)
                if is_whiteout(st, e.via):
                    wh = tarfile.TarInfo(base + ".wh." + name)
                    wh.mtime, wh.mode = info.mtime, 0o644
                    tar.addfile(wh)
                elif stat.S_ISDIR(st.st_mode):
                    info.type = tarfile.DIRTYPE
                    tar.addfile(info)
                    if is_opaque(e.via):
                        opq = tarfile.TarInfo(e.rel + "/.wh..wh..opq")
                        opq.mtime, opq.mode = info.mtime, 0o644
                        tar.addfile(opq)
                elif stat.S_ISLNK(st.st_mode):
                    info.type = tarfile.SYMTYPE
                    info.linkname = os.readlink(e.via)
                    tar.addfile(info)
                elif stat.S_ISREG(st.st_mode):
                    key = (st.st_dev, st.st_ino)
                    if st.st_nlink > 1 and key in links:
                        info.type, info.linkname = tarfile.LNKTYPE, links[key]
                        tar.addfile(info)
                    else:
                        links[key] = e.rel
                        _add_file(tar, info, e.via, st, note)
                else:
                    note(f"/{e.rel}: a {_kind(st.st_mode)} is not carried into a layer")
                    continue
                entries += 1
        sink.flush()
    notes += walk.notes
    if walk.truncated:
        raise OSError(27, "the writable root has too many entries to commit")  # EFBIG
    return {"diff_id": "sha256:" + sink.sha.hexdigest(), "size": sink.size, "entries": entries, "notes": notes}


def _add_file(tar: tarfile.TarFile, info: tarfile.TarInfo, via: str, st: os.stat_result, note: Callable[[str], None]) -> None:
    fd = os.open(via, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        now = os.fstat(fd)
        if now.st_ino != st.st_ino or not stat.S_ISREG(now.st_mode):
            raise OSError(16, f"/{info.name} changed while it was committed")  # EBUSY
        info.size = now.st_size
        body = _Exact(fd, info.size)
        tar.addfile(info, body)
        if body.short:
            note(f"/{info.name} shrank while it was read: padded with zeros")
    finally:
        os.close(fd)


def _kind(mode: int) -> str:
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device node"
    if stat.S_ISFIFO(mode):
        return "fifo"
    return "socket"
