"""The in-sandbox agent: PID 2 of every local sandbox.

It runs *inside* the bwrap sandbox, under the sandbox's own python3 with ``-I -S``, so it
must use the standard library only and must never import hutch. It listens on a unix
socket in ``/.hutch/ctl`` (a directory bound from the host). Each connection carries one
request: a JSON header line, optionally followed by a binary payload, with file
descriptors attached (SCM_RIGHTS) for exec. Everything a workload runs is forked from
here, so it inherits the sandbox's namespaces, dropped capabilities, cgroup and uid.

Exec: the agent forks a *supervisor* per run. The supervisor becomes a child subreaper,
forks the command in a new session with the received stdin/stdout/stderr, reports
``{"pid": N}`` then ``{"exit": code, "signal": sig}``. A ``{"kill": SIG}`` line from the
host kills the run's whole tree (including ``setsid`` descendants, which the subreaper
inherits) and is how timeouts are enforced.
"""

import errno
import marshal
import os
import select
import signal
import socket
import stat
import subprocess
import sys
import time

MAX_HEADER = 1 << 20
BASE_ENV = {}  # the sandbox's environment, sent once by the host; never on any command line
SECRETS = {}  # the sandbox's secrets (name -> value): in every run's environment, redacted from output
LISTEN = {}  # the egress proxy's listening socket in this network namespace (the daemon accepts on it)
MIN_REDACT = 4  # shorter secret values are not searched for in output (they would match everywhere)
CHUNK = 1 << 16


# Host -> agent: frames of a 4-byte length and marshal (version 2: plain values only;
# built in, so the agent starts without importing json, which costs ~12 ms).
# Agent -> host: JSON lines, which the host parses with a real JSON parser.

_ESC = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _str(s):
    return '"' + "".join(_ESC.get(c) or ("\\u%04x" % ord(c) if c < " " or "\ud800" <= c <= "\udfff" else c) for c in s) + '"'


def dumps(obj):
    if obj is None or obj is True or obj is False:
        return {None: "null", True: "true", False: "false"}[obj]
    if isinstance(obj, (int, float)):
        return repr(obj)
    if isinstance(obj, str):
        return _str(obj)
    if isinstance(obj, dict):
        return "{" + ",".join(_str(str(k)) + ":" + dumps(v) for k, v in obj.items()) + "}"
    if isinstance(obj, (list, tuple)):
        return "[" + ",".join(dumps(v) for v in obj) + "]"
    return _str(str(obj))


def send_json(conn, obj, payload=b""):
    conn.sendall(dumps(obj).encode("utf-8", "surrogatepass") + b"\n" + payload)


def frame(obj):
    data = marshal.dumps(obj, 2)
    return len(data).to_bytes(4, "big") + data


def take_frame(buf):
    """(message, rest) when ``buf`` holds a whole frame, else (None, buf)."""
    if len(buf) < 4:
        return None, buf
    size = int.from_bytes(buf[:4], "big")
    if size > MAX_HEADER:
        raise ValueError("header too large")
    if len(buf) < 4 + size:
        return None, buf
    return marshal.loads(bytes(buf[4 : 4 + size])), bytes(buf[4 + size :])


def recv_header(conn, first, fds_out):
    buf = bytes(first)
    while True:
        msg, rest = take_frame(buf)
        if msg is not None:
            return msg, rest
        data = conn.recv(CHUNK)
        if not data:
            raise ValueError("connection closed before header")
        buf += data


def recv_exact(conn, rest, size):
    out = bytearray(rest[:size])
    while len(out) < size:
        data = conn.recv(min(CHUNK, size - len(out)))
        if not data:
            raise ValueError("connection closed during payload")
        out += data
    return bytes(out)


HINTS = {
    "not_found": "list the directory with: hutch ls SANDBOX PATH",
    "permission_denied": "write under /workspace, /tmp or HOME; the rest of the sandbox is read-only",
    "capacity": "free space: /workspace shares the disk of HUTCH_HOME, /tmp and HOME are small tmpfs",
}


def err(kind, message):
    body = {"kind": kind, "message": message}
    if kind in HINTS:
        body["hint"] = HINTS[kind]
    return {"error": body}


