"""The agent protocol: how the daemon and a sandbox's agent speak. Both sides import this module.

Standard library only (it also runs inside the sandbox, under the host's python3 >= 3.10),
and simple enough that a small native helper can speak it instead of the Python agent.

Versions
    PROTOCOL names this protocol; an agent answers ``ping`` with it. A sandbox keeps the
    agent it was created with, so a daemon may meet an agent of another protocol (after an
    upgrade), or one from before protocol numbers (whose answers are not frames of this
    protocol). The daemon checks at adoption (``channel.agent_protocol``): such a sandbox
    stays listed, every call on it is refused (``conflict``, naming both protocols), and
    it can only be destroyed. Change PROTOCOL with any change an older peer would misread.
    A request added without such a change (``connect``, for exposed ports) is answered by an
    agent that predates it with ``invalid: unknown request``, which the daemon reports as a
    sandbox too old for it; the other requests keep working.

Transport
    Two unix stream sockets in ``/.hutch/ctl/`` inside the sandbox (``ctl/`` in its host
    directory): ``agent.sock``, the agent's, for every request but exec, and ``exec.sock``
    (EXEC_SOCKET), where a spare supervisor (or the idle helper, hold.c, which supervises a
    plain run in a fork of its own) waits to take the next run itself (protocol 2;
    in protocol 1 exec went to ``agent.sock`` and the agent handed it to a spare: one
    process hop more per run). One connection per request; the daemon connects, sends one
    request, reads the answer, and closes. File descriptors travel as SCM_RIGHTS attached
    to the first byte of a frame.

Frames
    Everything is a frame: a 5-byte header, then the body::

        length  u32, big-endian: the body's size in bytes, at most MAX_FRAME (1 MiB)
        type    u8:  b"J" message, b"D" data, b"O" stdout, b"E" stderr, b"I" stdin
        body    ``length`` bytes

    A reader refuses a frame over MAX_FRAME or of an unknown type (it closes the
    connection): nothing is ever buffered without bound.

    J  a message: one JSON object (UTF-8; in practice ASCII, non-ASCII escaped), always
       with a string ``type``. Strings may hold lone surrogates escaped as ``\\udcXX``:
       bytes that were not UTF-8 (Python's surrogateescape), to be passed on as bytes.
    D  data belonging to the message before it: a message with ``size: N`` is followed by
       D frames carrying exactly N bytes in all (each at most MAX_FRAME; none when N is 0).
    O, E  a chunk of a run's stdout / stderr (supervisor to daemon), after redaction.
    I  a chunk of input for a run's stdin (daemon to supervisor).

Requests (daemon to agent: the first frame of a connection)
    Every request is answered by ``{"type": "ok", ...}`` or by an error,
    ``{"type": "error", "error": {"kind": K, "message": M, "hint": H}}`` (hint optional;
    kinds as hutch's: invalid, not_found, permission_denied, capacity, internal ...).

    ping       {}                                        ok: pid (the agent's), protocol (PROTOCOL)
    configure  env: {str: str}, secrets: {str: str}      ok. The sandbox's base environment
               (secrets optional: kept as they are      and secrets: every later run gets
               when absent), spare_idle: seconds        both; secrets are redacted from output.
               (optional, default 60; 0: never),        An unused spare leaves after spare_idle;
               hold: bool (optional, default true)      an agent the idle helper started goes
                                                        back to it when idle, unless hold is false
    listen     port: int                                 ok, with one descriptor attached: a TCP
                                                        socket listening on 127.0.0.1:port in the
                                                        sandbox's network namespace (kept open;
                                                        the same one on every call)
    unlisten   {}                                        ok (the listener is closed)
    connect    port: int                                 ok, with one descriptor attached: a TCP
                                                        socket connected to 127.0.0.1:port in the
                                                        sandbox's network namespace (an exposed
                                                        port); error unavailable when nothing
                                                        listens there
    runs       {}                                        ok: alive [run ids whose supervisor lives]
    wake       {}                                        ok (the idle helper, hold.c, execs the
                                                        agent for it: a pool member's at once)
    kill       run_id: str, signal: int                  ok: was_running: bool. Signals the run's
                                                        whole process tree and marks it killed
    ps         {}                                        ok: processes [{pid, ppid, user, state,
                                                        cpu_seconds, rss, command}]
    read       path: str, offset: int, limit: int        ok: size, total, truncated; then D frames
                                                        (size bytes: at most limit, from offset)
    write      path, size: int, mode: int,               ok: path, size. Written whole to a
               parents: bool (default true); then D     temporary file and renamed: a failed
               frames (size bytes)                      write leaves nothing
    list       path: str                                 ok: path, entries [{name, type (file, dir,
                                                        symlink, other), size, mode, mtime}]
    exec       on exec.sock only, see below              the run's conversation (on agent.sock:
                                                        error conflict, naming this protocol)

Exec: one run (see ExecRequest for the fields)
    Sent on exec.sock; the request frame carries one descriptor: the run's stdin. The
    connection is the supervisor's (a process forked ahead of time, with the sandbox's
    environment and secrets as ``configure`` last set them), which owns the run until it
    ends; from then on:

    supervisor -> daemon
        {"type": "started", "pid": N}      the command runs (not sent when it could not start)
        O / E frames                       its output, live (see stream and live_limit)
        {"type": "finished", ...Status}    last: how the run ended; the supervisor closes
        or an error message                the request was refused (invalid, capacity)
    daemon -> supervisor (any time before finished)
        I frames                           input for an interactive run
        {"type": "eof"}                    no more input (a terminal gets ^D)
        {"type": "resize", "rows", "cols"} the terminal's size (tty runs)
        {"type": "hangup"}                 the client left: SIGHUP to the run's tree
        {"type": "signal", "signal": N, "reason": R}   signal the run's tree; R (timeout,
                                           killed) becomes the run's reason

    The supervisor enforces the wall and idle timeouts itself, keeps the output on disk
    under /.hutch/runs/RUN_ID/ (stdout, stderr, status: the Status as JSON), and goes on
    when the daemon goes away. Backpressure: it holds at most 1 MiB of live output for the
    daemon and stops reading the command's pipes past it, so a slow reader slows the run;
    it holds at most 1 MiB of input the command has not taken and stops reading frames
    past it. Closing the connection of an interactive run hangs it up (SIGHUP).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs the agent's start ~2 ms: only the type checker reads these
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any, Literal, TypedDict

    class ExecRequest(TypedDict, total=False):
        """``type: "exec"``, and the run to start."""

        type: Literal["exec"]
        run_id: str  # run_..., the name of its directory under /.hutch/runs
        argv: list[str]  # the command, never through a shell
        env: dict[str, str]  # added to the sandbox's base environment and secrets
        cwd: str  # default /workspace
        redact: dict[str, str] | None  # name -> value replaced in output; null: no redaction at all
        timeout: float | None  # wall seconds, enforced by the supervisor
        idle_timeout: float | None  # seconds without output
        stream: bool  # send the output live (default true)
        live_limit: int | None  # bytes per stream sent live; null: all of it
        disk_cap: int  # bytes per stream kept on disk
        interactive: bool  # input arrives as I frames (stdin is then a pipe of the supervisor's)
        tty: bool  # a terminal: stdout and stderr merged into O frames
        rows: int
        cols: int
        user: str | None  # run as this user of the sandbox (NAME, UID, NAME:GROUP, UID:GID), looked up inside
        own_env: list[str]  # (set by the agent) the names the run's own env set: a user's HOME never replaces them

    class Status(TypedDict, total=False):
        """How a run ended: the ``finished`` message, and the run's ``status`` file."""

        type: Literal["finished"]
        run_id: str
        started_at: float  # unix time
        finished_at: float
        exit: int  # the exit code; 128 + N when killed by signal N
        signal: int  # 0 unless killed by a signal
        reason: str | None  # spawn, timeout, idle_timeout, killed, or null (it ended by itself)
        spawn_error: str  # why it could not start (exit 127: not found, 126: cannot run)
        stdout_bytes: int  # bytes written (after redaction), live or not, kept or not
        stderr_bytes: int
        truncated: bool  # the copy on disk was cut at disk_cap
        disk_error: str | None  # the copy on disk stopped: why (a full disk ...)

    class ErrorBody(TypedDict, total=False):
        kind: str
        message: str
        hint: str


