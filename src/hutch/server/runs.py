"""HTTP routes for runs: exec (JSON, NDJSON stream or background), runs, output, logs, events, ps."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Query, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, StrictInt, ValidationError

from hutch.checks import MAX_INT64
from hutch.errors import HutchError, InvalidError
from hutch.models import ExecRequest, ExecResult, RunRecord
from hutch.provider import Interactive
from hutch.server import idempotency
from hutch.server.edge import unless_gone
from hutch.server.errors import error_body
from hutch.service import Service

NDJSON = "application/x-ndjson"
EXEC_RESPONSE: dict[str, Any] = {
    "model": ExecResult | RunRecord,
    "description": "The run's result (foreground), its record (``background``: it goes on), "
    "or with ``?stream=true`` NDJSON events as output arrives, the result last",
    "content": {NDJSON: {"schema": {"type": "string", "description": "one JSON event per line"}}},
}
INBOX = 64  # client messages (stdin chunks of up to 64 KiB, resizes) queued for a run


class KillRequest(BaseModel):
    signal: str | StrictInt = "TERM"  # strict: true is not signal 1


async def _ndjson(items: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    async for item in items:
        yield json.dumps(item).encode() + b"\n"


def router(service: Service, once: idempotency.Idempotency) -> APIRouter:
    r = APIRouter()
    runs = service.runs

    @r.post("/v1/sandboxes/{ref}/exec", response_model=None, responses={200: EXEC_RESPONSE})
    async def exec_(
        ref: str,
        req: ExecRequest,
        stream: bool = False,
        key: idempotency.Key = None,
    ) -> ExecResult | dict[str, Any] | StreamingResponse:
        """Foreground (JSON result), streamed (``?stream=true``: NDJSON), or ``background``."""
        if req.background:
            return await once.once(key, f"exec {ref} {req.model_dump_json()}", lambda: runs.start(ref, req))
        if key is not None:
            raise InvalidError(
                f"{idempotency.HEADER} is for background runs: a foreground exec is not performed once per key",
                hint="drop the header, or use background: true",
            )
        if stream:
            items = runs.stream(ref, req)
            first = await anext(items)  # errors before the run starts are plain JSON errors
            return StreamingResponse(_ndjson(_prepend(first, items)), media_type=NDJSON)
        return await runs.exec(ref, req)

    @r.get("/v1/sandboxes/{ref}/runs", response_model=None, responses={200: {"model": list[RunRecord]}})
    async def list_runs(ref: str, status: str | None = None) -> list[dict[str, Any]]:
        return runs.list(ref, status)

    @r.get("/v1/runs/{run_id}", response_model=None, responses={200: {"model": RunRecord}})
    async def get_run(run_id: str) -> dict[str, Any]:
        return runs.get(run_id)

    @r.post("/v1/runs/{run_id}/wait", response_model=None, responses={200: {"model": RunRecord}})
    async def wait(run_id: str, request: Request, timeout: float | None = Query(None, gt=0, le=7 * 86400)) -> dict[str, Any]:
        return await unless_gone(request, runs.wait(run_id, timeout))

    @r.post("/v1/runs/{run_id}/kill")
    async def kill(run_id: str, req: KillRequest) -> dict[str, Any]:
        return await runs.kill(run_id, req.signal)

    @r.get("/v1/runs/{run_id}/output")
    async def output(
        run_id: str,
        stdout_offset: int = Query(0, ge=0, le=MAX_INT64),
        stderr_offset: int = Query(0, ge=0, le=MAX_INT64),
        limit: int = Query(1 << 20, ge=1, le=16 << 20),
    ) -> dict[str, Any]:
        return await runs.poll(run_id, {"stdout": stdout_offset, "stderr": stderr_offset}, limit)

    @r.get("/v1/sandboxes/{ref}/logs")
    async def logs(
        ref: str,
        run: str | None = None,
        offset: int = Query(0, ge=0, le=MAX_INT64),
        limit: int = Query(1 << 20, ge=1, le=16 << 20),
    ) -> dict[str, Any]:
        return await runs.logs(ref, run, offset, limit)

    @r.get("/v1/events")
    async def events(
        sandbox: str | None = None,
        type: list[str] | None = Query(None),  # noqa: A002, B008 - the query's name; FastAPI style
        since: float | None = Query(None, allow_inf_nan=False),
        after: int = Query(0, ge=0, le=MAX_INT64),
        limit: int = Query(1000, ge=1, le=100000),
        run: str | None = None,
    ) -> list[dict[str, Any]]:
        return service.events.list(sandbox, limit, types=type, since=since, after=after, run=run)

    @r.get("/v1/sandboxes/{ref}/events")
    async def sandbox_events(ref: str, limit: int = Query(1000, ge=1, le=100000)) -> list[dict[str, Any]]:
        return service.events.list(ref, limit)

    @r.get("/v1/sandboxes/{ref}/ps")
    async def ps(ref: str) -> list[dict[str, Any]]:
        return await runs.ps(ref)

    attach_route(r, service)
    return r


async def _prepend(first: dict[str, Any], rest: AsyncIterator[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
    yield first
    async for item in rest:
        yield item


def attach_route(r: APIRouter, service: Service) -> None:
    """``/v1/sandboxes/{ref}/attach``: a WebSocket for interactive runs (stdin, terminal, resize).

    The client sends ``{"type": "start", ...exec request, "tty", "rows", "cols"}``, then
    ``stdin`` (base64 ``data``), ``resize`` (``rows``, ``cols``) and ``eof`` messages; it
    receives the same events as the NDJSON stream. A client that leaves hangs the run up.
    """

    @r.websocket("/v1/sandboxes/{ref}/attach")
    async def attach(ws: WebSocket, ref: str) -> None:
        await ws.accept()
        try:
            start = await ws.receive_json()
            req = ExecRequest.model_validate({k: v for k, v in start.items() if k not in ("type", "tty", "rows", "cols")})
            rows, cols = _term_size(start.get("rows"), 24), _term_size(start.get("cols"), 80)
            # bounded: input the run does not take waits in the client's socket
            interactive = Interactive(asyncio.Queue(INBOX), tty=bool(start.get("tty")), rows=rows, cols=cols)
            events = service.runs.stream(ref, req, interactive)
            first = await anext(events)
        except (HutchError, ValidationError, ValueError, TypeError) as exc:
            if not isinstance(exc, (HutchError, ValidationError)):  # a bad terminal size, a start that is not an object
                exc = InvalidError(str(exc), hint="send the attach messages docs/api.md describes")
            await ws.send_json({"type": "error"} | error_body(exc)[1])
            await ws.close()
            return

        async def send_all() -> None:
            await ws.send_json(first)
            async for event in events:
                await ws.send_json(event)

        reader = asyncio.create_task(_client_input(ws, interactive.inbox))
        sender = asyncio.create_task(send_all())
        try:
            done, _ = await asyncio.wait({reader, sender}, return_when=asyncio.FIRST_COMPLETED)
            if reader in done and sender not in done:  # the client left: its pending input is moot; hang the run up
                while not interactive.inbox.empty():
                    interactive.inbox.get_nowait()
                interactive.inbox.put_nowait({"hangup": True})
        finally:
            for task in (reader, sender):
                task.cancel()
            # let them finish first: closing the stream while the sender is still inside it fails
            await asyncio.gather(reader, sender, return_exceptions=True)
            await events.aclose()
            with contextlib.suppress(RuntimeError, WebSocketDisconnect):
                await ws.close()


def _term_size(value: Any, default: int) -> int:
    """A terminal's rows or columns: 1-65535 (the kernel's window size is 16 bits); 0 or
    none is ``default`` (a terminal that reports no size)."""
    if not value and default:
        return default
    size = int(value)
    if not 1 <= size <= 0xFFFF:
        raise ValueError(f"a terminal size must be between 1 and 65535, got {size}")
    return size


async def _client_input(ws: WebSocket, inbox: asyncio.Queue[dict[str, Any]]) -> None:
    while True:
        try:
            msg = await ws.receive_json()
        except (WebSocketDisconnect, RuntimeError):
            return
        kind = msg.get("type")
        if kind == "stdin":
            await inbox.put({"stdin": base64.b64decode(msg.get("data", ""))})
        elif kind == "resize":
            with contextlib.suppress(KeyError, TypeError, ValueError):  # a bad size is dropped, not the session
                await inbox.put({"resize": (_term_size(msg["rows"], 0), _term_size(msg["cols"], 0))})
        elif kind == "eof":
            await inbox.put({"eof": True})
