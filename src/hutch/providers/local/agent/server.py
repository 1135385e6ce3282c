"""The agent's loop: accept a connection on its control socket, answer its one request, repeat.

Runs do not pass through here: a spare (a supervisor forked ahead of time, so an exec does
not wait for a fork) accepts the next connection on the exec socket itself and owns that
run from then on. It tells the agent over its own socketpair when it took a connection
(``A``: the agent forks the next spare at once) and which run it is (``R`` RUN_ID), and
leaves when the agent tells it to retire (``r``: the sandbox's environment or secrets
changed since it was forked). Everything a workload runs is forked from here, so it
inherits the sandbox's namespaces, dropped capabilities, cgroup and uid.
"""

from __future__ import annotations

import os
import select
import sys
import time
from _socket import AF_INET, AF_UNIX, SO_REUSEADDR, SOCK_STREAM, SOL_SOCKET, socketpair
from _socket import socket as Socket  # noqa: N812 - the C type: socket.py (and signal.py) import enum

from . import files, lean, procs, wire
from .conn import Connection, accept, bind, send_fds
from .output import RUNS_DIR, RunDir, Transcript
from .supervisor import Supervisor

TYPE_CHECKING = False  # (the type checker reads signal.py; the agent uses its C module)
if TYPE_CHECKING:
    import signal
    from collections.abc import Callable
    from typing import Any
else:
    import _signal as signal

CONNECT_TIMEOUT = 5.0
KILL_HEAR = 2.0  # how long a kill of a run the agent does not know waits for a spare to name it
SPARE_IDLE = 60.0  # an unused spare leaves after this (configure's spare_idle; 0: never): an idle sandbox holds one process less
PIDS_LIMIT = wire.error(
    "capacity",
    "cannot start a process: the sandbox is at its pids limit",
    "kill runaway processes, or recreate the sandbox with a higher --pids",
)
TOOK, RUN, RETIRE = b"A", b"R", b"r"


def _take_exec(conn: Connection, env: dict[str, str], secrets: dict[str, str]) -> tuple[Any, int] | None:
    """The exec request that opens ``conn`` (with the sandbox's environment and secrets put
    in), and its stdin; None, answered, when it is something else."""
    req, fds = conn.first()
    if req is None:
        return None
    if req.get("type") != "exec" or len(fds) != 1 or not str(req.get("run_id", "")).startswith("run_"):
        for fd in fds:
            os.close(fd)
        conn.send(wire.error("invalid", "the exec socket takes exec requests with a run id and a stdin descriptor"))
        return None
    req["own_env"] = list(req.get("env") or {})
    req["env"] = {**env, **secrets, **(req.get("env") or {})}
    if req.get("redact") is not None:  # None: this run asked for --no-redact
        req["redact"] = {**secrets, **req["redact"]}
    return req, fds[0]


