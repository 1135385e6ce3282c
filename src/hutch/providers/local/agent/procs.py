"""Processes inside the sandbox, read from its own /proc: trees, signals, reaping, ``ps``."""

from __future__ import annotations

import errno
import os
import select

from . import users, wire

# signal.py's enums import enum (a fifth of the agent's start): the C module under it has the
# same functions and numbers; the type checker reads signal.py.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal
    from collections.abc import Callable
    from typing import Any
else:
    import _signal as signal

REAPED: dict[int, int] = {}  # pid -> wait status, for children reaped while sweeping orphans
PR_SET_CHILD_SUBREAPER = 36


def _stat(pid: str) -> bytes:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read()


def children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            data = _stat(name)
        except OSError:
            continue
        ppid = int(data[data.rindex(b")") + 2 :].split()[1])
        kids.setdefault(ppid, []).append(int(name))
    return kids


def descendants(root: int) -> list[int]:
    kids = children_map()
    out: list[int] = []
    todo = [root]
    while todo:
        for child in kids.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def kill_tree(root: int, sig: int) -> None:
    """Signal every descendant of ``root``; with SIGKILL, repeat until none is left."""
    for _ in range(200):
        pids = descendants(root)
        if not pids:
            return
        for pid in pids:
            with wire.ignoring(OSError):
                os.kill(pid, sig)
        if sig != signal.SIGKILL:
            return
        reap(block=False)
        select.select([], [], [], 0.002)


def reap(block: bool) -> None:
    """Collect ended children (orphans a subreaper inherited), keeping their statuses."""
    while True:
        try:
            pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        REAPED[pid] = status


def watch_child(pid: int) -> tuple[int, bool]:
    """A descriptor readable when child ``pid`` ends: its pidfd, or where the kernel has none
    (gVisor's of 2022), a pipe every SIGCHLD wakes (True: ask :func:`ended` then, and each turn)."""
    try:
        return os.pidfd_open(pid), False
    except OSError as exc:
        if exc.errno != errno.ENOSYS:
            raise
    r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(w)
    return r, True


def ended(pid: int, fd: int) -> bool:
    """Whether child ``pid`` has ended (not reaped: :func:`wait_for` does that); drains ``fd``."""
    with wire.ignoring(BlockingIOError):
        os.read(fd, 512)
    if pid in REAPED:
        return True
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def wait_for(pid: int) -> int:
    """The wait status of child ``pid`` (reaped already or now)."""
    if pid in REAPED:
        return REAPED.pop(pid)
    try:
        return os.waitpid(pid, 0)[1]
    except ChildProcessError:
        return REAPED.pop(pid, 9)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_PRCTL: dict[str, Callable[..., int] | None] = {}


def load_prctl() -> None:
    """ctypes costs ~8 ms to import: the agent loads it once it is ready (spares forked
    later inherit it); the very first spare loads it itself, after its fork."""
    if "fn" in _PRCTL:
        return
    try:
        import ctypes  # here, on purpose: see above

        _PRCTL["fn"] = ctypes.CDLL(None, use_errno=True).prctl
    except (ImportError, OSError, AttributeError):  # no ctypes: tree kills reach attached descendants only
        _PRCTL["fn"] = None


def set_subreaper() -> None:
    """Orphans of this process's descendants (``setsid`` and double forks) become its children."""
    load_prctl()
    prctl = _PRCTL["fn"]
    if prctl is not None:
        prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def default_signals() -> None:
    """Every signal at its default, as from a terminal: a daemon started under nohup (SIGHUP
    ignored) or as a shell's background job (SIGINT and SIGQUIT ignored) passes that on through
    bwrap, and no run may inherit it (a hangup or ``hutch kill --signal INT`` would not reach it)."""
    for sig in signal.valid_signals():
        try:
            if signal.getsignal(sig) == signal.SIG_IGN:
                signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):  # SIGKILL, SIGSTOP and numbers the C library keeps
            pass


def _users() -> dict[str, str]:
    """uid -> name from the sandbox's /etc/passwd, read as hostile (the workload may make it a FIFO,
    which must not block the agent): no names when it cannot be read."""
    try:
        return {parts[2]: parts[0] for parts in users.table("/etc/passwd") if len(parts) > 2}
    except users.UserError:
        return {}


def processes() -> list[dict[str, Any]]:
    """What ``ps`` shows, read from this sandbox's /proc."""
    out: list[dict[str, Any]] = []
    tick = os.sysconf("SC_CLK_TCK")
    page = os.sysconf("SC_PAGE_SIZE")
    names = _users()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            data = _stat(name)
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").strip().decode("utf-8", "replace")
            uid = str(os.stat(f"/proc/{name}").st_uid)
        except OSError:
            continue
        comm = data[data.index(b"(") + 1 : data.rindex(b")")].decode("utf-8", "replace")
        fields = data[data.rindex(b")") + 2 :].split()
        out.append(
            {
                "pid": int(name),
                "ppid": int(fields[1]),
                "user": names.get(uid, uid),
                "state": fields[0].decode(),
                "cpu_seconds": round((int(fields[11]) + int(fields[12])) / tick, 2),
                "rss": int(fields[21]) * page,
                "command": cmd or f"[{comm}]",
            }
        )
    out.sort(key=lambda p: int(p["pid"]))
    return out
