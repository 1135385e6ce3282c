"""Starting a run's command: its pipes or terminal, the process, and why it could not start."""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess

from .output import Sink
from .users import clear_inheritable, resolve

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .wire import ExecRequest

PIPE_SIZE = 1 << 18  # an output pipe's room, and what the supervisor reads at once


def set_winsize(fd: int, rows: int, cols: int) -> None:
    import struct  # here: only runs with a terminal need these
    import termios

    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", int(rows), int(cols), 0, 0))


def take_terminal() -> None:
    """In the child, after setsid: make the pty on stdin the controlling terminal."""
    import termios

    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Plumbing:
    """A run's descriptors: what the command gets, what the supervisor reads and writes.

    A terminal merges stdout and stderr into one stream (stdout); an interactive run's
    stdin is a pipe the supervisor feeds; otherwise stdin is the descriptor the daemon sent.
    """

    def __init__(self, req: ExecRequest, stdin_fd: int, rdir: str) -> None:
        run_id = req["run_id"]
        cap = int(req.get("disk_cap", 64 << 20))
        live_limit = req.get("live_limit")
        self.tty = bool(req.get("tty"))
        self.interactive = self.tty or bool(req.get("interactive"))
        self.sinks: dict[int, Sink] = {}  # read end -> where its output goes
        self.feed: int | None = None  # where input from the host goes (interactive runs)
        self.child_ends: list[int] = [stdin_fd]  # closed here once the command has them
        if self.tty:
            master, slave = os.openpty()
            set_winsize(slave, req.get("rows") or 24, req.get("cols") or 80)
            self.sinks[master] = Sink("stdout", run_id, rdir, cap, live_limit)
            self.io = {"stdin": slave, "stdout": slave, "stderr": slave}
            self.child_ends.append(slave)
            self.feed = master
            return
        self.io = {"stdin": stdin_fd}
        for name in ("stdout", "stderr"):
            r, w = os.pipe2(os.O_CLOEXEC)
            widen(r)
            self.sinks[r] = Sink(name, run_id, rdir, cap, live_limit)
            self.io[name] = w
            self.child_ends.append(w)
        if self.interactive:
            r, w = os.pipe2(os.O_CLOEXEC)
            self.io["stdin"] = r
            self.child_ends.append(r)
            self.feed = w

    def stream(self, name: str) -> Sink:
        """The sink of ``name``; a terminal's (empty) stderr when there is none."""
        for sink in self.sinks.values():
            if sink.name == name:
                return sink
        first = next(iter(self.sinks.values()))
        return Sink(name, first.run_id, first.rdir, first.cap, first.live_limit)

    def spawn(self, req: ExecRequest) -> subprocess.Popen[bytes]:
        """Start the command in a session of its own; the child's descriptors are closed here
        whether or not it started."""
        try:
            env = req.get("env") or {}
            uid = gid = groups = None
            user = req.get("user")
            if user:  # exec --user: that user's ids (every capability goes), its HOME unless the run set one
                uid, gid, groups, login = resolve(user)
                clear_inheritable()
                own = req.get("own_env") or ()
                env = {**env, **{k: v for k, v in login.items() if k not in own}}
            return subprocess.Popen(
                req["argv"],
                stdin=self.io["stdin"],
                stdout=self.io["stdout"],
                stderr=self.io["stderr"],
                cwd=req.get("cwd") or "/workspace",
                env=env,
                start_new_session=True,
                close_fds=True,
                restore_signals=True,
                preexec_fn=take_terminal if self.tty else None,
                user=uid,
                group=gid,
                extra_groups=groups,
            )
        finally:
            for fd in self.child_ends:
                os.close(fd)


def widen(fd: int) -> None:
    """Give an output pipe PIPE_SIZE of room (the kernel's default is 64 KiB): a command that
    writes fast wakes the supervisor a quarter as often. Best effort: past the user's pipe
    allowance (``/proc/sys/fs/pipe-user-pages-soft``) the pipe keeps its size."""
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_SIZE)


def spawn_failure(exc: OSError, program: str, cwd: str) -> tuple[int, str]:
    """(exit code, message) for a command that could not start: 127 not found, 126 cannot run."""
    reason = (exc.strerror or str(exc)).lower()
    if exc.filename == cwd and exc.filename != program:
        if isinstance(exc, FileNotFoundError):
            return 126, f"working directory {cwd} does not exist"
        if isinstance(exc, NotADirectoryError):
            return 126, f"working directory {cwd} is not a directory"
        return 126, f"cannot enter working directory {cwd}: {reason}"
    if isinstance(exc, FileNotFoundError):
        if "/" in program and os.path.exists(os.path.join(cwd, program)):
            return 126, f"cannot run {program}: its interpreter (the #! line) was not found"
        return 127, f"command not found: {program}"
    if isinstance(exc, PermissionError):
        return 126, f"cannot run {program}: permission denied (not executable?)"
    return 126, f"cannot run {program}: {reason}"