def os_error(exc, path):
    kind = {
        errno.ENOENT: "not_found",
        errno.ENOTDIR: "not_found",
        errno.EACCES: "permission_denied",
        errno.EPERM: "permission_denied",
        errno.EROFS: "permission_denied",
        errno.EISDIR: "invalid",
        errno.ENOSPC: "capacity",
        errno.EDQUOT: "capacity",
    }.get(exc.errno, "internal")
    return err(kind, "%s: %s" % (path, exc.strerror))


# -- process tree handling -------------------------------------------------------------


def children_map():
    kids = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as f:
                data = f.read()
        except OSError:
            continue
        ppid = int(data[data.rindex(b")") + 2 :].split()[1])
        kids.setdefault(ppid, []).append(int(name))
    return kids


def descendants(root):
    kids = children_map()
    out, todo = [], [root]
    while todo:
        for child in kids.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def kill_tree(root, sig):
    """Signal every descendant of ``root``; with SIGKILL, repeat until none is left."""
    for _ in range(200):
        pids = descendants(root)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        if sig != signal.SIGKILL:
            return
        reap(block=False)
        select.select([], [], [], 0.002)


REAPED = {}  # pid -> wait status, for children reaped while sweeping orphans


def reap(block):
    while True:
        try:
            pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        REAPED[pid] = status


def wait_for(pid):
    if pid in REAPED:
        return REAPED.pop(pid)
    try:
        return os.waitpid(pid, 0)[1]
    except ChildProcessError:
        return REAPED.pop(pid, 9)


def _load_prctl():
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except Exception:  # ctypes missing: tree kill then only reaches attached descendants
        return None


PRCTL = {}