PROTOCOL = 2
EXEC_SOCKET = "exec.sock"  # beside the control socket: where runs start
HEADER = 5
MAX_FRAME = 1 << 20
MESSAGE = ord("J")
DATA = ord("D")
STDOUT = ord("O")
STDERR = ord("E")
STDIN = ord("I")
TYPES = frozenset((MESSAGE, DATA, STDOUT, STDERR, STDIN))
OUTPUT = {STDOUT: "stdout", STDERR: "stderr"}  # output frame type -> stream name
STREAM = {"stdout": STDOUT, "stderr": STDERR}


class ignoring:  # noqa: N801 - used as contextlib.suppress is
    """``contextlib.suppress``: contextlib (with collections and functools) stays out of the
    agent's start, which every idle sandbox's first run waits for."""

    def __init__(self, *exceptions: type[BaseException]) -> None:
        self.exceptions = exceptions

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, value: object, tb: object) -> bool:
        return kind is not None and issubclass(kind, self.exceptions)


class WireError(ValueError):
    """A frame that breaks the protocol: over MAX_FRAME, of an unknown type, not a JSON object."""


def frame(kind: int, body: bytes | bytearray | memoryview) -> bytes:
    if len(body) > MAX_FRAME:
        raise WireError(f"a frame of {len(body)} bytes is over the limit of {MAX_FRAME}")
    return len(body).to_bytes(4, "big") + bytes((kind,)) + body


