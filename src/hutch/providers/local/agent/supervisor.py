"""The supervisor: one process per run, owning it from start to end, as a small state machine.

::

    STARTING --spawned--> RUNNING --command exited--> DRAINING --pipes closed, or grace over--> FINISHED
        |                                                                                         ^
        +----------------------------could not start (status: spawn)------------------------------+

- STARTING (``_start``): the pipes or terminal, then the command in a session of its own.
- RUNNING: output goes from the pipes to disk and (live) to the daemon, input the other
  way; the wall and idle timeouts are enforced here, so they hold with the daemon gone.
- DRAINING (``_exited``): the command ended; descendants may still hold its pipes: they
  are read for GRACE more seconds (not counting time waiting for a slow daemon), and
  killed if the wall deadline passes meanwhile.
- FINISHED (``_finish``): the status is written to disk, then sent after the rest of the
  live output. ``outcome`` then says how it ended: ``exited`` (by itself, or by a signal
  nobody asked the supervisor for), ``killed`` (asked), ``timed_out`` or ``failed`` (it
  could not start).

Signals (a kill from the daemon, a timeout) are not states: they signal the run's tree
and record the first reason; the run then ends through RUNNING -> DRAINING as usual.
The daemon's connection may go at any time: the run goes on, its output on disk.
"""

from __future__ import annotations

import os
import select
import time

from . import procs, wire
from .hostlink import HostLink, Input
from .output import Redactor
from .spawn import PIPE_SIZE, Plumbing, spawn_failure
from .users import UserError

TYPE_CHECKING = False  # (signal.py imports enum: its C module has what a supervisor needs)
if TYPE_CHECKING:
    import signal
    from _socket import socket
    from typing import Any

    from .output import RunDir
    from .wire import ExecRequest, Status
else:
    import _signal as signal

CHUNK = PIPE_SIZE
GRACE = 0.25  # after the command exits, how long its descendants may hold the pipes
TICK = 1.0  # the longest the loop sleeps without a reason

STARTING, RUNNING, DRAINING, FINISHED = "starting", "running", "draining", "finished"
OUTCOMES = {None: "exited", "killed": "killed", "timeout": "timed_out", "idle_timeout": "timed_out", "spawn": "failed"}