class Spare:
    """A supervisor forked ahead of time, waiting on the exec socket for its run."""

    def __init__(self, agent: Agent, given: tuple[Socket, bytes, int] | None = None) -> None:
        ours, theirs = socketpair(AF_UNIX, SOCK_STREAM)
        pid = os.fork()
        if pid == 0:  # never returns
            ours.close()
            self._wait(agent, theirs, given)
        theirs.close()
        if given is not None:  # the child's now
            given[0].close()
            os.close(given[2])
        self.sock = ours
        self.pid = pid
        self.took = given is not None  # it accepted a connection (or was given one): no longer the spare

    @staticmethod
    def _wait(agent: Agent, ctl: Socket, given: tuple[Socket, bytes, int] | None) -> None:
        """Wait for a run on the exec socket and supervise it; ``given``: a connection the idle helper
        accepted and read (what it read, and the stdin descriptor that came with it)."""
        code = 0
        try:
            listener = agent.exec_listener
            keep = {ctl.fileno(), listener.fileno(), Transcript.fd}
            if given is not None:
                keep |= {given[0].fileno(), given[2]}
            for name in os.listdir("/proc/self/fd"):
                # whatever the agent had open (its control socket, other spares' links...) is not ours
                if int(name) > 2 and int(name) not in keep:
                    with wire.ignoring(OSError):
                        os.close(int(name))
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            procs.set_subreaper()
            rundir = RunDir()
            if given is None:
                rundir.prepare()
                sock = Spare._accept(listener, ctl)
                if sock is None:  # retired
                    rundir.drop()
                    return
                conn = Connection(sock)
            else:
                sock, pending, stdin = given
                conn = Connection(sock, pending, [stdin])
            listener.close()
            ctl.setblocking(True)
            with wire.ignoring(OSError):  # (the agent gone: the run goes on)
                ctl.sendall(TOOK)
            sock.setblocking(True)
            got = _take_exec(conn, agent.env, agent.secrets)
            if got is None:
                rundir.drop()
                return
            req, stdin_fd = got
            with wire.ignoring(OSError):
                ctl.sendall(RUN + req["run_id"].encode() + b"\n")
            ctl.close()
            Supervisor(sock, req, stdin_fd, rundir).run()
        except BaseException:  # noqa: BLE001 - whatever it is, it goes to the sandbox's log
            code = 1
            import traceback  # the sandbox's log is bwrap's stderr

            traceback.print_exc()
        finally:
            os._exit(code)

    @staticmethod
    def _accept(listener: Socket, ctl: Socket) -> Socket | None:
        """The next connection on the exec socket; None when the agent retires this spare first."""
        ctl.setblocking(False)
        poller = select.poll()
        poller.register(listener, select.POLLIN)
        poller.register(ctl, select.POLLIN)
        while True:
            poller.poll()
            try:  # the agent's word first: a retired spare never takes a connection
                ctl.recv(16)  # RETIRE, or b"": the agent is gone
                return None
            except BlockingIOError:
                pass
            try:
                return accept(listener)
            except (BlockingIOError, InterruptedError):
                continue  # another spare took it


