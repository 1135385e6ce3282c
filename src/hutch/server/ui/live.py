"""The streams a sandbox's page follows, as Server-Sent Events (``text/event-stream``).

- logs: the sandbox's transcript (every run's output in the order it arrived, or one run's),
  ``event: log`` with ``{"run_id", "stream", "data"}`` (``base64`` when not text), the event id
  its offset;
- events: its audit stream, ``event: hutch`` with the event as ``GET /v1/events`` has it, the
  event id its sequence number.

Both go on while the page is open: a browser that reconnects sends ``Last-Event-ID`` and
resumes where it was. Bounded: a page of at most PAGE bytes or EVENTS events at a time, a
stream of at most STREAM_SECONDS (then the browser reconnects), and a stream ends when its
client leaves (Starlette cancels it on the disconnect). A sandbox that is gone ends its
stream with ``event: gone``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import Request
from fastapi.responses import StreamingResponse

from hutch.errors import HutchError
from hutch.models import SandboxState
from hutch.server.ui.gate import HEADERS
from hutch.service import Service

PAGE = 256 << 10
EVENTS = 500
INTERVAL = 0.4
STREAM_SECONDS = 600.0
ENDED = (SandboxState.destroyed, SandboxState.lost, SandboxState.failed)


def frame(event: str, data: Any, ident: int | None = None) -> bytes:
    head = f"id: {ident}\n" if ident is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def resume_at(request: Request) -> int:
    try:
        return max(0, int(request.headers.get("last-event-id", "0")))
    except ValueError:
        return 0


def respond(items: AsyncIterator[bytes]) -> StreamingResponse:
    headers = HEADERS | {"x-accel-buffering": "no"}
    return StreamingResponse(items, media_type="text/event-stream", headers=headers)


async def _follow(service: Service, ref: str, step: Callable[[], Awaitable[tuple[list[bytes], bool]]]) -> AsyncIterator[bytes]:
    """``step`` again and again (at once while it has more, else every INTERVAL), until the
    sandbox is over and ``step`` says it is drained, or STREAM_SECONDS."""
    yield b"retry: 2000\n\n"
    end = time.monotonic() + STREAM_SECONDS
    while time.monotonic() < end:
        try:
            frames, more = await step()
            state = service.get(ref).state
        except HutchError as exc:
            yield frame("gone", exc.to_dict()["error"])
            return
        for f in frames:
            yield f
        if not more and state in ENDED:
            yield frame("gone", {"kind": "gone", "message": f"sandbox {ref} is {state.value}"})
            return
        if not more:
            yield b": idle\n\n"  # a comment: notices a client that has left
            await asyncio.sleep(INTERVAL)


def _record(r: dict[str, Any]) -> dict[str, Any]:
    return {k: r[k] for k in ("run_id", "stream", "data")} | ({"base64": True} if r["base64"] else {})


def logs(service: Service, ref: str, run: str | None, offset: int) -> AsyncIterator[bytes]:
    service.get(ref)  # not_found before the stream starts
    at = [offset]

    async def step() -> tuple[list[bytes], bool]:
        page = await service.runs.logs(ref, run, at[0], PAGE)
        frames = [frame("log", _record(r), page["next_offset"]) for r in page["records"]]
        more = page["next_offset"] > at[0] and page["next_offset"] < page["size"]
        if page["next_offset"] > at[0] and not frames:
            frames.append(f"id: {page['next_offset']}\n\n".encode())  # other runs' output: skipped, remembered
        at[0] = page["next_offset"]
        return frames, more

    return _follow(service, ref, step)


def events(service: Service, ref: str, after: int) -> AsyncIterator[bytes]:
    service.get(ref)
    at = [after]

    async def step() -> tuple[list[bytes], bool]:
        items = service.events.list(ref, EVENTS, after=at[0])
        if items:
            at[0] = items[-1]["seq"]
        return [frame("hutch", item, item["seq"]) for item in items], len(items) == EVENTS

    return _follow(service, ref, step)
