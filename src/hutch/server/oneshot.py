"""``POST /v1/run``: hutch run in one request (the use-case is :mod:`hutch.service.oneshot`).

The request is read as it arrives (:class:`Body`): the request JSON, then the push (spooled
to disk, as a push is), then, while the answer streams, the command's input. The input is
asked for in ``input`` frames, each allowing ``credit`` more bytes: the client never sends
more than the daemon can queue, so the daemon never stops reading the request, and a client
that goes away is seen at once, whatever the command does with its input. A client that
leaves leaves the job (:meth:`hutch.service.oneshot.Job.leave`), which destroys the sandbox
it made.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import BaseModel, Field, StrictInt
from pydantic.json_schema import SkipJsonSchema
from starlette.types import Receive, Scope, Send

from hutch.errors import InvalidError
from hutch.models import ExecRequest, SandboxSpec
from hutch.server.edge import ClientGone
from hutch.server.remote import interactive
from hutch.server.workspaces import MAX_PUSH, spool
from hutch.service import Service
from hutch.service.files import MAX_FILE
from hutch.service.oneshot import Job, Push, RunOnce

NDJSON = "application/x-ndjson"
FRAMED = "application/x-hutch-run"
MAX_HEAD = 96 << 20  # the request JSON: room for a 64 MiB stdin or script, base64-encoded
MAX_BODY = MAX_HEAD + MAX_PUSH + (1 << 50)  # and the command's input, which streams through
MAX_FILES = 16
WINDOW = 1 << 20  # input bytes the client may have on their way or queued for the command
RUN_ANSWER: dict[str, Any] = {
    "description": "NDJSON frames, one a line: sandbox, pushed, the run's frames (with input frames when "
    "its input streams), pull, then done (or error)",
    "content": {NDJSON: {"schema": {"type": "string"}}},
}


class UploadFile(BaseModel):
    path: str
    data: str  # base64
    mode: StrictInt = 0o644


class RunOnceRequest(BaseModel):
    exec: ExecRequest
    spec: SandboxSpec | SkipJsonSchema[None] = None
    sandbox: str | SkipJsonSchema[None] = None
    keep: bool = False
    files: list[UploadFile] = Field(default_factory=list, max_length=MAX_FILES)
    pull: bool = False
    push_size: StrictInt = Field(default=0, ge=0, le=MAX_PUSH)
    stream_input: bool = False


class Inbox(asyncio.Queue[dict[str, Any]]):
    """The command's input as the client sent it, counting what the command took."""

    def __init__(self) -> None:
        super().__init__()
        self.taken = 0
        self.took = asyncio.Event()

    def _get(self) -> dict[str, Any]:
        item = super()._get()
        self.taken += len(item.get("stdin", b""))
        self.took.set()
        return item


class Body:
    """The request's body as it arrives: the request JSON, the push, then the command's input."""

    def __init__(self, receive: Receive) -> None:
        self.receive = receive
        self.buf = bytearray()
        self.more = True
        self.granted = 0  # input bytes the client may send (the credit of the input frames so far)
        self.received = 0

    async def _fill(self) -> bool:
        """One more piece of the body; False once it ended. :class:`ClientGone` when the client left."""
        if not self.more:
            return False
        msg = await self.receive()
        if msg["type"] == "http.disconnect":
            raise ClientGone
        self.buf += msg.get("body", b"")
        self.more = bool(msg.get("more_body", False))
        return True

    async def take(self, size: int, what: str) -> bytes:
        while len(self.buf) < size:
            if not await self._fill():
                raise InvalidError(f"the request ended inside its {what}", hint="send the body docs/api.md describes")
        data = bytes(self.buf[:size])
        del self.buf[:size]
        return data

    async def head(self, media: str) -> bytes:
        """The request JSON: the whole body (application/json), or its framed first part."""
        if media == "application/json":
            while await self._fill():
                if len(self.buf) > MAX_HEAD:
                    raise InvalidError(f"the request is over {MAX_HEAD} bytes", hint="send the script as a file with --sync")
            return await self.take(len(self.buf), "request")
        if media != FRAMED:
            raise InvalidError(f"POST /v1/run takes application/json or {FRAMED}, not {media}")
        while b"\n" not in self.buf[:21]:
            if len(self.buf) > 20 or not await self._fill():
                raise InvalidError(f"a {FRAMED} body starts with the request's length and a newline")
        size_text, _, _ = bytes(self.buf[:21]).partition(b"\n")
        del self.buf[: len(size_text) + 1]
        if not size_text.isdigit() or int(size_text) > MAX_HEAD:
            raise InvalidError(f"the request's length must be 0-{MAX_HEAD}, got {size_text[:20]!r}")
        return await self.take(int(size_text), "request")

    async def chunks(self, size: int) -> AsyncIterator[bytes]:
        """The next ``size`` bytes of the body, as they come."""
        left = size
        while left:
            if not self.buf and not await self._fill():
                raise InvalidError(f"the request ended inside its push ({size} bytes announced)")
            piece = bytes(self.buf[:left])
            del self.buf[: len(piece)]
            left -= len(piece)
            yield piece

    async def follow(self, inbox: Inbox | None) -> None:
        """The rest of the body: the command's input (within the credit granted) into ``inbox``;
        returns once the client has gone. Bytes it was not asked for are refused (InvalidError)."""
        ended = False
        while True:
            if self.buf:
                if inbox is None or self.received + len(self.buf) > self.granted:
                    raise InvalidError("the request carries more bytes than the daemon asked for", hint="see docs/api.md")
                self.received += len(self.buf)
                inbox.put_nowait({"stdin": bytes(self.buf)})
                self.buf.clear()
            if not self.more and not ended:
                ended = True
                if inbox is not None:
                    inbox.put_nowait({"eof": True})
            msg = await self.receive()  # past the end of the body: waits for the client to leave
            if msg["type"] == "http.disconnect":
                return
            self.buf += msg.get("body", b"")
            self.more = self.more and bool(msg.get("more_body", False))