def set_subreaper():
    # ctypes costs ~8 ms to import: the agent loads it once it is ready (spares forked
    # later inherit it); the very first spare loads it itself, after its fork
    if "fn" not in PRCTL:
        PRCTL["fn"] = _load_prctl()
    if PRCTL["fn"] is not None:
        PRCTL["fn"](36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


# -- exec ------------------------------------------------------------------------------


RUNS_DIR = "/.hutch/runs"
RUNS = {}  # run id -> supervisor pid, kept by the agent across daemon restarts
GRACE = 0.25  # after the command exits, how long its descendants may hold the pipes
SEND_BUFFER = 1 << 20  # live output queued for the host before the run's pipes stop being read (backpressure)
INPUT_BUFFER = 1 << 20  # input from the host held for the command before the host's frames stop being read


def prepare_supervisor():
    """What a supervisor does before its request arrives (done while the spare waits)."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    set_subreaper()


class Redactor:
    """Replaces secret values in output with [redacted:NAME] before it is kept or sent.

    A value split across two reads is still found: the end of a chunk that could be the
    start of a secret is held back until the next read (or the end of the stream).
    """

    def __init__(self, secrets):
        pairs = [(v.encode(), ("[redacted:%s]" % n).encode()) for n, v in secrets.items() if len(v) >= MIN_REDACT]
        self.pairs = sorted(pairs, key=lambda p: -len(p[0]))
        self.held = {}

    def feed(self, key, data):
        if not self.pairs:
            return data
        buf = self.held.pop(key, b"") + data
        for value, mark in self.pairs:
            buf = buf.replace(value, mark)
        keep = 0
        for value, _ in self.pairs:
            for k in range(min(len(value) - 1, len(buf)), keep, -1):
                if buf.endswith(value[:k]):
                    keep = k
                    break
        if keep:
            self.held[key] = buf[-keep:]
            buf = buf[:-keep]
        return buf

    def flush(self, key):
        return self.held.pop(key, b"")


class Sink:
    """One output stream: a capped file on disk, the sandbox transcript, the live host.

    Files are opened at the first byte: a command that prints nothing costs no file.
    """

    def __init__(self, name, run_id, rdir, cap, live_limit):
        self.name, self.run_id, self.rdir, self.cap = name, run_id, rdir, cap
        self.live_limit = live_limit  # None: everything goes to the host live
        self.total = 0
        self.disk_error = None
        self.fd = -1  # -1: not opened yet; None: cannot write

    def _open(self):
        try:
            os.makedirs(self.rdir, exist_ok=True)
            self.fd = os.open(os.path.join(self.rdir, self.name), os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        except OSError as exc:  # a full disk: the run goes on, its output only streamed live
            self.fd, self.disk_error = None, exc.strerror

    def write(self, data):
        room = self.cap - self.total
        self.total += len(data)
        if self.fd == -1:
            self._open()
        if room <= 0 or self.fd is None:
            return
        kept = data[:room]
        try:
            os.write(self.fd, kept)
            transcript = TRANSCRIPT.get("fd")
            if transcript is not None:
                head = ("%s %s %08x\n" % (self.run_id, self.name[3], len(kept))).encode()
                os.write(transcript, head + kept)  # one O_APPEND write: never interleaved
        except OSError as exc:
            self.fd, self.disk_error = None, exc.strerror

    def live(self, data):
        """The part of ``data`` the host wants live."""
        if self.live_limit is None:
            return data
        sent = self.total - len(data)
        return data[: max(0, self.live_limit - sent)]

    @property
    def truncated(self):
        return self.total > self.cap


TRANSCRIPT = {}  # the sandbox transcript's descriptor, opened once by the agent (spares inherit it)


def open_transcript():
    try:
        TRANSCRIPT["fd"] = os.open(os.path.join(RUNS_DIR, "transcript"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    except OSError:
        TRANSCRIPT["fd"] = None


def write_status(rdir, status):
    tmp = os.path.join(rdir, ".status.tmp")
    try:
        os.makedirs(rdir, exist_ok=True)
        with open(tmp, "w") as f:
            f.write(dumps(status))
        os.replace(tmp, os.path.join(rdir, "status"))
    except OSError:
        pass  # a full disk: the host still hears the status over the connection


def set_winsize(fd, rows, cols):
    import fcntl
    import struct
    import termios

    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", int(rows), int(cols), 0, 0))


def take_terminal():
    """In the child, after setsid: make the pty on stdin the controlling terminal."""
    import fcntl
    import termios

    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def spawn_failure(exc, program, cwd):
    """(exit code, message) for a command that could not start: 127 not found, 126 cannot run."""
    reason = (exc.strerror or str(exc)).lower()
    if exc.filename == cwd and exc.filename != program:
        if isinstance(exc, FileNotFoundError):
            return 126, "working directory %s does not exist" % cwd
        if isinstance(exc, NotADirectoryError):
            return 126, "working directory %s is not a directory" % cwd
        return 126, "cannot enter working directory %s: %s" % (cwd, reason)
    if isinstance(exc, FileNotFoundError):
        if "/" in program and os.path.exists(os.path.join(cwd, program)):
            return 126, "cannot run %s: its interpreter (the #! line) was not found" % program
        return 127, "command not found: %s" % program
    if isinstance(exc, PermissionError):
        return 126, "cannot run %s: permission denied (not executable?)" % program
    return 126, "cannot run %s: %s" % (program, reason)


def supervise(conn, req, fds):
    """Runs in a (pre-)forked child of the agent; owns one run until it ends.

    The command's stdout and stderr come here through pipes and go to files under
    /.hutch/runs/RUN (and the sandbox transcript), capped, and, while the host listens,
    to the host as frames. Wall and idle-output timeouts are enforced here, so they hold
    even when the daemon is gone.
    """
    stdin_fd = fds[0]
    run_id = req["run_id"]
    rdir = os.path.join(RUNS_DIR, run_id)
    cap = int(req.get("disk_cap", 64 << 20))
    live_limit = req.get("live_limit")
    sinks = {}
    child_ends = []  # the child's ends of pipes / the pty, closed here once it runs
    feed_fd = None  # where input from the host goes (interactive runs)
    tty = bool(req.get("tty"))
    interactive = tty or bool(req.get("interactive"))
    if tty:
        master, slave = os.openpty()
        set_winsize(slave, req.get("rows") or 24, req.get("cols") or 80)
        sinks[master] = Sink("stdout", run_id, rdir, cap, live_limit)  # a terminal merges the streams
        io = {"stdin": slave, "stdout": slave, "stderr": slave}
        child_ends.append(slave)
        feed_fd = master
    else:
        io = {"stdin": stdin_fd}
        for name in ("stdout", "stderr"):
            r, w = os.pipe2(os.O_CLOEXEC)
            sinks[r] = Sink(name, run_id, rdir, cap, live_limit)
            io[name] = w
            child_ends.append(w)
        if interactive:
            r, w = os.pipe2(os.O_CLOEXEC)
            io["stdin"] = r
            child_ends.append(r)
            feed_fd = w
    if feed_fd is not None:
        os.set_blocking(feed_fd, False)
    live = bool(req.get("stream", True))
    redactor = Redactor(req.get("redact") or {})
    started = time.time()
    status = {"run_id": run_id, "started_at": started}
    try:
        proc = subprocess.Popen(
            req["argv"],
            stdin=io["stdin"],
            stdout=io["stdout"],
            stderr=io["stderr"],
            cwd=req.get("cwd") or "/workspace",
            env=req.get("env") or {},
            start_new_session=True,
            close_fds=True,
            restore_signals=True,
            preexec_fn=take_terminal if tty else None,
        )
    except OSError as exc:
        code, message = spawn_failure(exc, req["argv"][0], req.get("cwd") or "/workspace")
        status.update(
            {
                "exit": code,
                "signal": 0,
                "spawn_error": message,
                "reason": "spawn",
                "stdout_bytes": 0,
                "stderr_bytes": 0,
                "truncated": False,
                "finished_at": time.time(),
            }
        )
        write_status(rdir, status)
        send_json(conn, status)
        return
    finally:
        os.close(stdin_fd)
        for fd in child_ends:
            os.close(fd)
    send_json(conn, {"pid": proc.pid})
    pidfd = os.pidfd_open(proc.pid)
    timeout = req.get("timeout")
    idle = req.get("idle_timeout")
    deadline = started + timeout if timeout else None
    last_output = time.monotonic()
    reason = None
    wait_status = None
    exited_at = None
    inbuf = b""
    open_pipes = set(sinks)
    outbox = bytearray()  # input from the host not yet taken by the command
    eof_asked = False
    sendq = bytearray()  # live output for the host not yet sent: bounded, so a slow host slows the run
    conn.setblocking(False)

    def kill(sig, why):
        nonlocal reason
        if reason is None and why is not None:
            reason = why
        kill_tree(os.getpid(), sig)

    try:  # a kill that came before the command existed
        with open(os.path.join(rdir, "killed")) as f:
            kill(int(f.read().strip() or signal.SIGKILL), "killed")
    except (OSError, ValueError):
        pass

    while open_pipes or wait_status is None:
        now = time.monotonic()
        waits = [1.0]
        if deadline is not None and reason is None:
            waits.append(deadline - time.time())
        if idle and reason is None:
            waits.append(last_output + idle - now)
        if wait_status is not None:
            waits.append(exited_at + GRACE - now)
        held = conn is not None and len(sendq) >= SEND_BUFFER  # the host is behind: let the command wait
        if held:
            last_output = now  # waiting for the host is not being idle
            if exited_at is not None:
                exited_at = now  # what is left in the pipes is read once the host catches up
        reading = set() if held else open_pipes
        listening = conn is not None and len(outbox) < INPUT_BUFFER  # input the command does not take waits on the host
        watch = list(reading) + ([pidfd] if wait_status is None else []) + ([conn] if listening else [])
        wlist = [feed_fd] if feed_fd is not None and outbox else []
        if conn is not None and sendq:
            wlist.append(conn)
        ready, writable, _ = select.select(watch, wlist, [], max(0.0, min(waits)))
        if conn is not None and conn in writable:
            try:
                del sendq[: conn.send(sendq[:CHUNK])]
            except BlockingIOError:
                pass
            except OSError:
                conn = None  # the host went away: the run carries on, on disk
                sendq.clear()
        if feed_fd is not None and feed_fd in writable:
            try:
                del outbox[: os.write(feed_fd, outbox[:CHUNK])]
            except BlockingIOError:
                pass
            except OSError:  # the command closed its input
                outbox.clear()
        if feed_fd is not None and eof_asked and not outbox and not tty:
            os.close(feed_fd)
            feed_fd = None
        for fd in ready:
            if fd in sinks:
                try:
                    data = os.read(fd, CHUNK)
                except OSError:  # EIO: the terminal's other side is gone
                    data = b""
                if not data:
                    open_pipes.discard(fd)
                    data = redactor.flush(fd)
                    if not data:
                        continue
                else:
                    last_output = time.monotonic()
                    data = redactor.feed(fd, data)
                sinks[fd].write(data)
                shown = sinks[fd].live(data) if live and conn is not None else b""
                if shown:
                    sendq += dumps({"stream": sinks[fd].name, "size": len(shown)}).encode() + b"\n" + shown
            elif fd is conn:
                try:
                    data = conn.recv(4096)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    conn = None
                    if interactive and wait_status is None:
                        kill(signal.SIGHUP, None)  # like a terminal hanging up
                    continue
                inbuf += data
                while True:
                    msg, inbuf = take_frame(inbuf)
                    if msg is None:
                        break
                    if "stdin" in msg:
                        outbox += msg["stdin"]
                    elif "resize" in msg and tty:
                        set_winsize(feed_fd, *msg["resize"])
                    elif "eof" in msg:
                        eof_asked = True
                        if tty:
                            outbox += b"\x04"
                    elif "hangup" in msg:
                        kill(signal.SIGHUP, None)  # the client left, like a terminal closing
                    elif "kill" in msg:
                        kill(int(msg["kill"]), msg.get("reason", "killed"))
        if wait_status is None and (pidfd in ready or proc.pid in REAPED):
            wait_status = wait_for(proc.pid)
            exited_at = time.monotonic()
        if reason is None and wait_status is None:
            if deadline is not None and time.time() >= deadline:
                kill(signal.SIGKILL, "timeout")
            elif idle and time.monotonic() - last_output >= idle:
                kill(signal.SIGKILL, "idle_timeout")
        elif wait_status is not None and open_pipes and deadline is not None and time.time() >= deadline:
            kill_tree(os.getpid(), signal.SIGKILL)  # descendants still writing past the deadline
        if wait_status is not None and time.monotonic() >= exited_at + GRACE:
            break  # descendants still hold the pipes: the run is over all the same
    for fd in list(redactor.held):  # the end of a stream still held back (descendants kept it open)
        data = redactor.flush(fd)
        sinks[fd].write(data)
        shown = sinks[fd].live(data) if live and conn is not None else b""
        if shown:
            sendq += dumps({"stream": sinks[fd].name, "size": len(shown)}).encode() + b"\n" + shown
    if reason is None and os.path.exists(os.path.join(rdir, "killed")):
        reason = "killed"
    if reason in ("timeout", "idle_timeout"):
        kill_tree(os.getpid(), signal.SIGKILL)
    reap(block=False)
    by_name = {sink.name: sink for sink in sinks.values()}
    out = by_name["stdout"]
    errs = by_name.get("stderr") or Sink("stderr", run_id, rdir, cap, live_limit)  # a terminal has one stream
    if os.WIFSIGNALED(wait_status):
        sig = os.WTERMSIG(wait_status)
        code = 128 + sig
    else:
        sig, code = 0, os.WEXITSTATUS(wait_status)
    status.update(
        {
            "exit": code,
            "signal": sig,
            "reason": reason,
            "stdout_bytes": out.total,
            "stderr_bytes": errs.total,
            "truncated": out.truncated or errs.truncated,
            "finished_at": time.time(),
            "disk_error": out.disk_error or errs.disk_error,
        }
    )
    write_status(rdir, status)  # first: the outcome is kept even if the host never reads the rest
    if conn is not None:
        try:  # the rest of the live output, then the status, at the host's pace (it bounds the wait)
            conn.setblocking(True)
            conn.sendall(bytes(sendq))
            send_json(conn, status)
        except OSError:
            pass


# -- files -----------------------------------------------------------------------------


def file_read(conn, req):
    path = req["path"]
    limit = int(req.get("limit", 1 << 26))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError as exc:
        return send_json(conn, os_error(exc, path))
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        what = "is a directory" if stat.S_ISDIR(st.st_mode) else "is not a regular file"
        return send_json(
            conn,
            {
                "error": {
                    "kind": "invalid",
                    "message": "%s %s" % (path, what),
                    "hint": "list a directory with: hutch ls SANDBOX PATH",
                }
            },
        )
    with os.fdopen(fd, "rb") as f:
        f.seek(int(req.get("offset", 0)))
        data = f.read(limit + 1)
    truncated = len(data) > limit
    data = data[:limit]
    send_json(conn, {"ok": True, "size": len(data), "total": st.st_size, "truncated": truncated}, data)


def file_write(conn, req, rest):
    path = req["path"]
    size = int(req["size"])
    payload = recv_exact(conn, rest, size)
    try:
        if req.get("parents", True):
            os.makedirs(os.path.dirname(path) or "/", exist_ok=True)
        # write a temporary file and rename it: a failed write (disk full) leaves nothing behind
        tmp = os.path.join(os.path.dirname(path) or "/", ".%s.hutch-%d" % (os.path.basename(path), os.getpid()))
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(payload)
                os.fchmod(f.fileno(), int(req.get("mode", 0o644)))
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError as exc:
        return send_json(conn, os_error(exc, path))
    send_json(conn, {"ok": True, "path": path, "size": size})


def file_list(conn, req):
    path = req["path"]
    entries = []
    try:
        with os.scandir(path) as it:
            for entry in it:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                kind = (
                    "dir"
                    if stat.S_ISDIR(st.st_mode)
                    else "symlink"
                    if stat.S_ISLNK(st.st_mode)
                    else "file"
                    if stat.S_ISREG(st.st_mode)
                    else "other"
                )
                entries.append(
                    {"name": entry.name, "type": kind, "size": st.st_size, "mode": stat.S_IMODE(st.st_mode), "mtime": st.st_mtime}
                )
    except OSError as exc:
        return send_json(conn, os_error(exc, path))
    entries.sort(key=lambda e: e["name"])
    send_json(conn, {"ok": True, "path": path, "entries": entries})


# -- main loop -------------------------------------------------------------------------


class Spare:
    """A supervisor forked ahead of time, so an exec does not wait for a fork."""

    def __init__(self, server):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                server.close()
                ours.close()
                keep = {theirs.fileno(), TRANSCRIPT.get("fd")}
                for name in os.listdir("/proc/self/fd"):
                    # whatever the agent had open (another run's connection...) is not ours
                    if int(name) > 2 and int(name) not in keep:
                        try:
                            os.close(int(name))
                        except OSError:
                            pass
                prepare_supervisor()
                msg, fds, _, _ = socket.recv_fds(theirs, CHUNK, 8)
                if msg:
                    req, _ = recv_header(theirs, msg, fds)
                    theirs.close()
                    conn = socket.socket(fileno=fds[0])
                    supervise(conn, req, fds[1:])
            except BaseException:
                code = 1
                import traceback  # to the sandbox's log (bwrap's stderr)

                traceback.print_exc()
            finally:
                os._exit(code)
        theirs.close()
        self.sock = ours
        self.pid = pid

    def hand_over(self, conn, req, fds):
        socket.send_fds(self.sock, [frame(req)], [conn.fileno(), *fds])
        self.sock.close()


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def processes():
    """What ``ps`` shows, read from this sandbox's /proc."""
    out = []
    tick = os.sysconf("SC_CLK_TCK")
    page = os.sysconf("SC_PAGE_SIZE")
    names = {}
    try:
        with open("/etc/passwd") as f:
            for line in f:
                parts = line.split(":")
                if len(parts) > 2:
                    names[parts[2]] = parts[0]
    except OSError:
        pass
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as f:
                data = f.read()
            with open("/proc/%s/cmdline" % name, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").strip().decode("utf-8", "replace")
            uid = str(os.stat("/proc/%s" % name).st_uid)
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
                "command": cmd or "[%s]" % comm,
            }
        )
    out.sort(key=lambda p: p["pid"])
    return out


