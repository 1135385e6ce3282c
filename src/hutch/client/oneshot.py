"""The client side of hutch run (``POST /v1/run``, see :mod:`hutch.wire.oneshot`): the tree
packed into the request, the command's input sent as the daemon asks for it, the answer's
frames handed on, and the pulled tree unpacked. The files are the caller's, so they are
packed and unpacked here; everything between (the sandbox, the push, the run, the pull,
the destroy) is the daemon's one use-case.
"""

from __future__ import annotations

import _socket
import _thread
import os
from _queue import Empty, SimpleQueue

from hutch import jsonwire
from hutch.casts import cast
from hutch.client import http1
from hutch.client.transport import MAX_RESPONSE, Response, raise_for
from hutch.errors import HutchError, InvalidError, UnavailableError

# typing, collections, contextlib, json, socket.py and pathlib stay out of hutch run's start.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
    from typing import Any

    from hutch import wire
    from hutch.client.endpoint import Endpoint
    from hutch.client.transport import AsyncTransport, Transport

URL = "/v1/run"
FRAMED = "application/x-hutch-run"
INPUT_PIECE = 64 << 10
PUSH_PIECE = 1 << 20
AHEAD = 64  # frames read ahead of the caller


def kept_line(req: wire.RunOnceRequest) -> bool:
    """A run in a sandbox that stays: one given by id, a tenant's or a reuse key's."""
    spec = req.get("spec") or {}
    return "sandbox" in req or bool(spec.get("tenant") or spec.get("reuse_key"))


def in_sandbox(req: wire.RunOnceRequest, sandbox: str) -> wire.RunOnceRequest:
    """``req`` to run in ``sandbox`` (made or found already) instead of by its spec."""
    return cast("wire.RunOnceRequest", {k: v for k, v in req.items() if k != "spec"} | {"sandbox": sandbox})


def framed(req: wire.RunOnceRequest, push: bytes | None) -> bytes:
    """``<length>\\n<request JSON>`` and the push body (see hutch.wire.oneshot)."""
    if push:
        req = {**req, "push_size": len(push)}
    head = jsonwire.dumps(req).encode()
    return str(len(head)).encode() + b"\n" + head + (push or b"")


class Answer:
    """What the client makes of the answer's frames: ``input`` credit goes to the sender,
    ``pull`` pieces are gathered (at most 256 MiB, as a pull) and unpacked into ``sync``
    once they are complete (``pulled`` then says what came); every other frame is the caller's."""

    def __init__(self, sync: str | None, on_credit: Callable[[int], None] | None = None) -> None:
        self.sync = sync
        self.on_credit = on_credit
        self.tar = bytearray()
        self.pulled: wire.PullSummary | None = None
        self.sandbox: dict[str, Any] = {}
        self.ended = False  # the last frame (done or error) came

    def orphan(self) -> str | None:
        """A sandbox this run made that may outlive an answer cut short (the daemon died under
        it): the client destroys it then, through the next daemon, as a last resort. Once.
        ``""``: cut short before the answer named its sandbox; the client then only makes sure
        a daemon runs (a daemon destroys the sandboxes of runs it did not finish as it starts)."""
        if self.ended:
            return None
        self.ended = True
        if not self.sandbox:
            return ""
        made = self.sandbox.get("created") and not self.sandbox.get("kept")
        return str(self.sandbox["sandbox_id"]) if made else None

    def take(self, frame: dict[str, Any]) -> bool:
        """Whether ``frame`` is the caller's (False: kept here)."""
        kind = frame.get("type")
        if kind == "sandbox":
            self.sandbox = frame
        elif kind in ("done", "error") and self.sandbox:
            self.ended = True
        if kind == "input":
            if self.on_credit is not None:
                self.on_credit(int(frame["credit"]))
            return False
        if kind == "pull":
            import base64

            self.tar += base64.b64decode(frame["data"])
            if len(self.tar) > MAX_RESPONSE:
                raise InvalidError("the pulled workspace is over 256 MiB", hint="pull less: hutch pull with a tree that fits")
            return False
        return True

    def unpack_due(self) -> bool:
        return bool(self.tar) and self.pulled is None and self.sync is not None

    def unpack(self) -> None:
        """The pulled tree into ``sync``; files the command changed overwrite the local ones
        (the local tree was pushed just before)."""
        from pathlib import Path

        from hutch.client import transfer

        assert self.sync is not None
        self.pulled = transfer.pull_into(bytes(self.tar), Path(self.sync), force=True)
        self.tar.clear()