class FrameStream(Response):
    """The answer: the job's frames as NDJSON, while :meth:`Body.follow` reads the rest of the request."""

    media_type = NDJSON

    def __init__(self, job: Job, body: Body, inbox: Inbox | None) -> None:
        self.job, self.reading, self.inbox = job, body, inbox
        self.status_code = 200
        self.background = None
        self.init_headers()

    def _credit(self) -> int:
        """Bytes to allow now: enough to keep WINDOW ahead of what the command took."""
        taken = self.inbox.taken if self.inbox is not None else 0
        more = taken + WINDOW - self.reading.granted
        return more if more >= WINDOW // 2 else 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        job, body = self.job, self.reading

        async def line(frame: dict[str, Any]) -> None:
            await send({"type": "http.response.body", "body": json.dumps(frame).encode() + b"\n", "more_body": True})

        async def grant() -> None:
            credit = self._credit()
            if credit:
                body.granted += credit
                await line({"type": "input", "credit": credit})

        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        reader = asyncio.ensure_future(body.follow(self.inbox))
        frame = asyncio.ensure_future(job.next())
        took: asyncio.Future[Any] | None = None
        wanted = False  # the job asked for the command's input
        try:
            while True:
                if took is None and wanted and self.inbox is not None:  # set since the last grant: fires at once
                    took = asyncio.ensure_future(self.inbox.took.wait())
                await asyncio.wait({reader, frame} | ({took} if took else set()), return_when=asyncio.FIRST_COMPLETED)
                if reader.done():
                    failed = not reader.cancelled() and reader.exception()
                    if isinstance(failed, InvalidError):  # a client that broke the protocol: say why, then stop
                        await line({"type": "error"} | failed.to_dict())
                    break
                if took is not None and took.done() and self.inbox is not None:
                    took = None
                    self.inbox.took.clear()  # before the grant: what is taken from now on wakes us again
                    await grant()
                if frame.done():
                    out = frame.result()
                    if out is None:
                        break
                    frame = asyncio.ensure_future(job.next())
                    if out["type"] != "input":
                        await line(out)
                    elif not wanted and self.inbox is not None:
                        wanted = True
                        self.inbox.took.clear()
                        await grant()
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            job.leave()  # done already, or its client is gone (or the daemon is stopping)
            for task in (reader, frame, took):
                if task is not None:
                    task.cancel()
            with contextlib.suppress(BaseException):
                await reader


def router(service: Service) -> APIRouter:
    r = APIRouter()

    @r.post(
        "/v1/run",
        response_model=None,
        response_class=FrameStream,
        status_code=200,
        responses={200: RUN_ANSWER},
        max_body_size=MAX_BODY,
    )
    async def run(request: Request) -> Response:
        """hutch run in one request: a sandbox made (``spec``; with ``tenant`` or ``reuse_key``
        the kept one of that line) or given (``sandbox``), a tree pushed, ``files`` written, one
        command in the foreground, ``/workspace`` sent back (``pull``), the sandbox destroyed
        unless kept.

        The body is the request as JSON, or framed (``application/x-hutch-run``): its length in
        decimal and a newline, the request, then ``push_size`` bytes of push body (as the push
        route takes it), then with ``stream_input`` the command's input until the body ends,
        never more than the ``input`` frames allowed. The answer is NDJSON: ``sandbox``,
        ``pushed``, the frames of a streamed exec with ``input`` frames among them, ``pull``
        frames (the tar in pieces, base64), and ``done`` (or ``error``) once the sandbox is
        gone. A client that goes away has the sandbox the run made destroyed at once; a failure
        before the sandbox exists is a plain error answer."""
        body = Body(request.receive)
        media = request.headers.get("content-type", "application/json").partition(";")[0].strip().lower()
        req = RunOnceRequest.model_validate_json(await body.head(media))
        if media != FRAMED and (req.push_size or req.stream_input):
            raise InvalidError(f"push_size and stream_input need a {FRAMED} body", hint="see docs/api.md")
        if req.exec.background:
            raise InvalidError("hutch run runs its command in the foreground", hint="drop background")
        files = [(f.path, _file(f), f.mode) for f in req.files]
        push = None
        if req.push_size:
            tar = service.workspaces.tmp_path(".push.tar")
            try:
                manifest = await spool(body.chunks(req.push_size), tar)
            except BaseException:
                tar.unlink(missing_ok=True)
                raise
            push = Push(manifest["files"], tar)
            if not tar.stat().st_size:
                tar.unlink()
                push.tar = None
        inbox = Inbox() if req.stream_input else None
        if req.stream_input:  # what follows comes as it is typed: the run's timeouts bound it, not a body rate
            interactive(request.scope)
        todo = RunOnce(req.exec, req.spec, req.sandbox, req.keep, push, files, req.pull, inbox)
        job = service.oneshot.start(todo)
        try:
            await job.ready  # what failed before the sandbox existed is a plain error
        except BaseException:
            job.leave()  # cancelled while it was being made: it goes
            raise
        return FrameStream(job, body, inbox)

    return r


def _file(f: UploadFile) -> bytes:
    try:
        data = base64.b64decode(f.data, validate=True)
    except ValueError as exc:
        raise InvalidError(f"files: {f.path} is not base64", hint="send each file's bytes base64-encoded") from exc
    if len(data) > MAX_FILE:
        raise InvalidError(f"files: {f.path} is {len(data)} bytes; the limit is {MAX_FILE}", hint="push it with --sync")
    return data
