"""Unpacking one image layer: layers are hostile input.

Python's ``tarfile`` parses the layer (streaming mode, never seeking, never loading a layer into
memory); the writing is ours. Every entry passes a filter with the signature of tarfile's
extraction filters (PEP 706) whose policy fits a root filesystem, and is then written only
through directory fds opened without following symlinks (see ``fdtree``). tarfile's own
``extract``/``extractall`` and its stock filters are never used: they do not fit images (the
``data`` filter refuses absolute symlinks and drops ``/tmp``'s 1777, ``tar`` drops group write),
they exist only from 3.11.4 (Debian 12's Python is 3.11.2), and before 3.11.13 their path checks
could be bypassed (CVE-2025-4517, CVE-2025-4330); writing through no-follow fds rules such
escapes out by construction, on any Python 3.11+.

The policy, entry by entry (docs/images.md, "Security of unpacking"):

- names: a leading ``/`` is dropped (``/etc/x`` is the image's ``/etc/x``, as tar does); a ``..``
  component, a name over ``max_name_bytes``, deeper than ``max_depth`` or with a component
  over 255 bytes is refused;
- a path through a symlink (a parent planted by an earlier entry) is refused, never followed;
- symlinks are kept whatever their target: they are never followed on the host, and inside a
  sandbox they resolve within the image's root;
- hardlinks must name a regular file this layer already holds (checked without following symlinks);
- device nodes and fifos are skipped and recorded in ``LayerStats.skipped`` (a sandbox gets its
  own ``/dev``); unknown entry types are refused;
- setuid and setgid bits are cleared everywhere; the sticky bit is kept on directories (``/tmp``
  is 1777); as a normal user every directory keeps its owner's rwx bits (the tree must stay
  removable; inside a sandbox that user is root, for whom those bits change nothing);
- owners: the tar's numeric uid/gid when ``keep_owners`` (never names resolved on the host),
  else the caller's; mtimes kept; extended attributes are never applied (``security.capability``
  included) and are counted in ``LayerStats.xattrs_dropped``;
- OCI whiteouts (``.wh.NAME``, ``.wh..wh..opq``) are kept as empty marker files for ``flatten``;
  other ``.wh..wh.`` names (AUFS metadata) are skipped;
- bounds: entries, bytes written (apparent sizes, so a huge sparse file is refused before a
  byte is written), the decompressed stream and its ratio to the blob (checked while reading),
  header sizes (PAX and GNU long names), time.

Any refusal raises ``errors.InvalidError`` naming the layer and the entry; nothing is left
behind (the layer is built in a temporary directory beside ``dest`` and renamed at the end).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tarfile
import tempfile
from pathlib import Path
from typing import IO

from hutch import errors

from .fdtree import Refused, Tree, remove_entry, remove_tree
from .layerpolicy import DEFAULT_LIMITS, LayerPolicy, LayerStats, UnpackLimits

__all__ = ["DEFAULT_LIMITS", "TEMP_MARKER", "LayerStats", "UnpackLimits", "remove_tree", "unpack_layer"]

TEMP_MARKER = ".unpack-"  # temporary directories are ``.<dest name>.unpack-<random>`` beside dest
_CHUNK = 1 << 20
_BLOCK = 64 * 1024
_ZEROS = bytes(_BLOCK)
_BUFSIZE = 256 * 1024  # tarfile's stream reads this much at a time (default 10 KiB: slow)
_READ_AHEAD = 2 * _BUFSIZE  # how far tarfile's stream may read ahead of the header it parses


def unpack_layer(
    blob: Path,
    dest: Path,
    *,
    media_type: str,
    source: IO[bytes] | None = None,
    limits: UnpackLimits = DEFAULT_LIMITS,
    keep_owners: bool,
    label: str | None = None,
) -> LayerStats:
    """Extract the layer ``blob`` into the new directory ``dest`` (see the module's policy).

    ``label`` names the layer in errors (default: the blob's file name, its digest in the store).
    ``source``: the blob's bytes from there instead of the file ``blob`` (a download being followed).
    Raises InvalidError (hostile or corrupt layer), TimeoutError_ (``max_seconds``),
    UnavailableError (disk full, I/O), ConflictError (``dest`` exists and is not empty).
    """
    blob, dest = Path(blob), Path(dest)
    label = label or blob.name
    dest.parent.mkdir(parents=True, exist_ok=True)
    if os.path.lexists(dest) and (not dest.is_dir() or dest.is_symlink() or any(dest.iterdir())):
        raise errors.ConflictError(f"layer directory {dest} already exists")
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}{TEMP_MARKER}", dir=dest.parent))
    try:
        with open(blob, "rb") if source is None else contextlib.nullcontext(source) as raw:
            stats = _Unpacker(raw, tmp, media_type=media_type, limits=limits, keep_owners=keep_owners, label=label).run()
        try:
            os.rename(tmp, dest)
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                raise errors.ConflictError(f"layer directory {dest} already exists") from None
            raise
    except BaseException:
        remove_tree(tmp)
        raise
    return stats


class _Unpacker(LayerPolicy):
    def run(self) -> LayerStats:
        stream = self.stream
        current = "(the first entry)"
        try:
            with Tree(self.root) as tree:
                self.tree = tree
                stream.limit = self.limits.max_header_bytes + _READ_AHEAD
                tf = tarfile.open(fileobj=stream, mode="r|", bufsize=_BUFSIZE, encoding="utf-8", errors="surrogateescape")  # noqa: SIM115
                while True:
                    stream.limit = tf.offset + self.limits.max_header_bytes + _READ_AHEAD
                    member = tf.next()
                    tf.members.clear()  # type: ignore[attr-defined]  # stream mode keeps every member otherwise
                    if member is None:
                        break
                    current = member.name
                    stream.limit = None
                    self.entry(tf, member)
                    self.check_globals(tf)
                current = "(after the last entry)"
                stream.drain()
                self.finish_dirs()
        except Refused as exc:
            raise errors.InvalidError(
                f"layer {self.label}: entry {current!r} refused: {exc}",
                hint="the layer is corrupt or hostile; nothing was unpacked",
            ) from None
        except tarfile.TarError as exc:
            raise errors.InvalidError(
                f"layer {self.label}: not a valid tar at entry {current!r} ({exc})",
                hint="the layer is corrupt or truncated; nothing was unpacked",
            ) from None
        except TimeoutError:
            raise errors.TimeoutError_(
                f"layer {self.label}: unpacking took longer than {self.limits.max_seconds:g} s (at entry {current!r})",
                hint="a slow disk or a layer of very many entries; raise max_seconds if the layer is trusted",
            ) from None
        except OSError as exc:
            raise self.os_error(exc, current) from None
        return self.stats()

    def os_error(self, exc: OSError, current: str) -> errors.HutchError:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return errors.UnavailableError(
                f"layer {self.label}: the disk is full (at entry {current!r})", hint="free space and pull again"
            )
        if exc.errno == errno.EPERM and self.keep_owners:
            return errors.UnavailableError(
                f"layer {self.label}: cannot set the owner of entry {current!r} ({exc.strerror})",
                hint="keeping a layer's owners needs root",
            )
        if exc.errno in (errno.EIO, errno.EROFS, errno.ENOMEM, errno.EMFILE, errno.ENFILE):
            return errors.UnavailableError(f"layer {self.label}: {exc.strerror} while writing entry {current!r}")
        return errors.InvalidError(
            f"layer {self.label}: entry {current!r} cannot be written ({exc.strerror or exc})",
            hint="the layer is corrupt or hostile; nothing was unpacked",
        )

    def entry(self, tf: tarfile.TarFile, member: tarfile.TarInfo) -> None:
        self.count_entry(member)
        m = self.filter(member, str(self.root))
        if m is None:
            return
        parts = tuple(m.name.split("/")) if m.name else ()
        if not parts:
            self.record_dir((), m)
        elif parts[-1].startswith(".wh."):
            self.whiteout(m, parts)
        elif m.isreg():
            self.file(tf, member, m, parts)
        elif m.isdir():
            self.directory(m, parts)
        elif m.issym():
            self.symlink(m, parts)
        else:
            self.hardlink(m, parts)

    def place(self, parts: tuple[str, ...]) -> int:
        """The fd of the entry's parent, with whatever the name held before removed (tar: last wins)."""
        fd = self.tree.walk(parts[:-1], create=True)
        remove_entry(fd, parts[-1])
        return fd

    def file(self, tf: tarfile.TarFile, member: tarfile.TarInfo, m: tarfile.TarInfo, parts: tuple[str, ...]) -> None:
        size = m.size
        if size > self.limits.max_file_bytes:
            raise Refused(f"its size {size} is over max_file_bytes ({self.limits.max_file_bytes})")
        if self.written + size > self.limits.max_bytes:
            raise Refused(f"the layer's files would pass max_bytes ({self.limits.max_bytes})")
        parent = self.place(parts)
        src = tf.extractfile(member)  # the member as parsed: tarfile knows its data by it
        if src is None:  # pragma: no cover - regular members always have data
            raise Refused("tarfile gave no data for a regular file")
        fd = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=parent)
        try:
            done = 0
            while done < size:
                chunk = src.read(min(_CHUNK, size - done))
                if not chunk:
                    raise Refused("the layer ends inside its data (truncated)")
                _write_sparse(fd, chunk)
                done += len(chunk)
                self.stream.check(self.written + done)
            os.ftruncate(fd, size)
            self.written += size
            self.set_meta_fd(fd, m)
        finally:
            os.close(fd)
        self.files += 1

    def whiteout(self, m: tarfile.TarInfo, parts: tuple[str, ...]) -> None:
        name = parts[-1]
        if name != ".wh..wh..opq" and name[4:] in ("", ".", ".."):
            raise Refused("a whiteout must name an entry")
        parent = self.place(parts)
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=parent)
        try:
            self.set_meta_fd(fd, m)
        finally:
            os.close(fd)
        self.whiteouts += 1

    def directory(self, m: tarfile.TarInfo, parts: tuple[str, ...]) -> None:
        parent = self.tree.walk(parts[:-1], create=True)
        try:
            os.close(os.open(parts[-1], os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent))
        except OSError:
            remove_entry(parent, parts[-1])
            os.mkdir(parts[-1], 0o700, dir_fd=parent)
        self.record_dir(parts, m)
        self.dirs += 1

    def symlink(self, m: tarfile.TarInfo, parts: tuple[str, ...]) -> None:
        target = m.linkname
        if not target or "\0" in target or len(os.fsencode(target)) >= 4096:
            raise Refused("its symlink target is empty or too long")
        parent = self.place(parts)
        os.symlink(target, parts[-1], dir_fd=parent)
        self.set_meta_link(parent, parts[-1], m)
        self.symlinks += 1

    def hardlink(self, m: tarfile.TarInfo, parts: tuple[str, ...]) -> None:
        try:
            target = self.parts(m.linkname)
        except Refused as exc:
            raise Refused(f"its hardlink target {m.linkname!r} is refused: {exc}") from None
        if not target or target == parts:
            raise Refused("its hardlink names the layer's root or itself")
        try:
            src_dir = self.tree.open_dir(target[:-1])
        except OSError:
            raise Refused(f"its hardlink target {m.linkname!r} is not a file of this layer") from None
        try:
            st = os.stat(target[-1], dir_fd=src_dir, follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode):
                raise Refused(f"its hardlink target {m.linkname!r} is not a regular file of this layer")
            parent = self.place(parts)
            os.link(target[-1], parts[-1], src_dir_fd=src_dir, dst_dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            raise Refused(f"its hardlink target {m.linkname!r} is not a file of this layer") from None
        finally:
            os.close(src_dir)
        self.hardlinks += 1


def _write_sparse(fd: int, data: bytes) -> None:
    """Write ``data`` at the file's offset, seeking over blocks of zeros (holes take no disk).
    Runs of blocks that are not all zeros go out in one ``write`` each."""
    view = memoryview(data)
    start = 0  # the first block not yet written
    for pos in range(0, len(data), _BLOCK):
        block = data[pos : pos + _BLOCK]
        if block != _ZEROS[: len(block)]:  # bytes != bytes: a memcmp
            continue
        _write_all(fd, view[start:pos])
        os.lseek(fd, len(block), os.SEEK_CUR)
        start = pos + len(block)
    _write_all(fd, view[start:])


def _write_all(fd: int, view: memoryview) -> None:
    while view:
        view = view[os.write(fd, view) :]
