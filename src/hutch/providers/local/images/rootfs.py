"""A sandbox's writable root over an image: its directories, how bwrap gets the root, and
what differs from a host-``/usr`` sandbox (identity, HOME and /tmp on disk, the agent's
runtime).

Layout in the sandbox's directory (``sandboxes/ID``, removed on destroy)::

    root/upper   the sandbox's writes (an overlayfs upper: whiteouts, user.overlay.* marks)
    root/work    overlayfs's work directory
    root/mnt     where the root is attached while bwrap binds it (hutch as root), else empty

As root (:mod:`.idmap`): the daemon mounts the kernel's overlayfs over an idmapped clone
of the image (its owners shifted onto the sandbox's host uids), attaches it at
``root/mnt`` for bwrap's ``--bind``, and detaches it once the sandbox runs. As a user: the
user owns the image's files, and bwrap mounts the overlay itself inside the sandbox's user
namespace (``--overlay-src``/``--overlay``), the user mapped to root.

Inside, the workload is uid 0 of its user namespace (no capabilities, seccomp on), its
HOME ``/root`` and its ``/tmp`` on the writable root, on disk.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hutch.providers.local.images import idmap
from hutch.providers.local.images.runtime import Runtime
from hutch.providers.local.images.types import ResolvedImage

if TYPE_CHECKING:
    from hutch.providers.local.userns import Plan

INSIDE_UID = 0
HOME = "/root"


@dataclass(frozen=True)
class ImageRoot:
    """One sandbox's root over ``image``: its directories under ``dir``."""

    image: ResolvedImage
    dir: Path  # sandboxes/ID/root
    runtime: Runtime

    @property
    def upper(self) -> Path:
        return self.dir / "upper"

    @property
    def work(self) -> Path:
        return self.dir / "work"

    @property
    def mnt(self) -> Path:
        return self.dir / "mnt"


def make_dirs(root: ImageRoot, uid: int | None) -> None:
    """The upper and work directories, the sandbox's own (``uid``'s as root).

    Directories the sandbox needs that the image lacks are made in the upper first
    (``/tmp`` 1777, ``/root`` 0700): bwrap would otherwise make them 0755.
    """
    root.dir.mkdir(mode=0o711, exist_ok=True)
    os.chmod(root.dir, 0o711)
    for d in (root.upper, root.work, root.mnt):
        d.mkdir(mode=0o755, exist_ok=True)
        os.chmod(d, 0o755)  # the upper's mode is the root's: every user inside passes it (the daemon's umask is 077)
    made = [root.upper, root.work]
    for name, mode in (("tmp", 0o1777), ("root", 0o700)):
        if not os.path.lexists(root.image.rootfs / name):
            d = root.upper / name
            d.mkdir(exist_ok=True)
            os.chmod(d, mode)
            made.append(d)
    if uid is not None:
        for d in made:
            os.chown(d, uid, uid)


@contextlib.contextmanager
def mounted(root: ImageRoot, userns_fd: int | None) -> Iterator[list[str]]:
    """bwrap's arguments placing the root (the first of its filesystem view).

    With ``userns_fd`` (hutch as root: the sandbox's namespace) the overlay is the
    daemon's, attached for the block: bwrap must have bound it before the block ends.
    """
    if userns_fd is None:
        yield ["--overlay-src", str(root.image.rootfs), "--overlay", str(root.upper), str(root.work), "/"]
        return
    with idmap.sandbox_root(root.image.rootfs, root.upper, root.work, root.mnt, userns_fd) as target:
        yield ["--bind", str(target), "/"]


def view_args(root: ImageRoot, fds: list[int]) -> list[str]:
    """After the root: the agent's runtime (read-only, its own path; bound by descriptors
    the daemon opened, appended to ``fds``) over a tmpfs ``/.hutch``, never the image's."""
    rt = root.runtime
    args = ["--tmpfs", "/.hutch"]
    for source, target in ((rt.dir, "/.hutch/rt"), (rt.stdlib, rt.stdlib_target)):
        fd = os.open(source, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        fds.append(fd)
        args += ["--ro-bind-fd", str(fd), target]
    return args


def user_of(image: ResolvedImage) -> str:
    """Who an image sandbox runs as unless ``--user`` says: the image's USER, else root."""
    return image.config.user or "root"


def _passwd_entry(etc: Path, uid: int) -> list[str] | None:
    """``uid``'s line of the image's passwd, read without following a symlink out of it."""
    try:
        dfd = os.open(etc, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            fd = os.open("passwd", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
        finally:
            os.close(dfd)
        with os.fdopen(fd, "rb") as f:
            text = f.read(4 << 20).decode(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        fields = line.split(":")
        if len(fields) > 5 and fields[2] == str(uid):
            return fields
    return None


def env(image: ResolvedImage, base: dict[str, str], plan: Plan | None) -> dict[str, str]:
    """The sandbox's environment: hutch's base, the user's identity, then the image's."""
    uid = plan.uid if plan is not None else INSIDE_UID
    entry = _passwd_entry(image.rootfs / "etc", uid)
    name = entry[0] if entry else "root" if uid == 0 else str(uid)
    home = entry[5] if entry and entry[5] else HOME if uid == 0 else "/"
    out = dict(base) | {"HOME": home, "USER": name, "LOGNAME": name}
    for item in image.config.env:
        key, sep, value = item.partition("=")
        if sep and key:
            out[key] = value
    out["HUTCH_SANDBOX"] = "1"
    return out


def defaults(image: ResolvedImage) -> dict[str, Any]:
    """What the image's config sets for the sandbox's runs (the Service applies them where
    a request says nothing): ``argv`` (ENTRYPOINT + CMD, for ``hutch run`` without a
    command) and ``workdir`` (WORKDIR, unless ``--workdir`` was given)."""
    out: dict[str, Any] = {}
    argv = [*image.config.entrypoint, *image.config.cmd]
    if argv:
        out["argv"] = argv
    if image.config.workdir and image.config.workdir.startswith("/"):
        out["workdir"] = image.config.workdir
    return out


def teardown(sandbox_dir: Path) -> None:
    """Before the sandbox's directory is removed: nothing may stay attached in it (a create
    cut short between attach and detach)."""
    with contextlib.suppress(OSError):
        idmap.detach(sandbox_dir / "root" / "mnt")
