"""envd's ``filesystem.Filesystem/WatchDir``, a server stream (the JS SDK's ``watchDir``, the
async Python SDK's ``watch_dir``).

One run in the sandbox per watch: a POSIX shell loop that lists the tree (the same ``find``
and ``stat`` as ListDir) every POLL seconds and prints the listing only when it changed, a
marker line after each; a keepalive line now and then. The adapter turns each new listing
into create/write/remove events against the one before (the first is the baseline, sent as
the stream's ``start``). It is polling in the sandbox, not inotify: a change made and undone
within one poll is not seen, and a write is seen by its size or its mtime (seconds). The
run ends (SIGKILL) when the client leaves, the stream's deadline passes, or the sandbox goes.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import signal
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from hutch.errors import HutchError
from hutch.models import ExecRequest
from hutch.provider import Interactive
from hutch.server.e2b.connect import ConnectError, invalid
from hutch.server.e2b.filesystem import FORMAT, MAX_WATCHERS, Files, changes, snapshot_of
from hutch.service import Service

POLL = "0.5"
ALIVE_EVERY = 60  # polls between keepalive lines (30 s)
MARK = "\x1ehutch-watch\x1e"
ALIVE = "\x1ehutch-alive\x1e"
LOOP = (
    '[ -d "$1" ] || { [ -e "$1" ] && exit 5; exit 3; }; first=1; prev=; n=0; while :; do '
    'cur=$(find "$1" -mindepth 1 -maxdepth "$3" -exec stat -c "$2" -- {} + 2>/dev/null); '
    'if [ "$first" = 1 ] || [ "$cur" != "$prev" ]; then printf "%s\\n%s\\n" "$cur" "$4"; prev="$cur"; first=0; n=0; fi; '
    'n=$((n+1)); if [ "$n" -ge "$6" ]; then printf "%s\\n" "$5"; n=0; fi; '
    'sleep "$7" || exit 0; done'
)


class Watches:
    def __init__(self, service: Service, files: Files) -> None:
        self.svc, self.files = service, files
        self.live: dict[str, int] = {}

    async def start(self, sandbox_id: str, msg: dict[str, Any], deadline: float | None) -> AsyncIterator[dict[str, Any]]:
        path = self.files.full(sandbox_id, msg.get("path"))
        if self.live.get(sandbox_id, 0) >= MAX_WATCHERS:
            raise ConnectError("resource_exhausted", f"sandbox {sandbox_id} has {MAX_WATCHERS} watches")
        depth = "64" if msg.get("recursive") else "1"
        argv = ["/bin/sh", "-c", LOOP, "sh", path, FORMAT, depth, MARK, ALIVE, str(ALIVE_EVERY), POLL]
        inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue(1)
        inbox.put_nowait({"eof": True})
        try:
            req = ExecRequest(command=argv, timeout=deadline)
        except ValueError as exc:
            raise invalid(f"invalid watch: {exc}") from None
        events = self.svc.runs.stream(sandbox_id, req, Interactive(inbox, tty=False, rows=24, cols=80))
        first = await anext(events)  # refusals answer here
        run_id = str(first.get("run_id", ""))
        self.live[sandbox_id] = self.live.get(sandbox_id, 0) + 1
        try:
            reader = Blocks(events)
            block = None
            while block is None:  # the baseline, or why there is none (not found...)
                block = await reader.next_block()
        except BaseException:
            await self._end(sandbox_id, run_id, events)
            raise
        return self._stream(sandbox_id, run_id, events, reader, snapshot_of(block), path)

    async def _stream(
        self,
        sandbox_id: str,
        run_id: str,
        events: AsyncGenerator[dict[str, Any], None],
        reader: Blocks,
        before: dict[str, tuple[str, str]],
        path: str,
    ) -> AsyncIterator[dict[str, Any]]:
        try:
            yield {"start": {}}  # the oneof is the message itself (no wrapper field)
            while True:
                try:
                    block = await reader.next_block()
                except ConnectError as exc:
                    if exc.code == "deadline_exceeded":
                        return  # the client's timeout for the watch: the stream ends
                    raise
                if block is None:
                    yield {"keepalive": {}}
                    continue
                after = snapshot_of(block)
                for change in changes(before, after, path):
                    yield {"filesystem": change}
                before = after
        finally:
            await self._end(sandbox_id, run_id, events)

    async def _end(self, sandbox_id: str, run_id: str, events: AsyncGenerator[dict[str, Any], None]) -> None:
        self.live[sandbox_id] = max(0, self.live.get(sandbox_id, 1) - 1)
        if run_id:
            with contextlib.suppress(HutchError):
                await self.svc.runs.kill(run_id, int(signal.SIGKILL))
        with contextlib.suppress(Exception):
            await events.aclose()


class Blocks:
    """The loop's output cut at its marker lines: a listing (str), or None for a keepalive."""

    def __init__(self, events: AsyncGenerator[dict[str, Any], None]) -> None:
        self.events = events
        self.buf = b""

    async def next_block(self) -> str | None:
        while True:
            hits = [(at, mark) for mark in (MARK, ALIVE) if (at := self.buf.find(mark.encode() + b"\n")) >= 0]
            if hits:
                at, mark = min(hits)
                block, self.buf = self.buf[:at], self.buf[at + len(mark) + 1 :]
                return block.decode(errors="replace") if mark == MARK else None
            event = await anext(self.events, None)
            if event is None:
                raise ConnectError("unavailable", "the watch ended without a word")
            kind = event.get("type")
            if kind == "stdout":
                data = event.get("data", "")
                self.buf += base64.b64decode(data) if event.get("base64") else str(data).encode()
            elif kind == "exit":
                code = int(event.get("exit_code", 0))
                if event.get("status") == "timeout":
                    raise ConnectError("deadline_exceeded", "the watch reached its timeout")
                if code == 3:
                    raise ConnectError("not_found", "the directory to watch does not exist")
                if code == 5:
                    raise invalid("the path to watch is not a directory")
                raise ConnectError("unavailable", f"the watch ended (exit {code})")
            elif kind == "error":
                raise ConnectError("unavailable", str(event.get("message", "the watch failed")))
