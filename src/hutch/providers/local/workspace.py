"""The local provider's workspace capability: tar export/import, fork copies, tenants.

Every read and write of a workspace runs GNU tar (or rm) inside a throwaway *jail*: a
bwrap with the same hardening as a sandbox, nothing writable but the workspace bound at
``/workspace``, running as the sandbox's own host uid. A symlink the workload planted in
its workspace (``src -> /etc``) therefore resolves inside the jail's empty view, never on
the host, and the tar can only write what the sandbox itself could. That is simpler to
get right than ``openat``/``O_NOFOLLOW`` walks in the daemon, which runs as root, and it
costs one bwrap start (about 6 ms here). The daemon only opens the archive file it owns.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING

from hutch.errors import CapacityError, InternalError, InvalidError, UnavailableError
from hutch.models import SandboxRecord
from hutch.providers.local import bwrap as bw
from hutch.providers.local import seccomp
from hutch.providers.local.host import rmtree

if TYPE_CHECKING:
    from hutch.config import Settings

TAR = "/usr/bin/tar"
TAR_CREATE = [
    TAR,
    "--create",
    "--file=-",
    "--format=posix",
    "--pax-option=delete=atime,delete=ctime",
    "--xattrs",
    "--xattrs-include=*",
    "--numeric-owner",
    "--one-file-system",
    "--directory=/workspace",
    ".",
]
TAR_EXTRACT = [
    TAR,
    "--extract",
    "--file=-",
    "--xattrs",
    "--xattrs-include=user.*",
    "--preserve-permissions",
    "--no-same-owner",
    "--no-overwrite-dir",
    "--directory=/workspace",
]
JAIL_TIMEOUT = 600.0


def tenant_dir(settings: Settings, name: str) -> Path:
    return settings.home / "tenants" / name


def adopt_tree(root: Path, uid: int) -> None:
    """Give a kept tenant workspace to its new sandbox's uid (no symlink is followed)."""
    if root.lstat().st_uid == uid:
        return
    os.lchown(root, uid, uid)
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            os.lchown(os.path.join(top, name), uid, uid)


class WorkspaceMixin:
    """Mixed into LocalProvider; relies on its bwrap(), _slot_uid(), _drop() and settings."""

    settings: Settings
    root: bool
    bwrap: Callable[[], bw.Bwrap]
    _slot_uid: Callable[[SandboxRecord], int]
    _drop: Callable[..., Callable[[], None]]

    def workspace_dir(self, rec: SandboxRecord) -> Path:
        if rec.data.get("workspace_path"):  # where create bound it (a sub-agent: its parent's)
            return Path(rec.data["workspace_path"])
        if rec.spec.tenant:
            return tenant_dir(self.settings, rec.spec.tenant) / "workspace"
        return self.settings.sandboxes_dir / rec.id / "workspace"

    def _jail(
        self, rec: SandboxRecord, argv: list[str], stdin: int | IO[bytes], stdout: int | IO[bytes]
    ) -> subprocess.Popen[bytes]:
        ws = self.workspace_dir(rec)
        ws_fd = os.open(ws, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            with seccomp.fds() as filters:  # tar reads what the sandbox wrote: the same syscall filter
                args = [self.bwrap().path, *bw.HARDENING, "--ro-bind", "/usr", "/usr", *bw.root_links()]
                args += [*seccomp.bwrap_args(filters)[0], "--dev", "/dev", "--bind-fd", str(ws_fd), "/workspace"]
                args += ["--chdir", "/workspace", "--", *argv]
                uid = self._slot_uid(rec) if self.root else None
                return subprocess.Popen(
                    args,
                    stdin=stdin,
                    stdout=stdout,
                    stderr=subprocess.PIPE,
                    pass_fds=[ws_fd, *filters],
                    preexec_fn=self._drop(uid, []),
                )
        finally:
            os.close(ws_fd)

    @staticmethod
    def _finish(proc: subprocess.Popen[bytes], what: str) -> None:
        try:
            _, err = proc.communicate(timeout=JAIL_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise UnavailableError(f"{what} took longer than {JAIL_TIMEOUT:.0f} s", hint="try a smaller workspace") from None
        if proc.returncode != 0:
            text = err.decode(errors="replace").strip()[-500:]
            if "No space left" in text or "Disk quota" in text:
                raise CapacityError(f"{what}: no space left: {text}", hint="free disk space under HUTCH_HOME")
            raise UnavailableError(f"{what} failed: {text or proc.returncode}", hint="run hutch doctor")

    async def export_workspace(self, rec: SandboxRecord, dest: Path) -> int:
        def work() -> int:
            fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                self._finish(self._jail(rec, TAR_CREATE, subprocess.DEVNULL, fd), "saving the workspace")
            finally:
                os.close(fd)
            return dest.stat().st_size

        return await asyncio.to_thread(work)

    async def import_workspace(self, rec: SandboxRecord, src: Path | None, delete: list[str]) -> None:
        for rel in delete:  # the Service checks these too; a provider never trusts its caller
            if rel.startswith("/") or ".." in rel.split("/"):
                raise InvalidError(f"refusing to delete {rel!r}: not a path inside the workspace")

        def work() -> None:
            if src is not None:
                with open(src, "rb") as f:
                    self._finish(self._jail(rec, TAR_EXTRACT, f, subprocess.DEVNULL), "writing into the workspace")
            for i in range(0, len(delete), 1000):
                rm = ["/usr/bin/rm", "-f", "--", *delete[i : i + 1000]]
                self._finish(self._jail(rec, rm, subprocess.DEVNULL, subprocess.DEVNULL), "deleting in the workspace")

        await asyncio.to_thread(work)

    async def clone_workspace(self, src: SandboxRecord, dst: SandboxRecord) -> str:
        """A tar pipe from the source's jail into the child's: ext4 here has no reflink, and
        ``cp --reflink`` as root would have to re-own every file afterwards anyway."""

        def work() -> str:
            r, w = os.pipe()
            try:
                reader = self._jail(src, TAR_CREATE, subprocess.DEVNULL, w)
            except BaseException:
                os.close(r)
                raise
            finally:
                os.close(w)
            try:
                writer = self._jail(dst, TAR_EXTRACT, r, subprocess.DEVNULL)
            except BaseException:
                reader.kill()
                reader.wait()
                raise
            finally:
                os.close(r)
            self._finish(writer, "copying the workspace")
            self._finish(reader, "reading the source workspace")
            return "tar"

        return await asyncio.to_thread(work)

    async def delete_tenant(self, name: str) -> bool:
        path = tenant_dir(self.settings, name)
        existed = path.exists()
        await asyncio.to_thread(rmtree, path)
        return existed


def make_tenant_workspace(settings: Settings, name: str, uid: int | None) -> Path:
    """The tenant's kept workspace (made on first use), owned by ``uid`` when root."""
    base = settings.home / "tenants"
    base.mkdir(mode=0o711, exist_ok=True)
    os.chmod(base, 0o711)
    top = base / name
    top.mkdir(mode=0o711, exist_ok=True)
    os.chmod(top, 0o711)  # the daemon's umask is 077: bwrap, as the sandbox's uid, must pass through
    ws = top / "workspace"
    ws.mkdir(mode=0o700, exist_ok=True)
    if ws.is_symlink() or not ws.is_dir():
        raise InternalError(f"{ws} is not a directory")
    if uid is not None:
        adopt_tree(ws, uid)
    with contextlib.suppress(OSError):
        os.chmod(ws, 0o700)
    return ws