class RunOnceStream:
    """The frames of one hutch run as they come (the request is sent on the first ``next``);
    :meth:`close` ends the request (a sandbox the run made is then destroyed, if it is not
    already). An exception while waiting for a frame (Ctrl-C) leaves the request open: the
    caller may go on reading, or close it."""

    def __init__(self, opener: Callable[[], Lines], answer: Answer, destroy: Callable[[str], object]) -> None:
        self._opener = opener
        self._lines: Lines | None = None
        self._destroy = destroy
        self.answer = answer

    @property
    def pulled(self) -> wire.PullSummary | None:
        return self.answer.pulled

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self

    def __next__(self) -> dict[str, Any]:
        if self._lines is None:
            self._lines = self._opener()
        while True:
            try:
                frame = next(self._lines)
            except (StopIteration, UnavailableError):
                orphan = self.answer.orphan()
                if orphan is not None:
                    import contextlib  # (here: only a lost answer comes this way)

                    with contextlib.suppress(HutchError):
                        self._destroy(orphan)
                raise
            if not self.answer.take(frame):
                continue
            if self.answer.unpack_due():
                self.answer.unpack()
            return frame

    def close(self) -> None:
        if self._lines is not None:
            self._lines.close()


class AsyncRunOnceStream:
    """:class:`RunOnceStream` for the async client."""

    def __init__(
        self, frames: AsyncIterator[dict[str, Any]], answer: Answer, destroy: Callable[[str], Awaitable[object]]
    ) -> None:
        self._frames = frames
        self._destroy = destroy
        self.answer = answer

    @property
    def pulled(self) -> wire.PullSummary | None:
        return self.answer.pulled

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        return self

    async def __anext__(self) -> dict[str, Any]:
        while True:
            try:
                frame = await anext(self._frames)
            except (StopAsyncIteration, UnavailableError):
                orphan = self.answer.orphan()
                if orphan is not None:
                    import contextlib

                    with contextlib.suppress(HutchError):
                        await self._destroy(orphan)
                raise
            if not self.answer.take(frame):
                continue
            if self.answer.unpack_due():
                import asyncio

                await asyncio.to_thread(self.answer.unpack)
            return frame

    async def aclose(self) -> None:
        close = getattr(self._frames, "aclose", None)
        if close is not None:
            await close()


