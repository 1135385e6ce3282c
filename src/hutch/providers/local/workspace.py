"""The local provider's workspace capability: tar export/import, fork copies, tenants.

Every read and write of a workspace runs GNU tar (or rm) inside a throwaway *jail*: a
bwrap with the same hardening as a sandbox, nothing writable but the workspace bound at
``/workspace``, running as the sandbox's own host uid. A symlink the workload planted in
its workspace (``src -> /etc``) therefore resolves inside the jail's empty view, never on
the host, and the tar can only write what the sandbox itself could. That is simpler to
get right than ``openat``/``O_NOFOLLOW`` walks in the daemon, which runs as root, and it
costs one bwrap start (about 6 ms here). The daemon only opens the archive file it owns,
and, for a fork, the two ``/workspace`` directories themselves (``O_NOFOLLOW``): to see
whether the source has any entry at all (names only), and when it has none, to give the
child's directory its modification time instead of starting two jails to copy nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

from hutch.errors import CapacityError, ConflictError, InternalError, InvalidError, UnavailableError
from hutch.models import SandboxRecord
from hutch.provider import CopyReport, tenant_storage
from hutch.providers.local import bwrap as bw
from hutch.providers.local import seccomp, userns
from hutch.providers.local.helpers import Finished, Helpers, Job
from hutch.providers.local.host import rmtree
from hutch.providers.local.images import carry

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
# The reading tar may read what its owner made unreadable (chmod 000): a copy is faithful.
# Inside the jail's user namespace the capability covers only the sandbox's own files.
READ_ALL = ["--cap-add", "CAP_DAC_READ_SEARCH"]
JAIL_TIMEOUT = 600.0
TAR_SUMMARY = "Exiting with failure status due to previous errors"
NOTES = 5
T = TypeVar("T")


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


def _messages(err: Finished) -> list[str]:
    return [line for line in err.stderr.head if TAR_SUMMARY not in line]


def check(done: Finished, what: str) -> None:
    """A helper that failed: what it said (bounded), as the right kind of error."""
    if done.returncode == 0:
        return
    said = _messages(done) or [done.stderr.text()]
    text = "; ".join(line for line in said[:3] if line)[:1000]
    more = done.stderr.lines - len(said[:3])
    if more > 1:
        text += f" (and {more - 1} more message(s))"
    everything = " ".join(done.stderr.head) + done.stderr.text()
    if "No space left" in everything or "Disk quota" in everything:
        raise CapacityError(f"{what}: no space left: {text}", hint="free disk space under HUTCH_HOME")
    raise UnavailableError(f"{what} failed: {text or f'exit code {done.returncode}'}", hint="run hutch doctor")


def read_report(done: Finished, what: str) -> CopyReport:
    """The reading tar of a copy: exit 1 ("some files differ": changed or removed while read)
    and warnings (a socket it cannot archive) are reported, not fatal; anything else is."""
    said = _messages(done)
    if done.returncode not in (0, 1) or any(line.startswith("bwrap:") for line in said):
        check(Finished(done.returncode or 1, done.stderr), what)
    skipped = done.stderr.lines - (1 if TAR_SUMMARY in done.stderr.text() else 0)  # one line per entry
    return CopyReport("tar", skipped=skipped, notes=tuple(said[:NOTES]))


class WorkspaceMixin:
    """Mixed into LocalProvider; relies on its bwrap(), _slot_uid(), helpers and settings."""

    settings: Settings
    root: bool
    bwrap: Callable[[], bw.Bwrap]
    _slot_uid: Callable[[SandboxRecord], int]
    helpers: Helpers

    def workspace_dir(self, rec: SandboxRecord) -> Path:
        if rec.data.get("workspace_path"):  # where create bound it (a sub-agent: its parent's)
            return Path(rec.data["workspace_path"])
        if storage := tenant_storage(rec):
            return tenant_dir(self.settings, storage) / "workspace"
        return self.settings.sandboxes_dir / rec.id / "workspace"

    def _jail(
        self,
        job: Job,
        rec: SandboxRecord,
        argv: list[str],
        stdin: int | IO[bytes],
        stdout: int | IO[bytes],
        read_all: bool = False,
    ) -> subprocess.Popen[bytes]:
        """One tar (or rm) in a jail over ``rec``'s workspace, as the sandbox's uid, in ``job``."""
        ws = self.workspace_dir(rec)
        try:
            ws_fd = os.open(ws, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            raise ConflictError(f"sandbox {rec.id} has no workspace any more", hint="it is being destroyed") from None
        except OSError as exc:
            raise UnavailableError(f"cannot open the workspace of {rec.id}: {exc}", hint="run hutch doctor") from exc
        try:
            with seccomp.fds() as filters:  # tar reads what the sandbox wrote: the same syscall filter
                args = [self.bwrap().path, *bw.HARDENING, *(READ_ALL if read_all else [])]
                args += ["--ro-bind", "/usr", "/usr", *bw.root_links()]
                args += [*seccomp.bwrap_args(filters)[0], "--dev", "/dev", "--bind-fd", str(ws_fd), "/workspace"]
                args += ["--chdir", "/workspace", "--", *argv]
                uid = self._slot_uid(rec) if self.root else None
                return job.spawn(args, uid=uid, stdin=stdin, stdout=stdout, pass_fds=[ws_fd, *filters])
        finally:
            os.close(ws_fd)

    async def _helper(self, what: str, recs: list[SandboxRecord], work: Callable[[Job], T]) -> T:
        return await self.helpers.run(what, [r.id for r in recs], work, JAIL_TIMEOUT)

    async def export_workspace(self, rec: SandboxRecord, dest: Path) -> int:
        def work(job: Job) -> int:
            fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                self._jail(job, rec, TAR_CREATE, subprocess.DEVNULL, fd, read_all=True)
            finally:
                os.close(fd)
            check(job.wait()[0], "saving the workspace")
            return dest.stat().st_size

        return await self._helper("saving the workspace", [rec], work)

    async def import_workspace(self, rec: SandboxRecord, src: Path | None, delete: list[str]) -> None:
        for rel in delete:  # the Service checks these too; a provider never trusts its caller
            if rel.startswith("/") or ".." in rel.split("/"):
                raise InvalidError(f"refusing to delete {rel!r}: not a path inside the workspace")

        def extract(job: Job) -> None:
            assert src is not None
            with open(src, "rb") as f:
                self._jail(job, rec, TAR_EXTRACT, f, subprocess.DEVNULL)
            check(job.wait()[0], "writing into the workspace")

        def remove(batch: list[str]) -> Callable[[Job], None]:
            def work(job: Job) -> None:
                self._jail(job, rec, ["/usr/bin/rm", "-f", "--", *batch], subprocess.DEVNULL, subprocess.DEVNULL)
                check(job.wait()[0], "deleting in the workspace")

            return work

        if src is not None:
            await self._helper("writing into the workspace", [rec], extract)
        for i in range(0, len(delete), 1000):
            await self._helper("deleting in the workspace", [rec], remove(delete[i : i + 1000]))

    def _open_dir(self, rec: SandboxRecord) -> int:
        return os.open(self.workspace_dir(rec), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)

    def _copy_empty(self, src: SandboxRecord, dst: SandboxRecord) -> bool:
        """The copy of an empty source workspace, without the tar pipe: what the pipe would
        carry is only its ``/workspace`` directory's modification time (its extract keeps the
        child's own directory's mode, ``--no-overwrite-dir``), set here on the child's. False
        (the tar pipe copies) when the source has any entry, or ``user.`` attributes on its
        directory, or is not a plain directory (the jail then says what is wrong).

        Only the names in the source directory itself are read (one ``getdents``, as root):
        nothing in it is opened, stat'ed or followed; both directories are opened with
        ``O_NOFOLLOW`` and only their own descriptors are used."""
        try:
            fd = self._open_dir(src)
        except OSError:
            return False
        try:
            with os.scandir(fd) as entries:
                if next(entries, None) is not None:
                    return False
            if any(name.startswith("user.") for name in os.listxattr(fd)):
                return False
            mtime = os.fstat(fd).st_mtime_ns
        except OSError:
            return False
        finally:
            os.close(fd)
        try:
            out = self._open_dir(dst)
        except OSError:
            return False
        try:
            os.utime(out, ns=(os.fstat(out).st_atime_ns, mtime))
        except OSError:
            return False
        finally:
            os.close(out)
        return True

    async def clone_workspace(self, src: SandboxRecord, dst: SandboxRecord) -> CopyReport:
        """A tar pipe from the source's jail into the child's: ext4 here has no reflink, and
        ``cp --reflink`` as root would have to re-own every file afterwards anyway. Both
        tars run in one helper job: stopped together, their stderr drained as they run.

        An empty source takes no pipe (``method`` "empty", see :meth:`_copy_empty`). What
        the source writes after that look is not the child's, as with a tar that has read
        past it."""
        if self._copy_empty(src, dst):
            return CopyReport("empty")

        def work(job: Job) -> CopyReport:
            r, w = os.pipe2(os.O_CLOEXEC)
            try:
                self._jail(job, src, TAR_CREATE, subprocess.DEVNULL, w, read_all=True)
                self._jail(job, dst, TAR_EXTRACT, r, subprocess.DEVNULL)
            finally:
                os.close(r)
                os.close(w)
            reader, writer = job.wait()
            check(writer, "copying into the new workspace")
            return read_report(reader, "reading the source workspace")

        return await self._helper("copying the workspace", [src, dst], work)

    def _root_jail(
        self, job: Job, first_uid: int, upper: Path, argv: list[str], stdin: int | IO[bytes], stdout: int | IO[bytes]
    ) -> subprocess.Popen[bytes]:
        """One tar over an image sandbox's upper, in that sandbox's own namespace (:mod:`.images.carry`)."""
        ns = userns.create(carry.mapping(self.root, first_uid), first_uid if self.root else None)
        try:
            up = carry.open_upper(upper)
        except BaseException:
            os.close(ns)
            raise
        try:
            with seccomp.fds() as filters:
                args = carry.jail_args(self.bwrap().path, ns, up, filters) + argv
                uid = first_uid if self.root else None
                return job.spawn(args, uid=uid, stdin=stdin, stdout=stdout, pass_fds=[ns, up, *filters])
        finally:
            os.close(ns)
            os.close(up)

    async def export_root(self, rec: SandboxRecord, dest: Path) -> int | None:
        image = rec.data.get("image")
        if not image:
            return None
        upper, uid = Path(image["root"]) / "upper", int(rec.data["uid"])

        def work(job: Job) -> int:
            fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                self._root_jail(job, uid, upper, carry.CREATE, subprocess.DEVNULL, fd)
            finally:
                os.close(fd)
            check(job.wait()[0], "saving the writable root")
            return dest.stat().st_size

        return await self._helper("saving the writable root", [rec], work)

    async def seed_root(self, sandbox_id: str, upper: Path, uid: int, seed: dict[str, Any]) -> None:
        """Fill a new sandbox's upper (before its root is mounted) from a snapshot's tar or a source sandbox's upper."""
        source = seed.get("data") or {}

        def work(job: Job) -> None:
            if "tar" in seed:
                with open(seed["tar"], "rb") as f:
                    self._root_jail(job, uid, upper, carry.EXTRACT, f, subprocess.DEVNULL)
                check(job.wait()[0], "restoring the writable root")
                return
            r, w = os.pipe2(os.O_CLOEXEC)
            try:
                src_upper = Path(source["image"]["root"]) / "upper"
                self._root_jail(job, int(source["uid"]), src_upper, carry.CREATE, subprocess.DEVNULL, w)
                self._root_jail(job, uid, upper, carry.EXTRACT, r, subprocess.DEVNULL)
            finally:
                os.close(r)
                os.close(w)
            reader, writer = job.wait()
            check(writer, "copying the writable root")
            read_report(reader, "reading the source's writable root")

        ids = [sandbox_id, *([str(seed["sandbox"])] if seed.get("sandbox") else [])]
        await self.helpers.run("copying the writable root", ids, work, JAIL_TIMEOUT)

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
