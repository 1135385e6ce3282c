"""A directory tree written only through directory fds opened without following symlinks.

Layer unpacking and flattening never resolve a path through the kernel's path walk: every
component is opened with ``O_NOFOLLOW | O_DIRECTORY`` relative to its parent's fd, so a
symlink (planted by an earlier entry, or anywhere in a layer directory) is never followed and
nothing can be written outside the tree's root, whatever the entries say.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from pathlib import Path

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Refused(Exception):  # noqa: N818 - not an error of its own: always turned into InvalidError with the entry
    """An entry that would leave the tree, or that the tree cannot hold; the message says why."""


def open_child_dir(parent_fd: int, name: str, *, create: bool, mode: int = 0o755) -> int:
    """The fd of directory ``name`` inside ``parent_fd``, never following a symlink (created if asked)."""
    try:
        return os.open(name, DIR_FLAGS, dir_fd=parent_fd)
    except FileNotFoundError:
        if not create:
            raise
    try:
        os.mkdir(name, 0o700, dir_fd=parent_fd)
    except FileExistsError:
        return os.open(name, DIR_FLAGS, dir_fd=parent_fd)
    fd = os.open(name, DIR_FLAGS, dir_fd=parent_fd)
    os.fchmod(fd, mode)  # explicit: the daemon's umask (077) must not decide an image's modes
    return fd


def describe(parent_fd: int, name: str) -> str:
    """What is at ``name`` (for messages): a symlink, a file, nothing..."""
    try:
        st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except OSError:
        return "missing"
    if stat.S_ISLNK(st.st_mode):
        return "a symlink"
    if stat.S_ISDIR(st.st_mode):
        return "a directory"
    return "not a directory"


class Tree:
    """A root directory fd plus a cached chain of open directory fds (the last directory walked).

    ``walk(parts)`` returns the fd of the directory ``parts`` (relative to the root), reusing the
    fds of the common prefix with the previous walk: entries of a tar or a directory scan come
    grouped by directory, so most walks open nothing. Every removal happens inside the directory
    walked last, so the chain never holds a removed directory.
    """

    def __init__(self, root: Path) -> None:
        self.root_fd = os.open(root, DIR_FLAGS)
        self._names: list[str] = []
        self._fds: list[int] = []

    def close(self) -> None:
        self._truncate(0)
        os.close(self.root_fd)

    def __enter__(self) -> Tree:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _truncate(self, keep: int) -> None:
        while len(self._fds) > keep:
            os.close(self._fds.pop())
            self._names.pop()

    def walk(self, parts: tuple[str, ...] | list[str], *, create: bool, mode: int = 0o755) -> int:
        """The fd of directory ``parts``; valid until the next ``walk``. Raises Refused when a
        component is a symlink or not a directory, FileNotFoundError when absent and not created."""
        common = 0
        for have, want in zip(self._names, parts, strict=False):
            if have != want:
                break
            common += 1
        self._truncate(common)
        for name in parts[common:]:
            parent = self._fds[-1] if self._fds else self.root_fd
            try:
                fd = open_child_dir(parent, name, create=create, mode=mode)
            except (NotADirectoryError, OSError) as exc:
                if isinstance(exc, FileNotFoundError):
                    raise
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    where = "/".join([*self._names, name])
                    raise Refused(f"its parent {where!r} is {describe(parent, name)}") from None
                raise
            self._names.append(name)
            self._fds.append(fd)
        return self._fds[-1] if self._fds else self.root_fd

    def open_dir(self, parts: tuple[str, ...] | list[str]) -> int:
        """A new fd (the caller closes it) of directory ``parts``, never following a symlink."""
        fd = os.dup(self.root_fd)
        try:
            for name in parts:
                nxt = os.open(name, DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = nxt
        except BaseException:
            os.close(fd)
            raise
        return fd


def remove_entry(dir_fd: int, name: str) -> bool:
    """Remove ``name`` (a whole directory tree, or anything else) inside ``dir_fd``; False when absent."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(name, dir_fd=dir_fd)  # fd-based on Linux: never follows a symlink
    else:
        os.unlink(name, dir_fd=dir_fd)
    return True


def remove_tree(path: Path) -> None:
    """Remove a layer or root filesystem directory (or a temporary one) entirely; absent is fine.

    As root every tree is removable; as a normal user the trees are the user's own and every
    directory keeps its owner's rwx bits (see unpack), so ``shutil.rmtree`` always succeeds.
    """
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(path)
