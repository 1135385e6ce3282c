"""The policy of unpacking a layer, entry by entry (see ``unpack`` for the whole of it).

``LayerPolicy.filter`` has the signature of a tarfile extraction filter (PEP 706): it returns
the entry as it will be written (a cleaned name, cleared mode bits, owners or not), ``None``
for an entry left out (noted), or raises ``Refused``. It also keeps the counts and the
metadata of directories, applied last (deepest first) so that a read-only directory or a
directory's mtime is set after everything inside it is written.
"""

from __future__ import annotations

import copy
import math
import os
import tarfile
import time
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

from .decompress import LayerStream
from .fdtree import Refused, Tree

if TYPE_CHECKING:
    from pathlib import Path

GiB = 1 << 30
MiB = 1 << 20


@dataclass(frozen=True)
class UnpackLimits:
    """Bounds on one layer; every one is checked while streaming."""

    max_bytes: int = 32 * GiB  # apparent size of all files (the tar stream may be 1 GiB more)
    max_file_bytes: int = 16 * GiB  # apparent size of one file (sparse files count in full)
    max_entries: int = 1_000_000
    max_ratio: int = 200  # decompressed / compressed, enforced once past ratio_floor
    ratio_floor: int = 256 * MiB
    max_name_bytes: int = 4096
    max_depth: int = 256
    max_header_bytes: int = 1 * MiB  # PAX / GNU long-name headers of one entry, and global ones
    max_seconds: float = 3600.0


DEFAULT_LIMITS = UnpackLimits()


@dataclass(frozen=True)
class LayerStats:
    """What unpacking one layer did."""

    diff_id: str  # "sha256:<hex>" of the uncompressed tar (an OCI config's rootfs.diff_ids entry)
    compression: str  # "gzip", "zstd" or "none"
    compressed_bytes: int  # read from the blob
    uncompressed_bytes: int  # the tar stream
    entries: int
    files: int
    dirs: int
    symlinks: int
    hardlinks: int
    whiteouts: int
    bytes: int  # apparent size of the files written
    skipped: tuple[str, ...]  # notes on entries left out (devices, fifos), the first 20
    skipped_count: int
    stripped_modes: int  # entries whose setuid/setgid bits were cleared
    xattrs_dropped: int


_MAX_ID = 2**32 - 2  # (uid_t)-1 means "unchanged" to chown
_MAX_MTIME = 2**33  # seconds (year 2242): past what filesystems keep
_MAX_NOTES = 20
_XATTR_KEYS = ("SCHILY.xattr.", "LIBARCHIVE.xattr.")


def _cleaned(member: tarfile.TarInfo, name: str, mode: int) -> tarfile.TarInfo:
    """A shallow copy with the cleaned name and mode (``TarInfo.replace`` of 3.11.4+, which 3.11.2,
    Debian 12's Python, lacks: nothing here needs tarfile's own filters)."""
    out = copy.copy(member)
    out.name, out.mode = name, mode
    return out


def mtime_ns(m: tarfile.TarInfo) -> int:
    t = float(m.mtime)
    if not math.isfinite(t) or t < 0:
        return 0
    return int(min(t, _MAX_MTIME) * 1_000_000_000)


