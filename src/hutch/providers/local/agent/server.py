"""The agent's loop: accept a connection, answer its one request, repeat.

Requests are answered in this process, one at a time, except exec: its connection is
handed to a spare (a supervisor forked ahead of time, so an exec does not wait for a
fork), which owns the run from then on. Everything a workload runs is forked from here,
so it inherits the sandbox's namespaces, dropped capabilities, cgroup and uid.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys

from . import files, procs, wire
from .conn import Connection
from .output import RUNS_DIR, RunDir, Transcript
from .supervisor import Supervisor

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

CONNECT_TIMEOUT = 5.0
PIDS_LIMIT = wire.error(
    "capacity",
    "cannot start a process: the sandbox is at its pids limit",
    "kill runaway processes, or recreate the sandbox with a higher --pids",
)


class Spare:
    """A supervisor forked ahead of time, waiting for its run."""

    def __init__(self, server: socket.socket) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        pid = os.fork()
        if pid == 0:  # never returns
            ours.close()
            self._wait(server, theirs)
        theirs.close()
        self.sock = ours
        self.pid = pid

    @staticmethod
    def _wait(server: socket.socket, theirs: socket.socket) -> None:
        code = 0
        try:
            server.close()
            keep = {theirs.fileno(), Transcript.fd}
            for name in os.listdir("/proc/self/fd"):
                # whatever the agent had open (another run's connection...) is not ours
                if int(name) > 2 and int(name) not in keep:
                    with contextlib.suppress(OSError):
                        os.close(int(name))
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            procs.set_subreaper()
            rundir = RunDir()
            rundir.prepare()
            req, fds = Connection(theirs).first()
            if req is not None:
                theirs.close()
                Supervisor(socket.socket(fileno=fds[0]), req, fds[1], rundir).run()
        except BaseException:  # noqa: BLE001 - whatever it is, it goes to the sandbox's log
            code = 1
            import traceback  # the sandbox's log is bwrap's stderr

            traceback.print_exc()
        finally:
            os._exit(code)

    def hand_over(self, conn: socket.socket, req: Any, stdin_fd: int) -> None:
        socket.send_fds(self.sock, [wire.message(req)], [conn.fileno(), stdin_fd])
        self.sock.close()


class Agent:
    def __init__(self, server: socket.socket) -> None:
        self.server = server
        self.env: dict[str, str] = {}  # the sandbox's environment, sent once by the daemon; never on a command line
        self.secrets: dict[str, str] = {}  # in every run's environment, redacted from its output
        self.listener: socket.socket | None = None  # the egress proxy's port in this network namespace
        self.runs: dict[str, int] = {}  # run id -> supervisor pid, kept across daemon restarts
        self.spare: Spare | None = None
        self.handlers: dict[str, Callable[[Connection, Any], None]] = {
            "ping": lambda conn, _: conn.send(wire.ok(pid=os.getpid(), protocol=wire.PROTOCOL)),
            "configure": self.configure,
            "listen": self.listen,
            "unlisten": self.unlisten,
            "connect": self.connect,
            "runs": lambda conn, _: conn.send(wire.ok(alive=[r for r, pid in self.runs.items() if procs.alive(pid)])),
            "kill": self.kill,
            "ps": lambda conn, _: conn.send(wire.ok(processes=procs.processes())),
            "read": files.read,
            "write": files.write,
            "list": files.listing,
        }

    def new_spare(self) -> None:
        try:
            self.spare = Spare(self.server)
        except OSError:  # EAGAIN at the pids limit: try again at the next exec
            self.spare = None

    def serve(self) -> None:
        while True:
            try:
                sock, _ = self.server.accept()
            except InterruptedError:
                continue
            conn = Connection(sock)
            try:
                self.handle(conn)
            except Exception as exc:  # noqa: BLE001 - one bad request never kills the agent
                with contextlib.suppress(OSError):
                    conn.send(wire.error("internal", str(exc)))
            finally:
                sock.close()
                if self.spare is not None and self.spare.sock.fileno() < 0:  # handed over, not replaced
                    self.new_spare()

    def handle(self, conn: Connection) -> None:
        req, fds = conn.first()
        if req is None:
            return
        if req["type"] == "exec":
            self.exec(conn, req, fds)
            return
        for fd in fds:
            os.close(fd)
        handler = self.handlers.get(req["type"])
        if handler is None:
            conn.send(wire.error("invalid", f"unknown request {req['type']!r}"))
        else:
            handler(conn, req)

    def exec(self, conn: Connection, req: Any, fds: list[int]) -> None:
        try:
            if len(fds) != 1 or not str(req.get("run_id", "")).startswith("run_"):
                conn.send(wire.error("invalid", "exec needs a run id and a stdin descriptor"))
                return
            req["env"] = {**self.env, **self.secrets, **(req.get("env") or {})}
            if req.get("redact") is not None:  # None: this run asked for --no-redact
                req["redact"] = {**self.secrets, **req["redact"]}
            if self.spare is None:
                self.new_spare()
            if self.spare is None:
                conn.send(PIDS_LIMIT)
                return
            self.spare.hand_over(conn.sock, req, fds[0])
            self.runs[req["run_id"]] = self.spare.pid
            self.new_spare()
        finally:
            for fd in fds:
                os.close(fd)

    def configure(self, conn: Connection, req: Any) -> None:
        self.env = dict(req.get("env") or {})
        if "secrets" in req:
            self.secrets = dict(req["secrets"] or {})
        conn.send(wire.ok())

    def listen(self, conn: Connection, req: Any) -> None:
        if self.listener is None:
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", int(req["port"])))
            listener.listen(256)
            self.listener = listener  # kept open: the port stays the proxy's even while the daemon restarts
        socket.send_fds(conn.sock, [wire.message(wire.ok())], [self.listener.fileno()])

    def unlisten(self, conn: Connection, _: Any) -> None:
        if self.listener is not None:
            self.listener.close()
            self.listener = None
        conn.send(wire.ok())

    def connect(self, conn: Connection, req: Any) -> None:
        port = req.get("port")
        if not isinstance(port, int) or not 0 < port < 65536:
            conn.send(wire.error("invalid", f"no such port {port!r}"))
            return
        peer = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            peer.settimeout(CONNECT_TIMEOUT)  # loopback answers at once, unless its backlog is full
            peer.connect(("127.0.0.1", port))
        except OSError as exc:
            peer.close()
            why = "nothing listens there" if isinstance(exc, ConnectionRefusedError) else (exc.strerror or str(exc))
            conn.send(wire.error("unavailable", f"cannot connect to port {port} in the sandbox: {why}"))
            return
        try:
            socket.send_fds(conn.sock, [wire.message(wire.ok())], [peer.fileno()])
        finally:
            peer.close()

    def kill(self, conn: Connection, req: Any) -> None:
        run_id = str(req.get("run_id"))
        sig = int(req.get("signal", signal.SIGKILL))
        pid = self.runs.get(run_id)
        running = pid is not None and procs.alive(pid)
        if pid is not None and running:
            try:  # tells the supervisor the end was asked for (status "killed"), even before it started
                os.makedirs(os.path.join(RUNS_DIR, run_id), exist_ok=True)
                with open(os.path.join(RUNS_DIR, run_id, "killed"), "w") as f:
                    f.write(str(sig))
            except OSError:
                pass
            procs.kill_tree(pid, sig)
        conn.send(wire.ok(was_running=running))


def main() -> None:
    sock_path, ready_fd = sys.argv[1], int(sys.argv[2])
    procs.default_signals()
    # The daemon's umask (077) is no workload's business: files made inside are 0644 and
    # directories 0755, as on any machine (what `hutch pull` brings home keeps them).
    os.umask(0o022)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # supervisors are reaped by the kernel
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(sock_path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(sock_path)
    os.chmod(sock_path, 0o600)
    server.listen(64)
    Transcript.open()
    agent = Agent(server)
    agent.new_spare()
    if ready_fd >= 0:  # (-1: the daemon asks the socket instead: gvisor cannot hand a pipe in)
        os.write(ready_fd, b"ready\n")
        os.close(ready_fd)
    procs.load_prctl()
    agent.serve()
