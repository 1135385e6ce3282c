"""Starting a run's command: its pipes or terminal, the process, and why it could not start."""

from __future__ import annotations

import errno
import fcntl
import os
import sys

from . import wire
from .output import Sink
from .users import clear_inheritable, resolve

TYPE_CHECKING = False  # (subprocess and signal.py import enum, re, threading ...: the agent's start)
if TYPE_CHECKING:
    import signal

    from .wire import ExecRequest
else:
    import _signal as signal

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

    def spawn(self, req: ExecRequest) -> int:
        """Start the command in a session of its own (its pid); the child's descriptors are
        closed here whether or not it started."""
        try:
            env = req.get("env") or {}
            uid = gid = groups = None
            user = req.get("user")
            if user:  # exec --user: that user's ids (every capability goes), its HOME unless the run set one
                uid, gid, groups, login = resolve(user)
                clear_inheritable()
                own = req.get("own_env") or ()
                env = {**env, **{k: v for k, v in login.items() if k not in own}}
            stdio = (self.io["stdin"], self.io["stdout"], self.io["stderr"])
            return start(req["argv"], stdio, req.get("cwd") or "/workspace", env, (uid, gid, groups), self.tty)
        finally:
            for fd in self.child_ends:
                os.close(fd)


def start(
    argv: list[str],
    stdio: tuple[int, int, int],
    cwd: str,
    env: dict[str, str],
    ids: tuple[int | None, int | None, list[int] | None],
    tty: bool,
) -> int:
    """Start ``argv`` (its pid) in a session of its own: ``stdio`` on 0-2, the working
    directory, SIGPIPE and SIGXFSZ at their default, the ids (every capability goes), the
    terminal (``tty``), no other descriptor, ``argv[0]`` through the environment's ``PATH``;
    what cannot start raises the ``OSError`` ``subprocess.Popen`` raises (its ``filename`` the
    working directory when that failed, else the program).

    ``subprocess`` (with enum, re, threading, selectors ...) is a third of the agent's start,
    which every cold create's first run and every wake of an idle sandbox waits for: the
    agent imports it once its first run has started (:meth:`.server.Agent.from_spare`), and
    spares forked after that start their command with Popen (a vfork: no copy of this
    process's page tables). Before that, :func:`_fork` does the same with ``os.fork``.
    (Not ``os.posix_spawn``: glibc's leaves its two internal signals ignored in the child.)"""
    subprocess = sys.modules.get("subprocess")
    if subprocess is None:
        return _fork(argv, stdio, cwd, env, ids, tty)
    proc = subprocess.Popen(
        argv,
        stdin=stdio[0],
        stdout=stdio[1],
        stderr=stdio[2],
        cwd=cwd,
        env=env,
        start_new_session=True,
        close_fds=True,
        restore_signals=True,
        preexec_fn=take_terminal if tty else None,
        user=ids[0],
        group=ids[1],
        extra_groups=ids[2],
    )
    _STARTED.append(proc)  # kept: a Popen collected while its child runs would reap it (the supervisor does)
    return int(proc.pid)


_STARTED: list[object] = []


def _fork(
    argv: list[str],
    stdio: tuple[int, int, int],
    cwd: str,
    env: dict[str, str],
    ids: tuple[int | None, int | None, list[int] | None],
    tty: bool,
) -> int:
    """Fork, set the child up, exec; a child that could not start reports its errno on a
    close-on-exec pipe."""
    program = argv[0]
    paths = [program] if "/" in program else [os.path.join(d, program) for d in os.get_exec_path(env)]
    report_r, report_w = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:  # the child: no return
        step = "setup"
        try:
            os.close(report_r)
            for target, fd in enumerate(stdio):
                if fd == target:
                    os.set_inheritable(fd, True)
                else:
                    os.dup2(fd, target)  # (the copy is inheritable)
            step = "chdir"
            os.chdir(cwd)
            step = "setup"
            for sig in (signal.SIGPIPE, signal.SIGXFSZ):
                signal.signal(sig, signal.SIG_DFL)
            os.setsid()
            uid, gid, groups = ids
            if groups is not None:
                os.setgroups(groups)
            if gid is not None:
                os.setregid(gid, gid)
            if uid is not None:
                os.setreuid(uid, uid)
            if tty:
                take_terminal()
            os.closerange(3, report_w)
            os.closerange(report_w + 1, 1 << 20)
            step = "exec"
            first: OSError | None = None
            last: OSError | None = None
            for path in paths:
                try:
                    os.execve(path, argv, env)
                except OSError as exc:  # the next directory of PATH; the first other error wins
                    last = exc
                    if first is None and exc.errno not in (errno.ENOENT, errno.ENOTDIR):
                        first = exc
            raise first or last or FileNotFoundError(errno.ENOENT, "no PATH to look in")
        except OSError as exc:
            os.write(report_w, f"{exc.errno or 0}:{step}".encode())
        except BaseException:  # noqa: BLE001 - anything else: it could not start
            os.write(report_w, b"0:setup")
        finally:
            os._exit(127)
    os.close(report_w)
    try:
        report = b""
        while chunk := os.read(report_r, 64):  # EOF at exec (close-on-exec), or the child's exit
            report += chunk
    finally:
        os.close(report_r)
    if not report:
        return pid
    os.waitpid(pid, 0)
    number, _, step = report.decode().partition(":")
    code = int(number) or errno.EINVAL
    filename = cwd if step == "chdir" else program if step == "exec" else None
    raise OSError(code, os.strerror(code), filename)


def widen(fd: int) -> None:
    """Give an output pipe PIPE_SIZE of room (the kernel's default is 64 KiB): a command that
    writes fast wakes the supervisor a quarter as often. Best effort: past the user's pipe
    allowance (``/proc/sys/fs/pipe-user-pages-soft``) the pipe keeps its size."""
    with wire.ignoring(OSError):
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
