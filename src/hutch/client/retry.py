"""When the clients send a request again: after the daemon dropped the connection under it.

A connection can be dropped before the daemon read the request: it closed a kept-alive
connection that had been idle (the async client reuses one for half of ``http_keepalive``,
the daemon keeps it open for all of it, but a stalled process can still cross the two), or it
restarted. GET, HEAD, PUT and DELETE are idempotent and are sent again. A POST is sent again
only when it carries an ``Idempotency-Key`` (create and background exec do): the daemon
performs a keyed request once and answers a repeat with the first one's outcome.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from hutch.client.http1 import RemoteDisconnected

KEY_HEADER = "idempotency-key"
ATTEMPTS = 3  # the first try and two more
IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})


def new_key() -> dict[str, str]:
    """Headers making one logical request idempotent: every retry of it sends the same key."""
    return {KEY_HEADER: os.urandom(16).hex()}


def may_retry(method: str, headers: Mapping[str, str] | None) -> bool:
    return method.upper() in IDEMPOTENT or bool(headers and KEY_HEADER in headers)


def dropped(exc: BaseException) -> bool:
    """The daemon closed the connection under a request (the sync client's errors)."""
    return isinstance(exc, (ConnectionResetError, BrokenPipeError, ConnectionAbortedError, RemoteDisconnected))
