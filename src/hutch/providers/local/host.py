"""Host-side helpers of the local provider: launching bwrap as the sandbox's uid, process
identity, reachability of mount sources, and cleanup."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import select
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hutch.errors import InvalidError, UnavailableError
from hutch.provider import CheckResult

START_TIMEOUT = 20.0


def start_time(pid: int) -> int | None:
    """The process's start time (to tell it from a reused pid); None once it is gone.

    A zombie counts as gone: after SIGKILL the sandbox's init is reparented to the host's
    PID 1, which may take a second or more to reap it.
    """
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2 :].split()
    if fields[0] in (b"Z", b"X"):
        return None
    return int(fields[19])


def kill(pid: int) -> bool:
    """SIGKILL ``pid``; whether it was there to be killed."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


def memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, 0)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def rmtree(path: Path) -> None:
    def fix(func: Callable[..., Any], p: str, _exc: Any) -> None:
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(p), 0o700)
            os.chmod(p, 0o700)
        with contextlib.suppress(FileNotFoundError):
            if func in (os.open, os.scandir, os.listdir):  # a directory it could not enter (overlayfs's work/work is 000)
                shutil.rmtree(p, onerror=fix)
            else:
                func(p)

    if path.exists():
        shutil.rmtree(path, onerror=fix)


V2_PROCS = "/cgroup.procs"  # a v2 cgroup's (v1's are joined by their tasks files): the native launcher starts in it
JOIN_CGROUPS = 'while [ "$1" != -- ]; do echo 0 > "$1" || exit 125; shift; done; shift; exec "$@"'


def drop(uid: int | None, cgroup_joins: list[str], rlimits: dict[int, int] | None = None) -> Callable[[], None]:
    """preexec: join the sandbox cgroups (as root; ``0`` to each of SandboxCgroup.join_files), then
    become the sandbox uid."""

    def run() -> None:
        for path in cgroup_joins:
            fd = os.open(path, os.O_WRONLY)
            os.write(fd, b"0")
            os.close(fd)
        for res, value in (rlimits or {}).items():
            resource.setrlimit(res, (value, value))
        if uid is not None:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)

    return run


def launcher(uid: int | None, cgroup_joins: list[str], rlimits: dict[int, int], native: str | None = None) -> list[str] | None:
    """A command prefix that joins the cgroups (writes ``0`` to each of ``cgroup_joins``, made by
    SandboxCgroup.join_files: the launcher is single-threaded), drops to ``uid`` and sets rlimits.

    Without it, a ``preexec_fn`` does the same, but that makes CPython fork the whole
    daemon instead of using vfork (measured: ~18 ms per create instead of ~2 ms).
    ``native``: the idle helper's binary (hold.c), whose ``--launch`` does it all in one
    small exec (and starts the command in a v2 cgroup with ``clone3``, staying its parent: a
    ``cgroup.procs`` write waits out an RCU grace period); else ``sh`` joins the cgroups, then
    ``setpriv`` and ``prlimit`` (util-linux), about 2.5 ms more per start. None when a needed
    tool is missing.
    """
    if native is not None:
        return [
            native,
            "--launch",
            *(f"--into={p[: -len(V2_PROCS)]}" if p.endswith(V2_PROCS) else f"--procs={p}" for p in cgroup_joins),
            *([f"--user={uid}:{uid}"] if uid is not None else []),
            *(f"--rlimit={int(r)}:{v}" for r, v in rlimits.items()),
            "--",
        ]
    prefix: list[str] = []
    if cgroup_joins:
        prefix += ["/bin/sh", "-c", JOIN_CGROUPS, "hutch-launch", *cgroup_joins, "--"]
    if uid is not None:
        setpriv = shutil.which("setpriv", path="/usr/bin:/bin:/usr/sbin:/sbin")
        if setpriv is None:
            return None
        prefix += [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]
    if rlimits:
        prlimit = shutil.which("prlimit", path="/usr/bin:/bin:/usr/sbin:/sbin")
        if prlimit is None:
            return None
        names = {resource.RLIMIT_AS: "--as", resource.RLIMIT_NPROC: "--nproc"}
        prefix += [prlimit, *(f"{names[r]}={v}" for r, v in rlimits.items()), "--"]
    return prefix


