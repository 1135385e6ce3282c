"""One root filesystem from unpacked layer directories, lowest first, applying OCI whiteouts.

Regular files are hardlinked from the layers (no data is copied: layers and root filesystems
live on one filesystem); directories, symlinks and their metadata (mode, owners when root,
mtime) are recreated. Whiteouts are applied exactly as the OCI image-spec says:

- ``.wh.NAME`` removes NAME (a file or a whole directory) coming from lower layers; an entry
  NAME in the same layer is kept (a whiteout only hides what is below it);
- ``.wh..wh..opq`` in a directory hides everything lower layers put in it, and keeps the
  entries of its own layer;
- markers never appear in the result, and a later layer may add a whited-out path again.

Layers are read and the result written only through directory fds opened without following
symlinks (``fdtree``): a symlink in a layer directory is copied as a symlink, never followed.
The root is built in a temporary directory beside ``dest`` and renamed at the end; on any error
nothing is left behind.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Sequence
from pathlib import Path

from hutch import errors

from .fdtree import DIR_FLAGS, Tree, remove_entry, remove_tree

__all__ = ["OPAQUE", "WHITEOUT_PREFIX", "flatten"]

WHITEOUT_PREFIX = ".wh."
OPAQUE = ".wh..wh..opq"
_MAX_DEPTH = 512  # unpack_layer refuses deeper names (max_depth); recursion stays far from Python's limit

_Meta = tuple[int, int, int, int]  # mode, uid, gid, mtime_ns


def flatten(layers: Sequence[Path], dest: Path) -> None:
    """Build the root filesystem ``dest`` (a new directory) from ``layers``, lowest first."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if os.path.lexists(dest) and (not dest.is_dir() or dest.is_symlink() or any(dest.iterdir())):
        raise errors.ConflictError(f"root filesystem {dest} already exists")
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.flatten-", dir=dest.parent))
    try:
        with Tree(tmp) as out:
            builder = _Builder(out, keep_owners=os.geteuid() == 0)
            for layer in layers:
                src = os.open(layer, DIR_FLAGS)
                try:
                    builder.layer = Path(layer)
                    builder.apply(src, ())
                finally:
                    os.close(src)
            builder.finish_dirs()
        try:
            os.rename(tmp, dest)
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                raise errors.ConflictError(f"root filesystem {dest} already exists") from None
            raise
    except OSError as exc:
        remove_tree(tmp)
        if exc.errno == errno.EXDEV:
            raise errors.UnavailableError(
                f"cannot hardlink layer files into {dest}: another filesystem",
                hint="keep layers and root filesystems under one state directory",
            ) from None
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise errors.UnavailableError(f"the disk is full while building {dest}", hint="free space and retry") from None
        raise
    except BaseException:
        remove_tree(tmp)
        raise


class _Builder:
    def __init__(self, out: Tree, *, keep_owners: bool) -> None:
        self.out = out
        self.keep_owners = keep_owners
        self.layer = Path()
        self.dirs: dict[tuple[str, ...], _Meta] = {}

    def apply(self, src: int, parts: tuple[str, ...]) -> None:
        """Apply the layer's directory ``src`` onto the result's ``parts`` (which exists)."""
        if len(parts) > _MAX_DEPTH:
            raise errors.InvalidError(f"layer {self.layer}: {'/'.join(parts)!r} is nested too deep")
        st = os.fstat(src)
        self.dirs[parts] = (stat.S_IMODE(st.st_mode) & 0o1777, st.st_uid, st.st_gid, st.st_mtime_ns)
        with os.scandir(src) as it:
            entries = sorted(it, key=lambda e: e.name)
        dst = self.out.walk(parts, create=True, mode=0o700)
        names = {e.name for e in entries}
        if OPAQUE in names:  # everything now in the result's directory came from lower layers
            for name in os.listdir(dst):
                remove_entry(dst, name)
        for e in entries:
            if e.name.startswith(WHITEOUT_PREFIX) and e.name != OPAQUE:
                hidden = e.name[len(WHITEOUT_PREFIX) :]
                if hidden not in ("", ".", "..") and not hidden.startswith(WHITEOUT_PREFIX):
                    remove_entry(dst, hidden)
        children: list[str] = []
        for e in entries:
            if e.name.startswith(WHITEOUT_PREFIX):
                continue
            est = e.stat(follow_symlinks=False)
            if stat.S_ISDIR(est.st_mode):
                self.make_dir(dst, e.name)
                children.append(e.name)
            elif stat.S_ISREG(est.st_mode):
                remove_entry(dst, e.name)
                self.link(src, dst, e.name, est)
            elif stat.S_ISLNK(est.st_mode):
                remove_entry(dst, e.name)
                os.symlink(os.readlink(e.name, dir_fd=src), e.name, dir_fd=dst)
                if self.keep_owners:
                    os.chown(e.name, est.st_uid, est.st_gid, dir_fd=dst, follow_symlinks=False)
                os.utime(e.name, ns=(est.st_mtime_ns, est.st_mtime_ns), dir_fd=dst, follow_symlinks=False)
            else:
                where = "/".join((*parts, e.name))
                raise errors.InvalidError(
                    f"layer {self.layer}: {where!r} is a device, fifo or socket, which an unpacked layer never holds",
                    hint="layers are unpacked with unpack_layer",
                )
        for name in children:  # after this directory's own entries: walking moves the result's fds
            child = os.open(name, DIR_FLAGS, dir_fd=src)
            try:
                self.apply(child, (*parts, name))
            finally:
                os.close(child)

    def make_dir(self, dst: int, name: str) -> None:
        try:
            st = os.stat(name, dir_fd=dst, follow_symlinks=False)
        except FileNotFoundError:
            os.mkdir(name, 0o700, dir_fd=dst)
            return
        if not stat.S_ISDIR(st.st_mode):  # a lower file or symlink replaced by a directory
            os.unlink(name, dir_fd=dst)
            os.mkdir(name, 0o700, dir_fd=dst)

    def link(self, src: int, dst: int, name: str, st: os.stat_result) -> None:
        try:
            os.link(name, name, src_dir_fd=src, dst_dir_fd=dst, follow_symlinks=False)
        except OSError as exc:
            if exc.errno != errno.EMLINK:  # the inode has the filesystem's most links: copy this one
                raise
            self.copy(src, dst, name, st)

    def copy(self, src: int, dst: int, name: str, st: os.stat_result) -> None:
        fin = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=src)
        try:
            fout = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dst)
            try:
                with open(fin, "rb", closefd=False) as r, open(fout, "wb", closefd=False) as w:
                    shutil.copyfileobj(r, w, 1 << 20)
                if self.keep_owners:
                    os.fchown(fout, st.st_uid, st.st_gid)
                os.fchmod(fout, stat.S_IMODE(st.st_mode))
                os.utime(fout, ns=(st.st_mtime_ns, st.st_mtime_ns))
            finally:
                os.close(fout)
        finally:
            os.close(fin)

    def finish_dirs(self) -> None:
        """Each directory's metadata from the highest layer holding it, deepest first."""
        for parts in sorted(self.dirs, key=len, reverse=True):
            try:
                fd = self.out.open_dir(parts)
            except OSError:  # whited out, or replaced by a file in a higher layer
                continue
            try:
                mode, uid, gid, mtime = self.dirs[parts]
                if self.keep_owners:
                    os.fchown(fd, uid, gid)
                os.fchmod(fd, mode)
                os.utime(fd, ns=(mtime, mtime))
            finally:
                os.close(fd)
