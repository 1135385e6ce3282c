"""The app's one error handler: whatever a request meets becomes the error body
``{"error": {"kind", "message", "hint"}}`` with the status of its kind.

- a :class:`~hutch.errors.HutchError`: its own kind and status;
- a request that does not validate (FastAPI's or a model's :class:`ValidationError`): 400 ``invalid``;
- a body over its route's limit (Starlette's 413, raised while the body is read): 413 ``invalid``;
- no such route or method, or a request Starlette refused: its status, ``not_found`` or ``invalid``;
- a key over its rate (:class:`~hutch.errors.RateLimitedError`): 429 ``rate_limited`` with ``Retry-After``;
- a client that hung up before its answer was ready (:class:`~hutch.server.edge.ClientGone`): 499, no body;
- anything else is a bug: 500 ``internal``, logged with its traceback (like an ``internal`` HutchError).

:func:`error_body` is the same mapping for answers that are not HTTP responses (a stream's
last frame, a WebSocket message).
"""

from __future__ import annotations

import logging
import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Scope

from hutch.errors import HutchError, InvalidError, RateLimitedError
from hutch.server.edge import ClientGone, too_large

log = logging.getLogger("hutch.daemon")
HANDLED: tuple[type[Exception], ...] = (
    HutchError,
    ClientGone,
    RequestValidationError,
    ValidationError,
    StarletteHTTPException,
    Exception,
)
CLIENT_GONE = 499  # nginx's "client closed request": nobody reads it


def validation_message(exc: ValidationError | RequestValidationError) -> str:
    parts = []
    for e in exc.errors():
        loc = ".".join(str(x) for x in e.get("loc", ()) if x != "body")
        parts.append(f"{loc}: {e.get('msg')}" if loc else str(e.get("msg")))
    return "; ".join(parts) or "invalid request"


def _http_error(exc: StarletteHTTPException, scope: Scope | None) -> tuple[int, dict[str, Any]]:
    status = exc.status_code
    if status == 413 and scope is not None:  # a body over its route's limit (max_body_size), refused while it was read
        return 413, too_large(scope).to_dict()
    kind = {404: "not_found", 405: "invalid"}.get(status, "invalid" if status < 500 else "internal")
    if status in (404, 405):  # no such route or method: a client newer than the daemon
        hint = "the daemon may be older than this client: restart it with hutch daemon stop"
    elif status < 500:  # the request itself: a body that does not parse, ...
        hint = "send the body the API documents (GET /openapi.json; docs/api.md)"
    else:
        hint = "see hutch daemon logs"
    return status, {"error": {"kind": kind, "message": f"{status}: {exc.detail}", "hint": hint}}


def error_body(exc: BaseException, scope: Scope | None = None) -> tuple[int, dict[str, Any]]:
    """The status and error body of any exception (see the module's docstring)."""
    if isinstance(exc, HutchError):
        return exc.status, exc.to_dict()
    if isinstance(exc, (RequestValidationError, ValidationError)):
        return 400, InvalidError(validation_message(exc), hint="see hutch COMMAND --help").to_dict()
    if isinstance(exc, StarletteHTTPException):
        return _http_error(exc, scope)
    message = f"{exc.__class__.__name__}: {exc}"
    return 500, {"error": {"kind": "internal", "message": message, "hint": "see hutch daemon logs"}}


def unexpected(exc: BaseException) -> bool:
    """A bug, or a failure nobody translated: the log keeps where it came from."""
    if isinstance(exc, HutchError):
        return exc.kind == "internal"
    return not isinstance(exc, (RequestValidationError, ValidationError, StarletteHTTPException, ClientGone))


async def handle(request: Request, exc: Exception) -> Response:
    """The handler of every exception a route raises."""
    if isinstance(exc, ClientGone):
        return Response(status_code=CLIENT_GONE)
    status, body = error_body(exc, request.scope)
    if unexpected(exc):
        log.error("internal error on %s %s: %s", request.method, request.url.path, body["error"]["message"], exc_info=exc)
    return JSONResponse(body, status_code=status, headers=dict(error_headers(exc)) or None)


def error_headers(exc: BaseException) -> list[tuple[str, str]]:
    """The headers an error's answer carries besides its body: ``Retry-After`` of a rate limit
    (nothing was done: send it again then)."""
    if isinstance(exc, RateLimitedError) and exc.retry_after is not None:
        return [("retry-after", str(max(1, math.ceil(exc.retry_after))))]
    return []


def install(app: FastAPI) -> None:
    """One handler for every kind of failure (Starlette picks a handler by the exception's class)."""
    for kind in HANDLED:
        app.add_exception_handler(kind, handle)