def new_spare(server):
    try:
        return Spare(server)
    except OSError:  # EAGAIN at the pids limit: try again at the next exec
        return None


def handle(conn, server, spare):
    msg, fds, _, _ = socket.recv_fds(conn, CHUNK, 8)
    if not msg:
        return spare
    req, rest = recv_header(conn, msg, fds)
    op = req.get("op")
    if op == "exec":
        try:
            if len(fds) != 1 or not str(req.get("run_id", "")).startswith("run_"):
                send_json(conn, err("invalid", "exec needs a run id and a stdin descriptor"))
                return spare
            req["env"] = {**BASE_ENV, **SECRETS, **(req.get("env") or {})}
            if req.get("redact") is not None:  # None: this run asked for --no-redact
                req["redact"] = {**SECRETS, **req["redact"]}
            if spare is None:
                spare = new_spare(server)
            if spare is None:
                send_json(
                    conn,
                    {
                        "error": {
                            "kind": "capacity",
                            "message": "cannot start a process: the sandbox is at its pids limit",
                            "hint": "kill runaway processes, or recreate the sandbox with a higher --pids",
                        }
                    },
                )
                return None
            spare.hand_over(conn, req, fds)
            RUNS[req["run_id"]] = spare.pid
        finally:
            for fd in fds:
                os.close(fd)
        return new_spare(server)
    for fd in fds:
        os.close(fd)
    if op == "ping":
        send_json(conn, {"ok": True, "pid": os.getpid()})
    elif op == "configure":
        BASE_ENV.clear()
        BASE_ENV.update(req.get("env") or {})
        if "secrets" in req:
            SECRETS.clear()
            SECRETS.update(req["secrets"] or {})
        send_json(conn, {"ok": True})
    elif op == "listen":
        listener = LISTEN.get("sock")
        if listener is None:
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", int(req["port"])))
            listener.listen(256)
            LISTEN["sock"] = listener  # kept open: the port stays the proxy's even while the daemon restarts
        socket.send_fds(conn, [b'{"ok":true}\n'], [listener.fileno()])
    elif op == "unlisten":
        listener = LISTEN.pop("sock", None)
        if listener is not None:
            listener.close()
        send_json(conn, {"ok": True})
    elif op == "runs":
        send_json(conn, {"ok": True, "alive": [r for r, pid in RUNS.items() if alive(pid)]})
    elif op == "kill":
        pid = RUNS.get(req.get("run_id"))
        running = pid is not None and alive(pid)
        if running:
            try:  # tells the supervisor the end was asked for (status "killed"), even before it started
                os.makedirs(os.path.join(RUNS_DIR, req["run_id"]), exist_ok=True)
                with open(os.path.join(RUNS_DIR, req["run_id"], "killed"), "w") as f:
                    f.write(str(req.get("signal", signal.SIGKILL)))
            except OSError:
                pass
            kill_tree(pid, int(req.get("signal", signal.SIGKILL)))
        send_json(conn, {"ok": True, "was_running": running})
    elif op == "ps":
        send_json(conn, {"ok": True, "processes": processes()})
    elif op == "read":
        file_read(conn, req)
    elif op == "write":
        file_write(conn, req, rest)
    elif op == "list":
        file_list(conn, req)
    else:
        send_json(conn, err("invalid", "unknown op %r" % op))
    return spare


