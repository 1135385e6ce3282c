"""Mapping an image's owners onto a sandbox's host uids (hutch as root), with the kernel's
new mount API.

As root every sandbox runs as host uids of its own (:mod:`hutch.providers.local.uids`),
while an image's files are stored once, owned by the uids its layers name (0 for most).
Nothing is chowned per sandbox: the image directory is cloned as a *detached, idmapped
mount* (``open_tree`` + ``mount_setattr(MOUNT_ATTR_IDMAP)``) whose owners appear shifted
by the sandbox's mapping (image uid 0 appears as the sandbox's first host uid), and that
mount is the read-only lower layer of a kernel overlayfs whose upper and work directories
are the sandbox's own (``fsopen("overlay")`` with the layers given as descriptors, Linux
6.13+). The overlay is attached in the sandbox's directory only until bwrap has bound it
as the sandbox's root, then detached (:func:`detach`): no mount outlives a create, and the
image directory itself is never mounted writable anywhere.

The mapping is the sandbox's own user namespace (:mod:`hutch.providers.local.userns`: its
range of host uids mapped to 0..65535 inside), the one bwrap then joins: a file the image
gives to uid k is uid k inside, and host uid ``first + k`` on the host.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import struct
from collections.abc import Iterator
from pathlib import Path

# syscall numbers shared by every architecture that has these calls (the unified table)
SYS_OPEN_TREE = 428
SYS_MOVE_MOUNT = 429
SYS_FSOPEN = 430
SYS_FSCONFIG = 431
SYS_FSMOUNT = 432
SYS_MOUNT_SETATTR = 442
AT_FDCWD = -100
AT_EMPTY_PATH = 0x1000
AT_RECURSIVE = 0x8000
OPEN_TREE_CLONE = 1
OPEN_TREE_CLOEXEC = os.O_CLOEXEC
MOUNT_ATTR_RDONLY = 0x1
MOUNT_ATTR_NOSUID = 0x2
MOUNT_ATTR_NODEV = 0x4
MOUNT_ATTR_IDMAP = 0x00100000
MOVE_MOUNT_F_EMPTY_PATH = 0x4
FSOPEN_CLOEXEC = 1
FSMOUNT_CLOEXEC = 1
FSCONFIG_SET_FLAG = 0
FSCONFIG_SET_STRING = 1
FSCONFIG_SET_FD = 5
FSCONFIG_CMD_CREATE = 6
MNT_DETACH = 2

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _call(what: str, number: int, *args: object) -> int:
    result = int(_libc.syscall(number, *args))
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def idmapped_tree(path: Path, userns_fd: int) -> int:
    """A detached, read-only clone of the tree at ``path``, its owners seen through ``userns_fd``."""
    fd = _call("open_tree", SYS_OPEN_TREE, AT_FDCWD, str(path).encode(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE)
    try:
        attr = ctypes.create_string_buffer(struct.pack("QQQQ", MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY, 0, 0, userns_fd))
        _call("mount_setattr", SYS_MOUNT_SETATTR, fd, b"", AT_EMPTY_PATH | AT_RECURSIVE, attr, 32)
    except BaseException:
        os.close(fd)
        raise
    return fd


def overlay(lower_fd: int, upper: Path, work: Path) -> int:
    """A detached overlayfs mount: ``lower_fd`` read-only under ``upper`` (``work`` its work dir).

    ``userxattr`` keeps overlay's own marks (opaque directories, redirects) in ``user.``
    extended attributes, as an unprivileged overlay does: an upper is the same whether
    hutch ran as root or as a user, and the sandbox's own uid can copy it (snapshots, fork).
    """
    opened: list[int] = []
    try:
        for d in (upper, work):
            opened.append(os.open(d, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC))
        fs = _call("fsopen", SYS_FSOPEN, b"overlay", FSOPEN_CLOEXEC)
        opened.append(fs)
        _call("fsconfig lowerdir+", SYS_FSCONFIG, fs, FSCONFIG_SET_FD, b"lowerdir+", None, lower_fd)
        _call("fsconfig upperdir", SYS_FSCONFIG, fs, FSCONFIG_SET_FD, b"upperdir", None, opened[0])
        _call("fsconfig workdir", SYS_FSCONFIG, fs, FSCONFIG_SET_FD, b"workdir", None, opened[1])
        _call("fsconfig userxattr", SYS_FSCONFIG, fs, FSCONFIG_SET_FLAG, b"userxattr", None, 0)
        _call("fsconfig create", SYS_FSCONFIG, fs, FSCONFIG_CMD_CREATE, None, None, 0)
        return _call("fsmount", SYS_FSMOUNT, fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NODEV)
    finally:
        for fd in opened:
            os.close(fd)


def attach(mount_fd: int, target: Path) -> None:
    _call("move_mount", SYS_MOVE_MOUNT, mount_fd, b"", AT_FDCWD, str(target).encode(), MOVE_MOUNT_F_EMPTY_PATH)


def detach(target: Path) -> bool:
    """Lazily unmount whatever is mounted on ``target``; False when nothing was."""
    result = _libc.umount2(str(target).encode(), MNT_DETACH)
    if result != 0:
        err = ctypes.get_errno()
        if err in (22, 2):  # EINVAL: not a mount point; ENOENT: gone
            return False
        raise OSError(err, f"umount {target}: {os.strerror(err)}")
    return True


@contextlib.contextmanager
def sandbox_root(image: Path, upper: Path, work: Path, target: Path, userns_fd: int) -> Iterator[Path]:
    """The sandbox's root (``image`` seen through the sandbox's user namespace ``userns_fd``,
    under ``upper``) attached at ``target`` for the block (bwrap binds it), detached after it."""
    lower = idmapped_tree(image, userns_fd)
    try:
        mnt = overlay(lower, upper, work)
    finally:
        os.close(lower)
    try:
        target.mkdir(mode=0o700, exist_ok=True)
        attach(mnt, target)
    finally:
        os.close(mnt)
    try:
        yield target
    finally:
        detach(target)