class LayerPolicy:
    tree: Tree

    def __init__(
        self, raw: IO[bytes], root: Path, *, media_type: str, limits: UnpackLimits, keep_owners: bool, label: str
    ) -> None:
        self.root = root
        self.limits = limits
        self.keep_owners = keep_owners
        self.label = label
        self.stream = LayerStream(
            raw,
            media_type=media_type,
            max_stream=limits.max_bytes + (1 << 30),
            max_ratio=limits.max_ratio,
            ratio_floor=limits.ratio_floor,
            deadline=time.monotonic() + limits.max_seconds,
        )
        self.entries = self.files = self.dirs = self.symlinks = self.hardlinks = self.whiteouts = 0
        self.written = self.stripped = self.xattrs_dropped = self.skipped_count = 0
        self.skipped: list[str] = []
        self.dir_meta: dict[tuple[str, ...], tarfile.TarInfo] = {}

    # -- names ---------------------------------------------------------------------------------

    def parts(self, name: str) -> tuple[str, ...]:
        """The entry's path components inside the layer; a leading '/' is dropped, '..' refused."""
        if len(os.fsencode(name)) > self.limits.max_name_bytes:
            raise Refused(f"its name is longer than max_name_bytes ({self.limits.max_name_bytes})")
        if "\0" in name:
            raise Refused("its name contains a NUL byte")
        parts = tuple(p for p in name.split("/") if p not in ("", "."))
        if ".." in parts:
            raise Refused("its name contains '..'")
        if len(parts) > self.limits.max_depth:
            raise Refused(f"its name is deeper than max_depth ({self.limits.max_depth})")
        if any(len(os.fsencode(p)) > 255 for p in parts):
            raise Refused("a component of its name is longer than 255 bytes")
        return parts

    # -- the filter ------------------------------------------------------------------------------

    def count_entry(self, m: tarfile.TarInfo) -> None:
        self.entries += 1
        if self.entries > self.limits.max_entries:
            raise Refused(f"the layer has more than max_entries ({self.limits.max_entries}) entries")
        self.xattrs_dropped += sum(1 for key in m.pax_headers if key.startswith(_XATTR_KEYS))

    def filter(self, member: tarfile.TarInfo, dest_path: str) -> tarfile.TarInfo | None:
        """tarfile's filter protocol: the entry as written, None when left out, Refused when hostile."""
        del dest_path  # every write is relative to the layer's root fd
        parts = self.parts(member.name)
        base = parts[-1] if parts else ""
        if any(p.startswith(".wh..wh.") for p in parts[:-1]) or (base.startswith(".wh..wh.") and base != ".wh..wh..opq"):
            self.skip(member, "AUFS metadata")
            return None
        if any(p.startswith(".wh.") for p in parts[:-1]):
            raise Refused("a whiteout marker cannot hold entries")
        if base.startswith(".wh."):  # a whiteout marker: written as an empty file, whatever its type
            self.check_owners(member)
            return _cleaned(member, "/".join(parts), 0o644)
        if member.ischr() or member.isblk() or member.isfifo():
            self.skip(member, "a fifo" if member.isfifo() else "a device node")
            return None
        if not (member.isreg() or member.isdir() or member.issym() or member.islnk()):
            raise Refused(f"its type {member.type.decode('ascii', 'replace')!r} is not one a layer may hold")
        if not parts and not member.isdir():
            raise Refused("it names the layer's root but is not a directory")
        self.check_owners(member)
        return _cleaned(member, "/".join(parts), self.clean_mode(member))

    def check_owners(self, m: tarfile.TarInfo) -> None:
        """Owners are set from the numeric uid/gid only (never names looked up on the host), and only
        when ``keep_owners``; otherwise the caller owns everything."""
        if self.keep_owners and not (0 <= m.uid <= _MAX_ID and 0 <= m.gid <= _MAX_ID):
            raise Refused(f"its owner {m.uid}:{m.gid} is out of range")

    def clean_mode(self, m: tarfile.TarInfo) -> int:
        mode = m.mode & 0o7777
        if mode & 0o6000:
            self.stripped += 1
        clean = mode & (0o1777 if m.isdir() else 0o777)  # setuid/setgid never; sticky on dirs (/tmp)
        if m.isdir() and not self.keep_owners:
            clean |= 0o700  # the user's own tree stays removable (inside, that user is root anyway)
        return clean

    def skip(self, m: tarfile.TarInfo, what: str) -> None:
        self.skipped_count += 1
        if len(self.skipped) < _MAX_NOTES:
            self.skipped.append(f"{m.name}: {what}, skipped")

    def check_globals(self, tf: tarfile.TarFile) -> None:
        if tf.pax_headers and sum(len(k) + len(v) for k, v in tf.pax_headers.items()) > self.limits.max_header_bytes:
            raise Refused("its global PAX headers are larger than allowed (max_header_bytes)")

    # -- metadata ------------------------------------------------------------------------------

    def set_meta_fd(self, fd: int, m: tarfile.TarInfo) -> None:
        if self.keep_owners:
            os.fchown(fd, m.uid, m.gid)
        os.fchmod(fd, m.mode)
        t = mtime_ns(m)
        os.utime(fd, ns=(t, t))

    def set_meta_link(self, parent: int, name: str, m: tarfile.TarInfo) -> None:
        if self.keep_owners:
            os.chown(name, m.uid, m.gid, dir_fd=parent, follow_symlinks=False)
        t = mtime_ns(m)
        os.utime(name, ns=(t, t), dir_fd=parent, follow_symlinks=False)

    def record_dir(self, parts: tuple[str, ...], m: tarfile.TarInfo) -> None:
        self.dir_meta[parts] = m

    def finish_dirs(self) -> None:
        """Directories' owners, modes and mtimes, deepest first; the root's too (0755 by default)."""
        root = self.dir_meta.pop((), None)
        for parts in sorted(self.dir_meta, key=len, reverse=True):
            try:
                fd = self.tree.open_dir(parts)
            except OSError:  # replaced by a later entry (a file, a symlink): not a directory any more
                continue
            try:
                self.set_meta_fd(fd, self.dir_meta[parts])
            finally:
                os.close(fd)
        if root is not None:
            self.set_meta_fd(self.tree.root_fd, root)
        else:
            os.fchmod(self.tree.root_fd, 0o755)

    def stats(self) -> LayerStats:
        return LayerStats(
            diff_id=f"sha256:{self.stream.digest.hexdigest()}",
            compression=self.stream.compression,
            compressed_bytes=self.stream.source.count,
            uncompressed_bytes=self.stream.pos,
            entries=self.entries,
            files=self.files,
            dirs=self.dirs,
            symlinks=self.symlinks,
            hardlinks=self.hardlinks,
            whiteouts=self.whiteouts,
            bytes=self.written,
            skipped=tuple(self.skipped),
            skipped_count=self.skipped_count,
            stripped_modes=self.stripped,
            xattrs_dropped=self.xattrs_dropped,
        )
