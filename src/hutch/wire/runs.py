"""Run bodies: the exec request and result, run records, the NDJSON frames of a streamed
exec and the messages of the attach WebSocket, output pages, the transcript, events and ps.

The exec request keeps one shape from the edge to the Service: the CLI, SDK and MCP build an
:class:`ExecRequest` with :func:`hutch.wire.build.exec_request` (an attach start is the same
request with a terminal's size); the server validates the same keys (``hutch.models.
ExecRequest``, held to this one by tests/unit/test_wire.py). Past the Service the run is one
``hutch.provider.ExecSpec`` whose fields keep these names: ``argv`` (``command``; a string
runs as ``/bin/sh -c``), ``env`` (with ``secrets``), ``cwd``, ``stdin`` (bytes, decoded from
``stdin_base64``), ``timeout``, ``idle_timeout``, ``max_output`` and ``redact`` (the secrets
to redact, or None for ``redact: false``), ``user`` (None: the sandbox's own), plus the run id
and how it is watched.
"""

# No "from __future__ import annotations": Python 3.11 sees NotRequired/Required only in evaluated annotations.
from typing import Literal, NotRequired, Required, TypedDict

from hutch.wire.system import ErrorDetail

__all__ = [
    "AttachEof",
    "AttachMessage",
    "AttachResize",
    "AttachStart",
    "AttachStdin",
    "ErrorFrame",
    "Event",
    "ExecFrame",
    "ExecRequest",
    "ExecResult",
    "ExecSummary",
    "ExitFrame",
    "KillRequest",
    "KillResult",
    "OutputFrame",
    "OutputPage",
    "Process",
    "RunFrame",
    "RunRecord",
    "RunStatus",
    "StreamName",
    "StreamPage",
    "Transcript",
    "TranscriptRecord",
]

RunStatus = Literal["running", "completed", "failed", "timed_out", "killed", "oom_killed", "lost"]
StreamName = Literal["stdout", "stderr"]


class ExecRequest(TypedDict, total=False):
    """``POST /v1/sandboxes/{ref}/exec``: run a command (foreground, ``?stream=true``, or
    ``background``)."""

    command: Required[str | list[str]]  # a string runs under /bin/sh -c; a list is the argv
    env: dict[str, str]
    cwd: str | None
    timeout: float | None  # seconds; the whole process tree is killed (exit 124)
    idle_timeout: float | None  # seconds without output
    background: bool
    stdin: str | None
    stdin_base64: bool
    max_output: int  # bytes of each stream kept in the result
    secrets: dict[str, str]  # for this run only; never stored
    redact: bool  # secret values in the output become [redacted:NAME]
    approval: str | None  # an approved request (apr_...) for a command the policy gates
    user: str | None  # run as this user of the sandbox: NAME, UID, NAME:GROUP or UID:GID (None: the sandbox's own)


class ExecSummary(TypedDict):
    """An exec result without its output: the ``exit`` frame of a stream."""

    run_id: str
    sandbox_id: str
    exit_code: int  # the workload's own; 124 timed out; 125 hutch failed; 126/127 cannot run
    status: RunStatus
    stdout_bytes: NotRequired[int]  # the whole size written (may exceed what came back)
    stderr_bytes: NotRequired[int]
    truncated: NotRequired[bool]  # this result (or stream) holds less than was written: a cap cut it
    stored_truncated: NotRequired[bool]  # the output kept in the sandbox stops at the disk cap
    duration_ms: float
    signal: NotRequired[int | None]
    error: NotRequired[str | None]  # hutch's own reason (spawn failed, lost ...)


class ExecResult(ExecSummary):
    """A foreground exec's answer. Output that is not UTF-8 comes base64 (``*_base64``)."""

    stdout: str
    stderr: str
    stdout_base64: NotRequired[bool]
    stderr_base64: NotRequired[bool]


class RunRecord(TypedDict):
    """One run as recorded: runs, get, wait, and the answer of a background exec."""

    id: str  # run_...
    sandbox_id: str
    command: list[str]  # the argv run
    status: RunStatus
    exit_code: int | None  # None while it runs
    started_at: float
    finished_at: float | None
    duration_ms: float | None
    stdout_bytes: int
    stderr_bytes: int
    truncated: bool  # the output kept in the sandbox (poll, logs) stops at the disk cap
    background: bool
    cwd: str | None
    env_keys: list[str]  # the names of its environment (values are never kept)
    timeout: float | None
    idle_timeout: float | None
    signal: int | None
    error: str | None


class RunFrame(TypedDict):
    """The first frame of a streamed exec."""

    type: Literal["run"]
    run_id: str
    sandbox_id: str


class OutputFrame(TypedDict):
    type: StreamName
    data: str
    base64: bool


class ExitFrame(ExecSummary):
    """The last frame of a run that ran."""

    type: Literal["exit"]


class ErrorFrame(TypedDict):
    """The last frame when hutch failed the run after it started."""

    type: Literal["error"]
    error: ErrorDetail


ExecFrame = RunFrame | OutputFrame | ExitFrame | ErrorFrame  # one line of the NDJSON stream


class AttachStart(ExecRequest, total=False):
    """The first message on ``/v1/sandboxes/{ref}/attach`` (a WebSocket): an exec request, and a
    terminal when ``tty``. The server answers with the frames of a streamed exec."""

    type: Required[Literal["start"]]
    tty: bool
    rows: int
    cols: int


class AttachStdin(TypedDict):
    type: Literal["stdin"]
    data: str  # base64


class AttachResize(TypedDict):
    type: Literal["resize"]
    rows: int
    cols: int


class AttachEof(TypedDict):
    type: Literal["eof"]


AttachMessage = AttachStart | AttachStdin | AttachResize | AttachEof


class KillRequest(TypedDict, total=False):
    signal: str | int  # TERM (default), KILL, INT, HUP, QUIT, USR1, USR2 or a number


class KillResult(TypedDict):
    run_id: str
    signalled: bool  # false: it had already ended
    status: RunStatus
    message: str


class StreamPage(TypedDict):
    """A piece of one output stream, from ``offset``; resume at ``next_offset``."""

    data: str
    base64: bool
    offset: int
    next_offset: int
    size: int  # the stream's size on disk now


class OutputPage(TypedDict):
    """``GET /v1/runs/{id}/output``: the run and its output from the given offsets."""

    run: RunRecord
    stdout: StreamPage
    stderr: StreamPage
    done: bool  # it ended and everything was read


class TranscriptRecord(TypedDict):
    offset: int
    run_id: str
    stream: StreamName
    data: str
    base64: bool


class Transcript(TypedDict):
    """``GET /v1/sandboxes/{ref}/logs``: the output of its runs in the order it arrived."""

    sandbox_id: str
    records: list[TranscriptRecord]
    offset: int
    next_offset: int
    size: int
    eof: bool  # nothing more to read and nothing running


class Event(TypedDict):
    """One line of the audit stream (``GET /v1/events``)."""

    seq: int
    time: float
    sandbox_id: str | None
    run_id: str | None
    type: str  # sandbox_created, run_started, run_finished, egress_denied, ...
    data: dict[str, object]
    actor: NotRequired[str | None]  # who asked: a key's id, owner (the unix socket), token; None: hutch itself


class Process(TypedDict):
    """``GET /v1/sandboxes/{ref}/ps``: one process, pids as seen inside the sandbox."""

    pid: int
    ppid: int
    user: str
    state: str
    cpu_seconds: NotRequired[float]  # not every provider can tell
    rss: int  # bytes
    command: str
