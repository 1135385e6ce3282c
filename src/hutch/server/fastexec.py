"""The hot path: a foreground ``POST /v1/sandboxes/{ref}/exec`` answered by a plain ASGI handler.

FastAPI's routing, dependency solving and response encoding cost more daemon CPU per exec
than the Service and the provider together (profiled: docs/benchmarks.md). This handler
takes the common case — a foreground JSON exec, no ``?stream``, no ``Idempotency-Key`` —
straight to :meth:`hutch.service.runs.Runs.exec`, with the same validation (the
:class:`~hutch.models.ExecRequest` model), the same error bodies
(:func:`hutch.server.errors.error_body`), the same body limit and the caller's credentials
(:class:`~hutch.server.credentials.CallerCredentials`). Anything else (a background or
streamed run, a key, another content type) goes on to the FastAPI app with the body it sent,
so the published route (``/openapi.json``) stays the one contract.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError
from starlette.middleware.body_limit import MAX_BODY_SIZE_SCOPE_KEY
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hutch.errors import HutchError
from hutch.models import ExecRequest
from hutch.server.credentials import CallerCredentials
from hutch.server.edge import too_large
from hutch.server.errors import error_body, error_headers, unexpected
from hutch.service import Service

log = logging.getLogger("hutch.daemon")
EXEC_PATH = re.compile(r"/v1/sandboxes/([^/]+)/exec")
_KEY = b"idempotency-key"
_JSON = (b"content-type", b"application/json")


class FastExec:
    """ASGI: the foreground exec here, every other request to ``app`` (the FastAPI stack)."""

    def __init__(self, app: ASGIApp, service: Service, max_body: int) -> None:
        self.app = app
        self.service = service
        self.max_body = max_body
        self.handler = CallerCredentials(self._exec, keyring=service.keyring)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["method"] == "POST"
            and not scope.get("query_string")
            and EXEC_PATH.fullmatch(scope["path"]) is not None
            and _plain(scope["headers"])
        ):
            await self.handler(dict(scope), receive, send)
            return
        await self.app(scope, receive, send)

    async def _exec(self, scope: Scope, receive: Receive, send: Send) -> None:
        body, replay = await self._body(scope, receive)
        if body is None:  # the client left mid-body: nobody to answer
            return
        if len(body) > self.max_body:  # refused while it was read
            await _answer(send, 413, too_large({**scope, MAX_BODY_SIZE_SCOPE_KEY: self.max_body}).to_dict())
            return
        try:
            req = ExecRequest.model_validate_json(body)
        except (ValidationError, HutchError) as exc:  # the checks of hutch.checks raise their own
            status, err = error_body(exc)
            await _answer(send, status, err)
            return
        if req.background:  # the general route: performed once per key, answered with the run's record
            await self.app(scope, replay, send)
            return
        ref = EXEC_PATH.fullmatch(scope["path"]).group(1)  # type: ignore[union-attr]
        try:
            result = await self.service.runs.exec(ref, req, early=True)
        except Exception as exc:  # every failure becomes its error body, as the app's handler does
            status, err = error_body(exc, scope)
            if unexpected(exc):
                log.error("internal error on POST %s: %s", scope["path"], err["error"]["message"], exc_info=exc)
            await _answer(send, status, err, error_headers(exc))
            return
        data = result.model_dump_json().encode()
        await send({"type": "http.response.start", "status": 200, "headers": [_JSON, (b"content-length", b"%d" % len(data))]})
        await send({"type": "http.response.body", "body": data})

    async def _body(self, scope: Scope, receive: Receive) -> tuple[bytes | None, Receive]:
        """The body (None when the client left; one byte over the limit when it is larger:
        reading stops there), and a ``receive`` that hands the same body to another app."""
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return None, receive
            chunk = message.get("body", b"")
            size += len(chunk)
            chunks.append(chunk)
            if size > self.max_body:
                break
            more = message.get("more_body", False)
        body = b"".join(chunks)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return body, replay


def _plain(headers: list[tuple[bytes, bytes]]) -> bool:
    """No idempotency key, and JSON (or no content type): what the fast route serves."""
    for key, value in headers:
        if key == _KEY:
            return False
        if key == b"content-type" and not value.startswith(b"application/json"):
            return False
        if key == b"content-length" and value.isdigit() and int(value) > 1 << 20:
            return False  # a large request (stdin): the general route streams its limit check
    return True


async def _answer(send: Send, status: int, body: dict[str, Any], extra: Sequence[tuple[str, str]] = ()) -> None:
    from json import dumps

    data = dumps(body).encode()
    headers = [_JSON, (b"content-length", b"%d" % len(data)), *((k.encode(), v.encode()) for k, v in extra)]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