class Agent:
    def __init__(self, server: Socket, exec_listener: Socket) -> None:
        self.server = server
        self.exec_listener = exec_listener  # non-blocking: spares (and the agent, without one) race for it
        self.env: dict[str, str] = {}  # the sandbox's environment, sent once by the daemon; never on a command line
        self.secrets: dict[str, str] = {}  # in every run's environment, redacted from its output
        self.configured = False
        self.listener: Socket | None = None  # the egress proxy's port in this network namespace
        self.relay = 0  # gvisor: the pid of the relay carrying that port's connections to the daemon (relay.py)
        self.runs: dict[str, int] = {}  # run id -> supervisor pid, kept across daemon restarts
        self.spare: Spare | None = None  # the one waiting on the exec socket
        self.spare_since = 0.0  # when it was forked (monotonic)
        self.spare_idle = SPARE_IDLE
        self.links: dict[int, Spare] = {}  # socketpair fd -> spare (waiting, or started and not yet named its run)
        self.leans = lean.possible(sys.argv)  # started by the idle helper: gives its place back when idle (lean.py)
        self.hold = True  # configure's hold: false keeps it awake (a pool member, until it is handed out)
        self.active = time.monotonic()  # the last run taken or request the helper could not have answered
        self.handlers: dict[str, Callable[[Connection, Any], None]] = {
            "ping": lambda conn, _: conn.send(wire.ok(pid=os.getpid(), protocol=wire.PROTOCOL)),
            "wake": lambda conn, _: conn.send(wire.ok()),  # (the idle helper execs the agent for it)
            "configure": self.configure,
            "listen": self.listen,
            "unlisten": self.unlisten,
            "connect": self.connect,
            "runs": self.alive_runs,
            "kill": self.kill,
            "ps": lambda conn, _: conn.send(wire.ok(processes=procs.processes())),
            "read": files.read,
            "write": files.write,
            "list": files.listing,
        }

    def new_spare(self) -> None:
        try:
            spare = Spare(self)
        except OSError:  # EAGAIN at the pids limit: try again at the next exec
            self.spare = None
            return
        self.spare, self.spare_since = spare, time.monotonic()
        self.links[spare.sock.fileno()] = spare

    def retire(self) -> None:
        """The spare leaves without taking a connection (one that raced this is its run)."""
        if self.spare is not None:
            with wire.ignoring(OSError):
                self.spare.sock.send(RETIRE)
            self.spare = None

    def from_spare(self, spare: Spare) -> None:
        """A spare's word: it took a connection, which run it is, or it is gone."""
        try:
            data = spare.sock.recv(4096)
        except OSError:
            data = b""
        gone = not data
        if data.startswith(TOOK):
            spare.took, data = True, data[1:]
            self.active = time.monotonic()
            if self.spare is spare:
                self.new_spare()  # the next one is forked while this one's run starts
        if data.startswith(RUN):
            self.runs[data[1:].split(b"\n")[0].decode()] = spare.pid
        if gone or data.startswith(RUN):
            del self.links[spare.sock.fileno()]
            spare.sock.close()
            if self.spare is spare:  # died waiting: another one
                self.new_spare()

    def hear_spares(self, wait: float) -> None:
        """Take every word the spares have sent; wait up to ``wait`` seconds for those that
        took a connection to name its run (a kill may come right after an exec)."""
        end = time.monotonic() + wait
        while self.links:
            busy = any(s.took for s in self.links.values())
            poller = select.poll()
            for fd in self.links:
                poller.register(fd, select.POLLIN)
            ready = poller.poll(max(0.0, end - time.monotonic()) * 1000 if busy else 0)
            if not ready:
                return
            for fd, _ in ready:
                if fd in self.links:
                    self.from_spare(self.links[fd])

    def serve(self) -> None:
        poller = select.poll()
        watched: set[int] = set()
        while True:
            want = {self.server.fileno(), *self.links}
            if self.spare is None:  # nobody waits on the exec socket: the agent answers it
                want.add(self.exec_listener.fileno())
            for fd in watched - want:
                poller.unregister(fd)
            for fd in want - watched:
                poller.register(fd, select.POLLIN)
            watched = want
            timeout = None  # an unused spare leaves at spare_idle: the next exec forks one (exec_without_spare)
            if self.spare is not None and self.spare_idle > 0:
                timeout = max(0.0, self.spare_since + self.spare_idle - time.monotonic()) * 1000
            elif self.spare is None and self.leans and self.hold and self.spare_idle > 0:  # then the agent itself (lean.py)
                timeout = max(0.0, self.active + self.spare_idle - time.monotonic()) * 1000
            ready = {fd for fd, _ in poller.poll(timeout)}
            if not ready and self.spare is not None and time.monotonic() >= self.spare_since + self.spare_idle:
                self.retire()
            elif not ready and self.spare is None and timeout is not None and time.monotonic() >= self.active + self.spare_idle:
                self.go_lean()
            for fd in ready & set(self.links):  # spares first: ``runs`` and ``kill`` then know their runs
                self.from_spare(self.links[fd])
            if self.exec_listener.fileno() in ready and self.spare is None:
                self.exec_without_spare()
            if self.server.fileno() in ready:
                self.accept()

    def go_lean(self) -> None:
        """Give the place back to the idle helper, when no run or spare is alive (else: later)."""
        self.active = time.monotonic()
        if self.links or self.relay or any(procs.alive(pid) for pid in self.runs.values()):
            return
        config = {"type": "configure", "env": self.env, "secrets": self.secrets, "spare_idle": self.spare_idle}
        listener = self.listener.fileno() if self.listener is not None else -1
        with wire.ignoring(wire.WireError):  # a configuration over a frame: the agent stays
            lean.back((self.server.fileno(), self.exec_listener.fileno(), listener), config if self.configured else None)
        self.leans = False  # (back returned: it could not)

    def accept(self) -> None:
        try:
            sock = accept(self.server)
        except (BlockingIOError, InterruptedError):
            return
        self.answer(sock)

    def answer(self, sock: Socket, pending: bytes = b"") -> None:
        sock.setblocking(True)
        conn = Connection(sock, pending)
        try:
            self.handle(conn)
        except Exception as exc:  # noqa: BLE001 - one bad request never kills the agent
            with wire.ignoring(OSError):
                conn.send(wire.error("internal", str(exc)))
        finally:
            sock.close()

    def exec_without_spare(self) -> None:
        """An exec is waiting and no spare: fork one (it takes the connection); at the pids
        limit, answer it here."""
        self.new_spare()
        if self.spare is not None:
            return
        try:
            sock = accept(self.exec_listener)
        except (BlockingIOError, InterruptedError):
            return
        sock.setblocking(True)
        try:
            conn = Connection(sock)
            got = _take_exec(conn, self.env, self.secrets)
            if got is not None:
                os.close(got[1])
                conn.send(PIDS_LIMIT)
        except Exception:  # noqa: BLE001 - one bad request never kills the agent
            pass
        finally:
            sock.close()

    def handle(self, conn: Connection) -> None:
        req, fds = conn.first()
        if req is None:
            return
        for fd in fds:
            os.close(fd)
        handler = self.handlers.get(req["type"])
        if req["type"] not in ("ping", "configure", "runs", "listen", "unlisten"):  # what the idle helper answers too
            self.active = time.monotonic()
        if req["type"] == "exec":
            conn.send(
                wire.error(
                    "conflict",
                    f"this sandbox's agent speaks protocol {wire.PROTOCOL}: runs start on its exec socket",
                    "the daemon is of an older hutch: upgrade it, or destroy the sandbox",
                )
            )
        elif handler is None:
            conn.send(wire.error("invalid", f"unknown request {req['type']!r}"))
        else:
            handler(conn, req)

    def configure(self, conn: Connection, req: Any) -> None:
        changed = self.apply(req)
        if changed:  # the spare was forked with the old ones: it goes before the answer, its successor after
            self.retire()
        conn.send(wire.ok())
        if self.spare is None:
            self.new_spare()

    def apply(self, req: Any) -> bool:
        """A ``configure``'s settings (also those the idle helper kept); whether env or secrets changed."""
        env = dict(req.get("env") or {})
        secrets = dict(req["secrets"] or {}) if "secrets" in req else self.secrets
        changed = not self.configured or (env, secrets) != (self.env, self.secrets)
        self.env, self.secrets, self.configured = env, secrets, True
        if isinstance(req.get("spare_idle"), (int, float)):
            self.spare_idle = float(req["spare_idle"])
        self.hold = req.get("hold") is not False
        return changed

    def take_over(self, state: int, conn: int, pending: int, listener: int, stdin: int = -1, alive: int = -1) -> None:
        """Carry on from the idle helper (hold.c), which execve'd this agent in its place: the
        configures it answered, the proxy's listener it made, the request it read and handed over
        (``stdin``: an exec's, which a spare takes), the runs its own supervisors still hold."""
        if alive >= 0:  # "RUN_ID PID" lines: those supervisors are this process's children
            with os.fdopen(alive, "rb") as f:
                f.seek(0)
                for line in f.read().decode().splitlines():
                    run_id, _, pid = line.partition(" ")
                    self.runs[run_id] = int(pid)
        with os.fdopen(state, "rb") as f:
            f.seek(0)
            reader = wire.Reader()
            reader.feed(f.read())
        while (frame := reader.next()) is not None:
            self.apply(wire.decode(frame[1]))
        if listener >= 0:
            self.listener = Socket(fileno=listener)
            os.set_inheritable(listener, False)
        data = b""
        if conn >= 0:
            with os.fdopen(pending, "rb") as f:
                f.seek(0)
                data = f.read()
            os.set_inheritable(conn, False)
        if stdin >= 0 and conn >= 0:  # an exec the helper could not supervise itself
            os.set_inheritable(stdin, False)
            taken = Spare(self, (Socket(fileno=conn), data, stdin))
            self.links[taken.sock.fileno()] = taken
            self.active = time.monotonic()
        if self.configured:
            self.new_spare()  # (an exec that woke the helper before it took runs waits in the backlog for it)
        if conn >= 0 and stdin < 0:
            self.answer(Socket(fileno=conn), data)

    def listen(self, conn: Connection, req: Any) -> None:
        if self.listener is None:
            listener = Socket(AF_INET, SOCK_STREAM)
            listener.setsockopt(SOL_SOCKET, SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", int(req["port"])))
            listener.listen(256)
            self.listener = listener  # kept open: the port stays the proxy's even while the daemon restarts
        forward = req.get("forward")
        if not forward:
            send_fds(conn.sock, wire.message(wire.ok()), [self.listener.fileno()])
            return
        if not (self.relay and procs.alive(self.relay)):
            links = [spare.sock for spare in self.links.values()]  # a spare sees EOF when the agent dies
            from . import relay  # (gvisor only: it loads threading)

            self.relay = relay.start(self.listener, str(forward), [self.server, self.exec_listener, conn.sock, *links])
        conn.send(wire.ok())

    def unlisten(self, conn: Connection, _: Any) -> None:
        if self.relay:
            with wire.ignoring(ProcessLookupError):
                os.kill(self.relay, signal.SIGKILL)  # its copy of the port goes with it: connections are refused
            self.relay = 0
        if self.listener is not None:
            self.listener.close()
            self.listener = None
        conn.send(wire.ok())

    def connect(self, conn: Connection, req: Any) -> None:
        port = req.get("port")
        if not isinstance(port, int) or not 0 < port < 65536:
            conn.send(wire.error("invalid", f"no such port {port!r}"))
            return
        peer = Socket(AF_INET, SOCK_STREAM)
        try:
            peer.settimeout(CONNECT_TIMEOUT)  # loopback answers at once, unless its backlog is full
            peer.connect(("127.0.0.1", port))
        except OSError as exc:
            peer.close()
            why = "nothing listens there" if isinstance(exc, ConnectionRefusedError) else (exc.strerror or str(exc))
            conn.send(wire.error("unavailable", f"cannot connect to port {port} in the sandbox: {why}"))
            return
        try:
            send_fds(conn.sock, wire.message(wire.ok()), [peer.fileno()])
        finally:
            peer.close()

    def alive_runs(self, conn: Connection, _: Any) -> None:
        self.hear_spares(0)
        conn.send(wire.ok(alive=[r for r, pid in self.runs.items() if procs.alive(pid)]))

    def kill(self, conn: Connection, req: Any) -> None:
        run_id = str(req.get("run_id"))
        sig = int(req.get("signal", signal.SIGKILL))
        if run_id not in self.runs:  # its spare may not have named it yet
            self.hear_spares(KILL_HEAR)
        pid = self.runs.get(run_id)
        running = pid is not None and procs.alive(pid)
        ahead = pid is None and not os.path.exists(os.path.join(RUNS_DIR, run_id, "status"))
        if running or ahead:
            # Tells the supervisor the end was asked for (status "killed"), even before it
            # started: also for a run not here yet (the daemon records a run before its
            # request reaches the sandbox; on a busy machine a kill can come first), whose
            # supervisor finds this as it starts the command and kills it at once.
            try:
                os.makedirs(os.path.join(RUNS_DIR, run_id), exist_ok=True)
                with open(os.path.join(RUNS_DIR, run_id, "killed"), "w") as f:
                    f.write(str(sig))
            except OSError:
                ahead = False
        if pid is not None and running:
            procs.kill_tree(pid, sig)
        conn.send(wire.ok(was_running=running or ahead))


def main() -> None:
    sock_path, ready_fd = sys.argv[1], int(sys.argv[2])
    procs.default_signals()
    # The daemon's umask (077) is no workload's business: files made inside are 0644 and
    # directories 0755, as on any machine (what `hutch pull` brings home keeps them).
    os.umask(0o022)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # supervisors are reaped by the kernel
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    given = sys.argv[3] if len(sys.argv) > 3 else ""
    held = [int(x) for x in given[7:].split(",")] if given.startswith("--held=") else []
    if held:  # the idle helper's sockets: AGENT,EXEC,STATE,CONN,PENDING,LISTENER[,STDIN,RUNS] (-1: none)
        for fd in held[:2]:
            os.set_inheritable(fd, False)
        server, exec_listener = Socket(fileno=held[0]), Socket(fileno=held[1])
        server.setblocking(True)
    else:
        server, exec_listener = bind(sock_path), bind(os.path.join(os.path.dirname(sock_path), wire.EXEC_SOCKET))
    exec_listener.setblocking(False)
    Transcript.open()
    agent = Agent(server, exec_listener)  # its first spare comes with the sandbox's environment (configure)
    if ready_fd >= 0:  # (-1: the daemon asks the socket instead: gvisor cannot hand a pipe in)
        os.write(ready_fd, b"ready\n")
        os.close(ready_fd)
    if held:  # first: the run that woke the helper waits (the spare loads ctypes itself, after its fork)
        agent.take_over(*held[2:])
    procs.load_prctl()
    import subprocess  # noqa: F401 - then: spares forked from here on start commands with Popen (spawn.start)

    agent.serve()