def check_reachable(path: Path, uid: int) -> None:
    """As root, bwrap runs as the sandbox's own uid: it must be able to reach a mount source."""
    for p in [*reversed(path.parents), path]:
        st = p.stat()
        last = p == path
        if not last or stat.S_ISDIR(st.st_mode):
            need, own, fix = (
                stat.S_IXOTH | (stat.S_IROTH if last else 0),
                stat.S_IXUSR | (stat.S_IRUSR if last else 0),
                "o+rx" if last else "o+x",
            )
        else:  # a regular file: read is enough
            need, own, fix = stat.S_IROTH, stat.S_IRUSR, "o+r"
        if st.st_uid == uid and st.st_mode & own == own:
            continue
        if st.st_mode & need != need:
            raise InvalidError(
                f"the sandbox user (host uid {uid}) cannot reach {path}: {p} is mode {stat.filemode(st.st_mode)}",
                hint=(
                    "copy the files in instead (hutch push SANDBOX DIR, or hutch run --sync DIR), or mount a directory "
                    f"meant for sharing; opening {p} with chmod {fix} would open it to every user of this machine"
                ),
            )


def readable(fds: list[int], timeout: float) -> list[int]:
    """The descriptors of ``fds`` ready to read (data, end of file or, for a pidfd, exit), waiting
    at most ``timeout`` seconds. poll, not select: the daemon raises its open-file limit, and
    select cannot watch a descriptor numbered 1024 or above (FD_SETSIZE)."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    return [fd for fd, _ in poller.poll(max(0.0, timeout) * 1000)]


def wait_start(proc: subprocess.Popen[bytes], info_r: int, ready_r: int, sdir: Path) -> dict[str, Any]:
    deadline = time.monotonic() + START_TIMEOUT
    info = b""
    ready = b""
    try:
        while b"ready" not in ready:
            left = deadline - time.monotonic()
            if left <= 0:
                raise UnavailableError("the sandbox did not start in time", hint=f"see {sdir / 'sandbox.log'}")
            watch = [fd for fd, done in ((info_r, info.endswith(b"}\n") or info.endswith(b"}")), (ready_r, False)) if not done]
            got = readable(watch, min(left, 0.5))
            for fd in got:
                chunk = os.read(fd, 4096)
                if fd == info_r:
                    info += chunk
                else:
                    ready += chunk
                if not chunk and fd == ready_r:
                    proc.wait(timeout=5)
                    log = (sdir / "sandbox.log").read_text(errors="replace").strip()[-2000:]
                    if os.geteuid() == 0 and (closed := closed_to_sandboxes(sdir)) is not None:
                        raise UnavailableError(
                            f"the sandbox failed to start: its uid may not enter {closed} (mode"
                            f" {closed.stat().st_mode & 0o777:04o}), which holds the state directory ({log})",
                            hint=f"chmod o+x {closed}, or set HUTCH_HOME to a directory outside it (such as /var/lib/hutch)",
                        )
                    raise UnavailableError(
                        f"the sandbox failed to start: {log or 'exit code ' + str(proc.returncode)}",
                        hint="run hutch doctor",
                    )
            if not got and proc.poll() is not None:
                raise UnavailableError(f"bwrap exited with code {proc.returncode}", hint=f"see {sdir / 'sandbox.log'}")
    finally:
        os.close(ready_r)
    try:
        while not info.rstrip().endswith(b"}"):
            chunk = os.read(info_r, 4096)
            if not chunk:
                break
            info += chunk
    finally:
        os.close(info_r)
    parsed: dict[str, Any] = json.loads(info)
    return parsed


def closed_to_sandboxes(path: Path) -> Path | None:
    """The first directory above ``path`` that others may not enter (no search permission), or
    None. A root daemon starts bwrap as the sandbox's own uid, and bwrap resolves the paths it
    binds: a state directory under such a directory (a 0700 home directory, pytest's temporary
    directories) cannot hold sandboxes."""
    for parent in reversed(path.absolute().parents):  # from / down
        try:
            if not os.stat(parent).st_mode & 0o001:
                return parent
        except OSError:
            return None
    return None


def reach_check(home: Path) -> CheckResult:
    """hutch doctor: whether sandboxes' uids can reach the state directory (root only; a
    user's daemon starts bwrap as that user)."""
    if os.geteuid() != 0:
        return CheckResult("state dir reach", True, "bwrap runs as this user")
    closed = closed_to_sandboxes(home / "sandboxes")
    if closed is None:
        return CheckResult("state dir reach", True, f"sandbox uids may enter every directory above {home}")
    return CheckResult(
        "state dir reach",
        False,
        f"sandbox uids may not enter {closed}, which holds the state directory {home}: no sandbox can start",
        f"chmod o+x {closed}, or set HUTCH_HOME to a directory outside it (such as /var/lib/hutch)",
    )