class Supervisor:
    def __init__(self, sock: socket, req: ExecRequest, stdin_fd: int, rundir: RunDir) -> None:
        self.req = req
        self.run_id = req["run_id"]
        self.rundir = rundir
        self.rdir = rundir.claim(self.run_id)
        self.state = STARTING
        self.outcome: str | None = None
        self.host = HostLink(sock)
        self.io = Plumbing(req, stdin_fd, self.rdir)
        self.input = Input(self.io.feed, self.io.tty)
        self.open = set(self.io.sinks)  # pipes not yet at their end
        self.live = bool(req.get("stream", True))
        self.redactor = Redactor(req.get("redact") or {})
        self.started = time.time()
        timeout = req.get("timeout")
        self.deadline = self.started + timeout if timeout else None  # wall clock
        self.idle = req.get("idle_timeout")
        self.last_output = time.monotonic()
        self.reason: str | None = None  # why it ended, when asked: killed, timeout, idle_timeout
        self.pid = 0  # the command's, once started
        self.pidfd = -1
        self.pidfd_is_pipe = False  # no pidfd here (gVisor): SIGCHLD's wakeup pipe, then waitid
        self.wait_status = 0
        self.exited_at = 0.0  # monotonic, once DRAINING

    def run(self) -> None:
        self._start()
        while self.state in (RUNNING, DRAINING):
            self._step()

    # -- transitions: one place each ------------------------------------------------

    def _start(self) -> None:
        """STARTING -> RUNNING, or -> FINISHED when the command cannot start."""
        assert self.state == STARTING
        argv, cwd = self.req["argv"], self.req.get("cwd") or "/workspace"
        try:
            self.pid = self.io.spawn(self.req)
        except (OSError, UserError) as exc:
            if isinstance(exc, UserError):
                code, message = 126, f"cannot run as {self.req.get('user')}: {exc}"
            else:
                code, message = spawn_failure(exc, argv[0], cwd)
            self.reason = "spawn"
            status = self._status(code, 0)
            status["spawn_error"] = message
            self._to_finished(status)
            return
        self.state = RUNNING
        self.host.queue({"type": "started", "pid": self.pid})
        self.host.send_some()  # now: the daemon acknowledges a background run on it
        self.pidfd, self.pidfd_is_pipe = procs.watch_child(self.pid)
        try:  # a kill that came before the command existed
            with open(os.path.join(self.rdir, "killed")) as f:
                self._kill(int(f.read().strip() or signal.SIGKILL), "killed")
        except (OSError, ValueError):
            pass

    def _exited(self) -> None:
        """RUNNING -> DRAINING: the command ended (its descendants may live on)."""
        assert self.state == RUNNING and self.pid
        self.wait_status = procs.wait_for(self.pid)
        self.exited_at = time.monotonic()
        self.state = DRAINING

    def _finish(self) -> None:
        """DRAINING -> FINISHED: what redaction held back, the status, the last words."""
        assert self.state == DRAINING
        for fd in list(self.redactor.held):  # the end of a stream held back (descendants kept it open)
            self._deliver(fd, self.redactor.flush(fd))
        if self.reason is None and os.path.exists(os.path.join(self.rdir, "killed")):
            self.reason = "killed"
        if self.reason in ("timeout", "idle_timeout"):
            procs.kill_tree(os.getpid(), signal.SIGKILL)
        procs.reap(block=False)
        if os.WIFSIGNALED(self.wait_status):
            sig = os.WTERMSIG(self.wait_status)
            code = 128 + sig
        else:
            sig, code = 0, os.WEXITSTATUS(self.wait_status)
        out, err = self.io.stream("stdout"), self.io.stream("stderr")
        status = self._status(code, sig)
        status.update(
            {
                "stdout_bytes": out.total,
                "stderr_bytes": err.total,
                "truncated": out.truncated or err.truncated,
                "disk_error": out.disk_error or err.disk_error,
            }
        )
        self._to_finished(status)

    def _to_finished(self, status: Status) -> None:
        self.state = FINISHED
        self.outcome = OUTCOMES.get(self.reason, "killed")
        body = wire.encode(status)
        self.rundir.write_status(body)  # first: the outcome is kept even if the daemon never reads the rest
        self.host.finish(wire.frame(wire.MESSAGE, body))

    def _status(self, code: int, sig: int) -> Status:
        return {
            "type": "finished",
            "run_id": self.run_id,
            "started_at": self.started,
            "exit": code,
            "signal": sig,
            "reason": self.reason,
            "stdout_bytes": 0,
            "stderr_bytes": 0,
            "truncated": False,
            "finished_at": time.time(),
        }

    def _kill(self, sig: int, why: str | None) -> None:
        """Signal the run's whole tree; the first reason given is the run's."""
        if self.reason is None and why is not None:
            self.reason = why
        procs.kill_tree(os.getpid(), sig)

    # -- one turn of the loop (RUNNING or DRAINING) -----------------------------------

    def _step(self) -> None:
        now = time.monotonic()
        if self.host.held:  # the daemon is behind: the command waits, which is neither idle nor done
            self.last_output = now
            if self.state == DRAINING:
                self.exited_at = now  # what is left in the pipes is read once the daemon catches up
        watch = [] if self.host.held else list(self.open)
        if self.state == RUNNING:
            watch.append(self.pidfd)
        if self.host.sock is not None and self.input.accepting:
            watch.append(self.host.fd)
        wlist = [self.input.fd] if self.input.writing and self.input.fd is not None else []
        if self.host.sock is not None and self.host.sendq:
            wlist.append(self.host.fd)
        ready, writable, _ = select.select(watch, wlist, [], self._sleep(now))
        if self.host.sock is not None and self.host.fd in writable:
            self.host.send_some()
        if self.input.fd is not None and self.input.fd in writable:
            self.input.write_some()
        self.input.settle()
        for fd in ready:
            if fd in self.io.sinks:
                self._on_output(fd)
            elif fd == self.host.fd:
                self._on_host()
        gone = procs.ended(self._pid, self.pidfd) if self.pidfd_is_pipe else self.pidfd in ready
        if self.state == RUNNING and (gone or self._pid in procs.REAPED):
            self._exited()
        self._check_clocks()
        if self.state == DRAINING and (not self.open or time.monotonic() >= self.exited_at + GRACE):
            self._finish()  # every pipe at its end, or descendants still hold them: over all the same

    @property
    def _pid(self) -> int:
        return self.pid or -1

    def _sleep(self, now: float) -> float:
        waits = [TICK]
        if self.deadline is not None and self.reason is None:
            waits.append(self.deadline - time.time())
        if self.idle and self.reason is None:
            waits.append(self.last_output + self.idle - now)
        if self.state == DRAINING:
            waits.append(self.exited_at + GRACE - now)
        return max(0.0, min(waits))

    def _check_clocks(self) -> None:
        if self.state == RUNNING and self.reason is None:
            if self.deadline is not None and time.time() >= self.deadline:
                self._kill(signal.SIGKILL, "timeout")
            elif self.idle and time.monotonic() - self.last_output >= self.idle:
                self._kill(signal.SIGKILL, "idle_timeout")
        elif self.state == DRAINING and self.open and self.deadline is not None and time.time() >= self.deadline:
            procs.kill_tree(os.getpid(), signal.SIGKILL)  # descendants still writing past the deadline

    def _on_output(self, fd: int) -> None:
        try:
            data = os.read(fd, CHUNK)
        except OSError:  # EIO: the terminal's other side is gone
            data = b""
        if data:
            self.last_output = time.monotonic()
            self._deliver(fd, self.redactor.feed(fd, data))
        else:
            self.open.discard(fd)
            self._deliver(fd, self.redactor.flush(fd))

    def _deliver(self, fd: int, data: bytes) -> None:
        if not data:
            return
        sink = self.io.sinks[fd]
        sink.write(data)
        if self.live and self.host.sock is not None:
            self.host.queue_output(sink.name, sink.live(data))

    def _on_host(self) -> None:
        frames = self.host.receive()
        if frames is None:  # the daemon went away
            self._on_host_gone()
            return
        for kind, body in frames:
            if kind == wire.STDIN:
                self.input.add(body)
            elif kind == wire.MESSAGE:
                try:
                    self._on_message(wire.decode(body))
                except (ValueError, KeyError, TypeError):  # not the protocol: as if the daemon went away
                    self.host.drop()
                    self._on_host_gone()
                    return

    def _on_host_gone(self) -> None:
        # a terminal, or input still open, hangs up with the daemon that fed it; an interactive
        # run whose input was closed needs nothing from it and goes on, like a background run
        # (a daemon restart adopts it: the E2B API's commands without stdin)
        if self.io.interactive and self.state == RUNNING and (self.io.tty or not self.input.eof_asked):
            self._kill(signal.SIGHUP, None)  # like a terminal hanging up

    def _on_message(self, msg: Any) -> None:
        kind = msg["type"]
        if kind == "eof":
            self.input.eof()
        elif kind == "resize":
            self.input.resize(int(msg["rows"]), int(msg["cols"]))
        elif kind == "hangup":
            self._kill(signal.SIGHUP, None)  # the client left, like a terminal closing
        elif kind == "signal":
            self._kill(int(msg["signal"]), str(msg.get("reason") or "killed"))
