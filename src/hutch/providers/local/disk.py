"""``--disk SIZE``: what a sandbox may write, capped by a filesystem of that size.

As root, a sandbox with a cap gets an ext4 filesystem of its own: a sparse file
``sandboxes/ID/disk.img`` (it takes only what is written) made with ``mkfs.ext4`` and
loop-mounted at ``sandboxes/ID/disk``, holding its ``/workspace`` and, for an image
sandbox, its writable root's upper. A write past the size fails with ENOSPC inside; the
host's disk and every other sandbox are untouched. Measured here (loaded machine): about
30-80 ms for mkfs and as much for the mount, per create that asks for a cap; nothing for
one that does not. Destroy unmounts it (the loop device goes with it) and removes the file.

A normal user cannot mount a filesystem, and a tmpfs would be RAM, so there ``--disk`` is
refused (``unavailable``) rather than silently ignored; so is a tenant sandbox's (its
workspace outlives the sandbox, kept under ``tenants/``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

from hutch.errors import InvalidError, UnavailableError
from hutch.providers.local.images import idmap
from hutch.units import format_size

TIMEOUT = 60.0


def check(root: bool, tenant: str | None) -> None:
    """Refuse a cap that cannot be kept, before anything is made."""
    if tenant:
        raise InvalidError(
            "--disk cannot cap a tenant sandbox: its /workspace is kept under tenants/ and outlives the sandbox",
            hint="drop --disk, or drop --tenant",
        )
    if not root:
        raise UnavailableError(
            "--disk needs hutch running as root here: the cap is a loop-mounted filesystem per sandbox, "
            "which a normal user cannot mount (and a tmpfs would hold the sandbox's writes in RAM)",
            hint="drop --disk, or run the daemon as root",
        )


def _tool(name: str) -> str:
    found = shutil.which(name, path="/usr/sbin:/usr/bin:/sbin:/bin")
    if found is None:
        raise UnavailableError(f"{name} was not found: --disk needs it", hint="apt-get install e2fsprogs mount")
    return found


def _run(argv: list[str], what: str) -> None:
    done = subprocess.run(argv, capture_output=True, timeout=TIMEOUT, check=False, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        err = done.stderr.decode(errors="replace").strip()[-500:]
        raise UnavailableError(f"{what} failed: {err or done.returncode}", hint="run hutch doctor")


def make(sandbox_dir: Path, size: int, owner: int) -> Path:
    """The sandbox's capped filesystem, mounted; returns where (``sandbox_dir/disk``), its
    top directory owned by ``owner`` (the sandbox's root)."""
    image, where = sandbox_dir / "disk.img", sandbox_dir / "disk"
    with open(image, "wb") as f:
        f.truncate(size)
    os.chmod(image, 0o600)
    opts = f"lazy_itable_init=1,lazy_journal_init=1,root_owner={owner}:{owner}"
    _run([_tool("mkfs.ext4"), "-q", "-F", "-m", "0", "-E", opts, str(image)], f"making the sandbox's {format_size(size)} disk")
    where.mkdir(mode=0o711, exist_ok=True)
    _run([_tool("mount"), "-o", "loop,nodev,nosuid", str(image), str(where)], "mounting the sandbox's disk")
    os.chmod(where, 0o711)
    return where


def remove(sandbox_dir: Path) -> None:
    """Unmount the sandbox's disk if it has one (before its directory is removed)."""
    with contextlib.suppress(OSError):
        idmap.detach(sandbox_dir / "disk" / "root" / "mnt")
    with contextlib.suppress(OSError):
        idmap.detach(sandbox_dir / "disk")