class _Defaults:
    """What json's C scanner reads of a decoder: ``json.loads``'s defaults (``float`` reads
    NaN, Infinity and -Infinity as json's parse_constant does)."""

    strict = True
    object_hook = object_pairs_hook = None
    parse_float = parse_constant = float
    parse_int = int


def _unencodable(obj: object) -> object:
    raise TypeError(f"Object of type {obj.__class__.__name__} is not JSON serializable")


# The json package's own C encoder and scanner, made once, without importing the package:
# ``import json`` brings ``re`` and ``enum``, a fifth of the agent's start (each wake of an idle
# sandbox, each cold create's first run). Where they are missing (another Python), json's own.
try:
    from _json import encode_basestring_ascii, make_encoder, make_scanner

    _ENCODE = make_encoder(None, _unencodable, encode_basestring_ascii, None, ":", ",", False, False, True)
    _SCAN = make_scanner(_Defaults())  # type: ignore[arg-type]  # it reads only those attributes
except ImportError:  # pragma: no cover - CPython has them
    import json

    _ENCODE = json.JSONEncoder(separators=(",", ":")).iterencode  # type: ignore[assignment]
    _SCAN = json.JSONDecoder().raw_decode  # type: ignore[assignment]  # (raises ValueError, never StopIteration)


def encode(msg: Mapping[str, Any]) -> bytes:
    """A message's JSON (ASCII: everything else escaped)."""
    return "".join(_ENCODE(msg, 0)).encode("ascii")


def message(msg: Mapping[str, Any]) -> bytes:
    """One J frame."""
    return frame(MESSAGE, encode(msg))


def data(kind: int, payload: bytes | bytearray | memoryview) -> bytes:
    """``payload`` as frames of ``kind`` (D, O, E or I), each at most MAX_FRAME; none when empty."""
    view = memoryview(payload)
    return b"".join(frame(kind, view[i : i + MAX_FRAME]) for i in range(0, len(view), MAX_FRAME))


def with_data(msg: Mapping[str, Any], payload: bytes) -> bytes:
    """A message announcing ``size``, and its D frames."""
    return message({**msg, "size": len(payload)}) + data(DATA, payload)


def decode(body: bytes | bytearray) -> Any:
    """The message in a J frame's body: a JSON object with a string ``type``."""
    try:
        text = body.decode("utf-8").strip()
        msg, end = _SCAN(text, 0)
    except StopIteration as stop:
        raise WireError(f"a message that is not JSON: no value at character {stop.value}") from None
    except ValueError as exc:  # (UnicodeDecodeError and JSONDecodeError are ValueErrors)
        raise WireError(f"a message that is not JSON: {exc}") from None
    if end != len(text) or not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
        raise WireError("a message that is not a JSON object with a type")
    return msg


def ok(**fields: Any) -> dict[str, Any]:
    return {"type": "ok", **fields}


def error(kind: str, text: str, hint: str | None = None) -> dict[str, Any]:
    body: ErrorBody = {"kind": kind, "message": text}
    if hint:
        body["hint"] = hint
    return {"type": "error", "error": body}


class Reader:
    """Frames out of a byte stream, whatever the reads cut it into (no I/O of its own)."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def feed(self, chunk: bytes) -> None:
        self.buf += chunk

    def next(self) -> tuple[int, bytes] | None:
        """The next whole frame (type, body), or None until more bytes come."""
        buf = self.buf
        if len(buf) < HEADER:
            return None
        size = int.from_bytes(buf[:4], "big")
        kind = buf[4]
        if size > MAX_FRAME:
            raise WireError(f"a frame of {size} bytes is over the limit of {MAX_FRAME}")
        if kind not in TYPES:
            raise WireError(f"a frame of unknown type {kind}")
        end = HEADER + size
        if len(buf) < end:
            return None
        body = bytes(buf[HEADER:end])
        del buf[:end]  # cheap: a bytearray drops its head without copying the rest
        return kind, body

    def missing(self) -> int:
        """Bytes still needed to complete the frame in the buffer (at least 1 when none is whole)."""
        if len(self.buf) < HEADER:
            return HEADER - len(self.buf)
        return max(1, HEADER + int.from_bytes(self.buf[:4], "big") - len(self.buf))
