"""Carrying an image sandbox's writable root: the tar of its upper (a snapshot), and a new
sandbox's upper filled before its root is mounted (a fork, a restore).

The upper is the sandbox's own files, written by a workload: it is only ever read and
written by GNU tar inside a *jail*, a bwrap in the sandbox's own user namespace (its uid
range, root inside with the capabilities root has over what the namespace owns), with the
upper bound at ``/upper`` and nothing else writable. Owners travel as the numbers they are
inside (``--numeric-owner``), so a file of uid 1000 in one sandbox is uid 1000 in its fork,
on whatever host uids that fork's range has; overlayfs's whiteouts (0/0 character devices,
which a user namespace may make) and its ``user.overlay.*`` marks travel with them.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from hutch.providers.local import bwrap as bw
from hutch.providers.local import seccomp, userns

TAR = "/usr/bin/tar"
CREATE = [
    TAR,
    "--create",
    "--file=-",
    "--format=posix",
    "--pax-option=delete=atime,delete=ctime",
    "--xattrs",
    "--xattrs-include=*",
    "--numeric-owner",
    "--one-file-system",
    "--directory=/upper",
    ".",
]
EXTRACT = [
    TAR,
    "--extract",
    "--file=-",
    "--xattrs",
    "--xattrs-include=user.*",
    "--numeric-owner",
    "--same-owner",
    "--preserve-permissions",
    "--directory=/upper",
]


def mapping(root: bool, first_uid: int) -> userns.Mapping:
    """The sandbox's own mapping (as root its range from ``first_uid``; as a user the user's)."""
    return userns.root_mapping(first_uid) if root else userns.user_mapping()


def jail_args(bwrap: str, ns_fd: int, upper_fd: int, fds: list[int]) -> list[str]:
    """A tar jail over an upper, in the sandbox's namespace ``ns_fd`` (descriptors appended to ``fds``)."""
    plan = userns.Plan("root", 0, 0, userns.root_mapping(1))
    args = [bwrap, *userns.bwrap_args(ns_fd, plan), "--ro-bind", "/usr", "/usr", *bw.root_links()]
    args += [*seccomp.bwrap_args(fds)[0], "--dev", "/dev", "--bind-fd", str(upper_fd), "/upper", "--chdir", "/upper", "--"]
    return args


def purge(bwrap: str, path: Path) -> None:
    """Empty ``path`` in a jail of this user's own mapping. A normal user's sandbox with a range of
    /etc/subuid leaves files of those uids wherever root inside chowned (its upper, its workspace),
    which the user cannot remove from the host; root in a namespace of that mapping can."""
    ns = userns.create(userns.user_mapping(), None)
    fd = -1
    try:
        fd = open_upper(path)
        with seccomp.fds() as filters:
            args = [*jail_args(bwrap, ns, fd, filters), "/usr/bin/find", "/upper", "-mindepth", "1", "-delete"]
            quiet = subprocess.DEVNULL
            subprocess.run(args, pass_fds=[ns, fd, *filters], stdin=quiet, stdout=quiet, stderr=quiet, timeout=600, check=False)
    finally:
        os.close(ns)
        if fd >= 0:
            os.close(fd)


def open_upper(path: Path) -> int:
    return os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
