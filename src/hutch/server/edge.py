"""What the HTTP edge does before and around the Service: body limits in the error shape,
internal errors logged once, and waits that end when their client leaves."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from starlette.middleware.body_limit import MAX_BODY_SIZE_SCOPE_KEY
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hutch.errors import InvalidError

T = TypeVar("T")


def too_large(scope: Scope) -> InvalidError:
    limit = scope.get(MAX_BODY_SIZE_SCOPE_KEY)
    what = f"{scope.get('method', '')} {scope.get('path', '')}".strip()
    return InvalidError(
        f"the request body is larger than the limit of {limit} bytes for {what}",
        hint="send less at once: a file is written 64 MiB at most per request (or send a tree with hutch push), "
        "a JSON request is at most 96 MiB",
    )


class _Outermost:
    """Around Starlette's own error handling: a body over its limit, which Starlette answers
    with a plain-text 413 (while reading it, or at once when Content-Length says so), is said
    in the error shape, kind ``invalid``; an unexpected exception, which the app's handler has
    answered (500 ``internal``) and logged with its traceback, stops here (Starlette raises it
    again, and uvicorn would log the same traceback a second time)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        replaced = answered = False

        async def send_error(message: Message) -> None:
            nonlocal replaced, answered
            if message["type"] == "http.response.start":
                answered = True
                headers = dict(message.get("headers", []))
                if message["status"] == 413 and headers.get(b"content-type", b"").startswith(b"text/plain"):
                    replaced = True
                    body = json.dumps(too_large(scope).to_dict()).encode()
                    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
                    await send({"type": "http.response.start", "status": 413, "headers": head})
                    await send({"type": "http.response.body", "body": body})
                    return
            if not replaced:  # the plain-text body of a replaced answer is dropped
                await send(message)

        try:
            await self.app(scope, receive, send_error)
        except Exception:
            if not answered:
                raise


class App(FastAPI):
    """FastAPI, inside :class:`_Outermost`; ``front`` (when set) is a route answered before
    all of it (:mod:`hutch.server.fastexec`), given FastAPI's own entry for everything else
    (FastAPI's and Starlette's entries are per-request work a foreground exec does not need)."""

    front: Callable[[ASGIApp], ASGIApp] | None = None
    _entry: ASGIApp | None = None

    def build_middleware_stack(self) -> ASGIApp:
        return _Outermost(super().build_middleware_stack())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.front is None:
            await super().__call__(scope, receive, send)
            return
        if self._entry is None:
            self._entry = self.front(super().__call__)
        await self._entry(scope, receive, send)


class ClientGone(Exception):  # noqa: N818 - not an error: the client hung up
    """The client left before its answer was ready; nothing is sent (see ``unless_gone``)."""


async def unless_gone(request: Request, work: Awaitable[T]) -> T:
    """``work``, unless the client leaves first: then it is cancelled and :class:`ClientGone`
    raised (a wait whose client hung up must not go on until its deadline). Event-driven:
    the server tells of the hang-up, nothing polls."""

    async def gone() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass  # the request's body (routes that wait have none worth keeping)

    task: asyncio.Future[T] = asyncio.ensure_future(work)
    watch: asyncio.Future[Any] = asyncio.ensure_future(gone())
    pair: list[asyncio.Future[Any]] = [task, watch]
    try:
        await asyncio.wait(pair, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
        task.cancel()  # no-op when it is done; otherwise its client left, or the daemon is stopping
    if task.done() and not task.cancelled():
        return task.result()
    await asyncio.wait({task})  # let it unwind
    if not task.cancelled():
        task.exception()  # retrieved: it lost the race to the hang-up
    raise ClientGone
