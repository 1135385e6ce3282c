"""``POST /v1/run``: ``hutch run`` in one request: a sandbox made (or reused), a local tree
pushed, one command run in the foreground, the tree pulled back, the sandbox destroyed.

The request is a :class:`RunOnceRequest`: as JSON (``application/json``), or framed
(``application/x-hutch-run``) when bytes travel with it::

    <length of the request JSON, in decimal>\\n<RunOnceRequest JSON>
    <push_size bytes: a push body, as POST /v1/sandboxes/{ref}/push takes it>   (push_size > 0)
    <the command's input, as the daemon asks for it with input frames>         (stream_input)

The answer is NDJSON, one :data:`RunOnceFrame` a line, in this order: ``sandbox``;
``pushed`` (a push); the frames of a streamed exec (``run``, ``stdout``/``stderr``, ``exit``),
with ``input`` frames among them when the command's input streams; ``pull`` frames (the
workspace as a tar, base64, in pieces); ``done``, or ``error`` when hutch failed. A sandbox
the run made is destroyed before ``done`` (or ``error``) unless it is kept (``keep``, a
tenant, a ``reuse_key``), and at once when the client goes away, so none is left behind.
"""

# No "from __future__ import annotations": Python 3.11 sees NotRequired/Required only in evaluated annotations.
from typing import Literal, NotRequired, Required, TypedDict

from hutch.wire.runs import ErrorFrame, ExecRequest, ExitFrame, OutputFrame, RunFrame
from hutch.wire.sandboxes import SandboxSpec
from hutch.wire.workspaces import PushResult

__all__ = [
    "DoneFrame",
    "InputFrame",
    "PullFrame",
    "PushedFrame",
    "RunOnceFrame",
    "RunOnceRequest",
    "SandboxFrame",
    "UploadFile",
]


class UploadFile(TypedDict):
    """A file written into the sandbox before the command (``hutch run --file``'s script)."""

    path: str  # absolute, or relative to the sandbox's workdir
    data: str  # base64
    mode: NotRequired[int]  # default 0o644


class RunOnceRequest(TypedDict, total=False):
    """``POST /v1/run``: where to run (``spec`` for a new sandbox, or ``sandbox``), what, and
    what to bring in and take back."""

    exec: Required[ExecRequest]  # the command (foreground: not background)
    spec: SandboxSpec  # a new sandbox; with tenant or reuse_key, the kept one of that line (made when missing)
    sandbox: str  # instead of spec: this existing sandbox (never destroyed by the run)
    keep: bool  # keep the sandbox the run makes (its id is in the sandbox frame)
    files: list[UploadFile]  # written before the command
    pull: bool  # send /workspace back (pull frames) once the command ended
    push_size: int  # bytes of push body after the request (framed requests only)
    stream_input: bool  # the rest of the body is the command's input (framed requests only)


class SandboxFrame(TypedDict):
    """The first frame: where the command runs."""

    type: Literal["sandbox"]
    sandbox_id: str
    name: str | None
    created: bool  # made by this run
    kept: bool  # stays after the run (a sandbox given, keep, a tenant or a reuse_key)


class PushedFrame(PushResult):
    """The push of the request's tree, done."""

    type: Literal["pushed"]


class InputFrame(TypedDict):
    """The command's input is wanted: the client may send ``credit`` more bytes of it (framed
    requests with ``stream_input``; the end of the body ends the input)."""

    type: Literal["input"]
    credit: int


class PullFrame(TypedDict):
    """A piece of the workspace's tar (the pieces in order make the whole tar)."""

    type: Literal["pull"]
    data: str  # base64


class DoneFrame(TypedDict):
    """The last frame when everything went well."""

    type: Literal["done"]
    sandbox_id: str
    destroyed: bool


RunOnceFrame = SandboxFrame | PushedFrame | InputFrame | RunFrame | OutputFrame | ExitFrame | PullFrame | DoneFrame | ErrorFrame