class Outcome:
    """A run's frames gathered into its result, as exec answers one: the exit frame with at
    most ``cap`` bytes of each stream (``truncated`` when there was more); ``sandbox`` and
    ``done`` say where it ran and whether that sandbox is gone. An ``error`` frame raises."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.out = {"stdout": bytearray(), "stderr": bytearray()}
        self.exit: dict[str, Any] | None = None
        self.sandbox: dict[str, Any] = {}
        self.done: dict[str, Any] = {}

    def add(self, frame: dict[str, Any]) -> None:
        import base64

        kind = frame.get("type")
        if kind in ("stdout", "stderr"):
            data = base64.b64decode(frame["data"]) if frame.get("base64") else str(frame["data"]).encode()
            room = self.cap - len(self.out[str(kind)])
            self.out[str(kind)] += data[: max(room, 0)]
        elif kind == "exit":
            self.exit = frame
        elif kind == "sandbox":
            self.sandbox = frame
        elif kind == "done":
            self.done = frame
        elif kind == "error":
            from hutch.errors import HutchError

            raise HutchError.from_dict(frame)

    def result(self) -> wire.ExecResult:
        """The result exec would have answered (the output as exec encodes it)."""
        if self.exit is None:
            from hutch.errors import UnavailableError

            raise UnavailableError("the answer ended before the run did", hint="see hutch runs SANDBOX and hutch poll RUN")
        body: dict[str, Any] = {k: v for k, v in self.exit.items() if k != "type"}
        for name, data in self.out.items():
            body[name], body[f"{name}_base64"] = _text(bytes(data))
        cut = any(int(body.get(f"{n}_bytes", 0)) > len(self.out[n]) for n in self.out)
        body["truncated"] = bool(body.get("truncated")) or cut
        return cast("wire.ExecResult", body)


def _text(data: bytes) -> tuple[str, bool]:
    """UTF-8 text as is; anything else, or text with NULs, as base64 (as exec answers)."""
    try:
        decoded = data.decode("utf-8")
    except UnicodeDecodeError:
        decoded = "\x00"
    if "\x00" in decoded:
        import base64

        return base64.b64encode(data).decode("ascii"), True
    return decoded, False


def stream(
    transport: Transport, req: wire.RunOnceRequest, push: bytes | None, sync: str | None, destroy: Callable[[str], object]
) -> RunOnceStream:
    """hutch run whose request is sent whole (JSON, or framed with a push)."""
    body, media = (framed(req, push), FRAMED) if push else (jsonwire.dumps(req).encode(), "application/json")
    return RunOnceStream(lambda: _open(transport, body, media, None), Answer(sync), destroy)


def astream(
    transport: AsyncTransport,
    req: wire.RunOnceRequest,
    push: bytes | None,
    sync: str | None,
    destroy: Callable[[str], Awaitable[object]],
) -> AsyncRunOnceStream:
    """:func:`stream` for the async client."""
    if push:
        frames = transport.stream("POST", URL, content=framed(req, push), content_type=FRAMED)
    else:
        frames = transport.stream("POST", URL, content=jsonwire.dumps(req).encode(), content_type="application/json")
    return AsyncRunOnceStream(frames, Answer(sync), destroy)


def duplex(
    transport: Transport,
    req: wire.RunOnceRequest,
    push: bytes | None,
    sync: str | None,
    stdin: int,
    destroy: Callable[[str], object],
) -> RunOnceStream:
    """hutch run whose command reads ``stdin`` (a file descriptor) as it comes: the request's
    body goes on, chunked, while the answer streams; nothing is read from ``stdin`` before the
    daemon asks for it."""
    sender = Sender(stdin)
    body = framed({**req, "stream_input": True}, push)
    return RunOnceStream(lambda: _open(transport, body, FRAMED, sender), Answer(sync, sender.grant), destroy)


class Sender:
    """The command's input: read from ``fd`` and sent as chunks of the request's body, never
    more than the daemon allowed (its ``input`` frames' credit); the body ends at EOF."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.sock: _socket.socket | None = None
        self.credit = 0
        self.stopped = False
        import threading  # here: only a piped stdin has a sender

        self.cond = threading.Condition()
        self.thread = threading.Thread(target=self._run, name="hutch-run-input", daemon=True)

    def start(self, sock: _socket.socket) -> None:
        self.sock = sock
        self.thread.start()

    def grant(self, credit: int) -> None:
        with self.cond:
            self.credit += credit
            self.cond.notify()

    def stop(self) -> None:
        with self.cond:
            self.stopped = True
            self.cond.notify()

    def _run(self) -> None:  # a full connection blocks here: the input waits for the command
        assert self.sock is not None
        try:
            while True:
                with self.cond:
                    self.cond.wait_for(lambda: self.credit > 0 or self.stopped)
                    if self.stopped:
                        return
                    want = min(self.credit, INPUT_PIECE)
                data = os.read(self.fd, want)
                with self.cond:
                    if self.stopped:
                        return
                    self.credit -= len(data)
                send_chunk(self.sock, data)
                if not data:
                    return  # the end of the input ends the request's body
        except OSError:
            return  # the request is over (the run ended, or the connection broke)


def send_chunk(sock: _socket.socket, data: bytes) -> None:
    sock.sendall(b"%x\r\n" % len(data) + data + b"\r\n")


class Lines:
    """The answer's NDJSON lines, read by a thread of their own: the caller waits on a queue,
    so an exception while it waits (Ctrl-C) loses nothing and leaves the request open. At most
    ``AHEAD`` lines wait: the reader takes a slot from ``room`` for each (a slow caller blocks
    it, and so the daemon). (``_thread`` and ``_queue``, not ``threading`` and ``queue``: those
    import functools and collections, a tenth of hutch run's start; the thread is a daemon's.)"""

    def __init__(self, transport: Transport, conn: http1.Connection, raw: http1.Response) -> None:
        self.transport = transport
        self.conn = conn
        self.raw = raw
        self.sender: Sender | None = None
        self.closed = False
        self.queue: SimpleQueue[dict[str, Any] | BaseException | None] = SimpleQueue()
        self.room: SimpleQueue[None] = SimpleQueue()
        for _ in range(AHEAD):
            self.room.put(None)
        self.end: list[BaseException | None] = []  # what ended the answer, once the caller met it
        _thread.start_new_thread(self._read, ())

    def _put(self, item: dict[str, Any] | BaseException | None) -> bool:
        while not self.closed:
            try:
                self.room.get(timeout=0.5)
            except Empty:
                continue
            self.queue.put(item)
            return True
        return False

    def _read(self) -> None:  # a slow caller blocks this thread, and so the daemon (backpressure)
        try:
            while line := self.raw.readline(MAX_RESPONSE):
                if not self._put(jsonwire.loads(line)):
                    return
            self._put(None)
        except (OSError, http1.HTTPException) as exc:
            if not self.closed:
                self._put(self.transport.endpoint.unavailable(exc))
        except ValueError as exc:
            self._put(exc)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self

    def __next__(self) -> dict[str, Any]:
        if self.end:  # what ended the answer ends every later next() too
            item: dict[str, Any] | BaseException | None = self.end[0]
        else:
            item = self.queue.get()
            self.room.put(None)
        if item is None or isinstance(item, BaseException):
            self.end[:] = [item]
            if item is None:
                raise StopIteration
            raise item
        return item

    def close(self) -> None:
        self.closed = True
        if self.sender is not None:
            self.sender.stop()
        sock = self.conn.sock
        if sock is not None:
            try:  # noqa: SIM105 - (contextlib stays out of hutch run's start)
                sock.shutdown(_socket.SHUT_RDWR)  # the reader's and the sender's calls return at once
            except OSError:
                pass
        self.conn.close()


def _open(transport: Transport, body: bytes, media: str, sender: Sender | None) -> Lines:
    """Send the request (the body chunked when the command's input follows it) and read the
    answer's head; an error answer raises."""
    endpoint: Endpoint = transport.endpoint
    for attempt in (0, 1):
        conn = endpoint.connection()
        try:
            conn.connect()
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            conn.close()
            if attempt == 0 and transport.autostart:
                from hutch.client.launcher import ensure_daemon  # here: only when no daemon answers

                ensure_daemon(transport.settings)
                continue
            raise endpoint.unavailable(exc) from exc
        except OSError as exc:
            conn.close()
            raise endpoint.unavailable(exc) from exc
        sock = conn.sock
        assert sock is not None
        length = {"transfer-encoding": "chunked"} if sender else {"content-length": str(len(body))}
        try:
            conn.putrequest("POST", URL, skip_accept_encoding=True)
            for key, value in (endpoint.headers() | {"content-type": media} | length).items():
                conn.putheader(key, value)
            conn.endheaders()
            for i in range(0, len(body), PUSH_PIECE):
                piece = body[i : i + PUSH_PIECE]
                send_chunk(sock, piece) if sender else sock.sendall(piece)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the daemon answered before it read it all (a bad request): its answer says why
        except OSError as exc:
            conn.close()
            raise endpoint.unavailable(exc) from exc
        raw = conn.getresponse("POST", begin=False)  # read here: the connection may still send
        try:
            raw.begin()
            if raw.status >= 400:
                raise_for(Response(raw.status, {}, raw.read(MAX_RESPONSE)))
        except (OSError, http1.HTTPException) as exc:
            conn.close()
            raise endpoint.unavailable(exc) from exc
        except BaseException:
            conn.close()
            raise
        lines = Lines(transport, conn, raw)
        if sender is not None:
            lines.sender = sender
            sender.start(sock)
        return lines
    raise AssertionError("unreachable")