def default_signals():
    """Every signal at its default, as from a terminal: a daemon started under nohup (SIGHUP
    ignored) or as a shell's background job (SIGINT and SIGQUIT ignored) passes that on through
    bwrap, and no run may inherit it (a hangup or ``hutch kill --signal INT`` would not reach it)."""
    valid = getattr(signal, "valid_signals", None)
    for sig in valid() if valid else range(1, signal.NSIG):
        try:
            if signal.getsignal(sig) == signal.SIG_IGN:
                signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):  # SIGKILL, SIGSTOP and numbers the C library keeps
            pass


def main():
    sock_path, ready_fd = sys.argv[1], int(sys.argv[2])
    default_signals()
    # The daemon's umask (077) is no workload's business: files made inside are 0644 and
    # directories 0755, as on any machine (what `hutch pull` brings home keeps them).
    os.umask(0o022)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # supervisors are reaped by the kernel
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    try:
        os.unlink(sock_path)
    except FileNotFoundError:
        pass
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(sock_path)
    os.chmod(sock_path, 0o600)
    server.listen(64)
    open_transcript()
    spare = new_spare(server)
    os.write(ready_fd, b"ready\n")
    os.close(ready_fd)
    PRCTL["fn"] = _load_prctl()
    while True:
        try:
            conn, _ = server.accept()
        except InterruptedError:
            continue
        try:
            spare = handle(conn, server, spare)
        except Exception as exc:  # noqa: BLE001 - one bad request never kills the agent
            try:
                send_json(conn, err("internal", str(exc)))
            except OSError:
                pass
        finally:
            conn.close()
            if spare is not None and spare.sock.fileno() < 0:
                spare = new_spare(server)


if __name__ == "__main__":
    main()
