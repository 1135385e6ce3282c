"""The Connect protocol (v1) with the JSON codec, as the E2B SDKs speak it to envd.

Written here (about a hundred lines) rather than taken from the ``connectrpc`` package: that
package serves protobuf classes generated from ``.proto`` files with a protobuf runtime of its
own (the E2B SDK pins ``connectrpc<0.13`` and ``protobuf-py``, which hutch's own dependencies
need not share), while the adapter only needs the wire: plain JSON objects in and out.

- Unary calls: ``POST /pkg.Service/Method``, ``Content-Type: application/json``, the body one
  JSON message; the answer one JSON message, or an error as an HTTP status with
  ``{"code", "message"}``.
- Server streams: ``Content-Type: application/connect+json``; the request body and each
  answer message are *envelopes* (1 flag byte, 4 bytes big-endian length, the JSON); the
  last envelope has flag 0x02 and carries ``{"error": {...}}`` or ``{}`` (end of stream).
- ``Connect-Timeout-Ms`` is the client's deadline for the call.
"""

from __future__ import annotations

import json
import struct
from collections.abc import AsyncIterator
from typing import Any

from hutch.errors import HutchError

UNARY = "application/json"
STREAM = "application/connect+json"
END_STREAM = 0x02
COMPRESSED = 0x01
MAX_MESSAGE = 4 << 20  # a request message (SendInput's stdin chunk, a path): bytes, never more
HTTP_STATUS = {
    "canceled": 499,
    "unknown": 500,
    "invalid_argument": 400,
    "deadline_exceeded": 504,
    "not_found": 404,
    "already_exists": 409,
    "permission_denied": 403,
    "resource_exhausted": 429,
    "failed_precondition": 400,
    "aborted": 409,
    "out_of_range": 400,
    "unimplemented": 501,
    "internal": 500,
    "unavailable": 503,
    "data_loss": 500,
    "unauthenticated": 401,
}
# hutch's error kinds as Connect codes; anything else is ``unavailable`` (the SDK tells the
# sandbox's state by asking), never ``internal``
CODES = {
    "invalid": "invalid_argument",
    "not_found": "not_found",
    "conflict": "failed_precondition",
    "unauthorized": "unauthenticated",
    "capacity": "resource_exhausted",
    "rate_limited": "resource_exhausted",
    "timeout": "deadline_exceeded",
    "policy": "permission_denied",
    "permission_denied": "permission_denied",
    "approval_required": "permission_denied",
    "unavailable": "unavailable",
}


class ConnectError(Exception):
    """An error answered in the Connect shape: ``code`` is a Connect code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    @classmethod
    def of(cls, exc: HutchError) -> ConnectError:
        text = exc.message + (f" ({exc.hint})" if exc.hint else "")
        return cls(CODES.get(exc.kind, "unavailable"), text)

    def body(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message}


def invalid(message: str) -> ConnectError:
    return ConnectError("invalid_argument", message)


def decode(data: bytes) -> dict[str, Any]:
    try:
        msg = json.loads(data or b"{}")
    except (ValueError, UnicodeDecodeError) as exc:
        raise invalid(f"the request message is not JSON: {exc}") from None
    if not isinstance(msg, dict):
        raise invalid("the request message must be a JSON object")
    return msg


def unenvelope(body: bytes) -> dict[str, Any]:
    """The one message of a server-streaming request's body (exactly one envelope)."""
    if len(body) < 5:
        raise invalid(f"a streaming request is one envelope (5 bytes of header and a message), got {len(body)} bytes")
    flags, size = struct.unpack(">BI", body[:5])
    if flags & COMPRESSED:
        raise invalid("compressed messages are not accepted (send Connect-Content-Encoding: identity)")
    if flags & ~COMPRESSED:
        raise invalid(f"unexpected envelope flags {flags:#x} in a request")
    if size != len(body) - 5:
        raise invalid(f"the envelope says {size} bytes but {len(body) - 5} follow")
    return decode(body[5:])


def envelope(message: dict[str, Any], flags: int = 0) -> bytes:
    data = json.dumps(message, separators=(",", ":")).encode()
    return struct.pack(">BI", flags, len(data)) + data


def end_stream(error: ConnectError | None = None) -> bytes:
    return envelope({"error": error.body()} if error is not None else {}, END_STREAM)


def timeout_of(headers: Any) -> float | None:
    """``Connect-Timeout-Ms`` in seconds (None: none given)."""
    raw = headers.get("connect-timeout-ms")
    if raw is None:
        return None
    if not raw.isdigit() or len(raw) > 10:
        raise invalid(f"Connect-Timeout-Ms must be a positive whole number of at most 10 digits, got {raw[:20]!r}")
    return max(int(raw), 1) / 1000.0


async def streamed(messages: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    """A server stream's body: each message enveloped, then the end of the stream (with
    the error that ended it, if any)."""
    try:
        async for message in messages:
            yield envelope(message)
    except ConnectError as exc:
        yield end_stream(exc)
        return
    except HutchError as exc:
        yield end_stream(ConnectError.of(exc))
        return
    yield end_stream()
