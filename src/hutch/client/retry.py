"""When the clients send a request again: after the daemon dropped the connection under it.

A connection can be dropped before the daemon read the request: it closed a kept-alive
connection that had been idle (the async client reuses one for half of ``http_keepalive``,
the daemon keeps it open for all of it, but a stalled process can still cross the two), or it
restarted. GET, HEAD, PUT and DELETE are idempotent and are sent again. A POST is sent again
only when it carries an ``Idempotency-Key`` (create and background exec do): the daemon
performs a keyed request once and answers a repeat with the first one's outcome.

A gateway refuses a request over its key's rate with HTTP 429 ``rate_limited`` and
``Retry-After`` before doing anything: such a request is sent again, whatever its method,
no sooner than the time it says, plus a random share of a window that doubles with each
refusal (callers refused together do not all come back at the same instant), up to
``RATE_ATTEMPTS`` tries; a Retry-After longer than ``MAX_RATE_WAIT`` seconds is the caller's
to decide, and the error is raised. A ``capacity`` answer (a
quota) is not retried: waiting does not free a quota.
"""

from __future__ import annotations

import os

from hutch import jsonwire
from hutch.client.http1 import RemoteDisconnected

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

KEY_HEADER = "idempotency-key"
ATTEMPTS = 3  # the first try and two more
IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
RATE_ATTEMPTS = 10
MAX_RATE_WAIT = 30.0


def new_key() -> dict[str, str]:
    """Headers making one logical request idempotent: every retry of it sends the same key."""
    return {KEY_HEADER: os.urandom(16).hex()}


def may_retry(method: str, headers: Mapping[str, str] | None) -> bool:
    return method.upper() in IDEMPOTENT or bool(headers and KEY_HEADER in headers)


def dropped(exc: BaseException) -> bool:
    """The daemon closed the connection under a request (the sync client's errors)."""
    return isinstance(exc, (ConnectionResetError, BrokenPipeError, ConnectionAbortedError, RemoteDisconnected))


def backoff(wait: float, refused: int) -> float:
    """How long to wait after the ``refused``-th refusal (0 the first) that said ``wait``."""
    import random  # here: only a refused request pays for it

    return min(MAX_RATE_WAIT, wait + random.uniform(0, max(wait, 0.05) * 2**refused))


def rate_wait(status: int, headers: Mapping[str, str], content: bytes) -> float | None:
    """Seconds to wait before sending a ``rate_limited`` request again; None: not to be retried."""
    if status != 429:
        return None
    try:
        error = jsonwire.loads(content)["error"]
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(error, dict) or error.get("kind") != "rate_limited":
        return None
    wait = error.get("retry_after")
    if not isinstance(wait, (int, float)):
        try:
            wait = float(headers.get("retry-after", ""))
        except ValueError:
            return None
    return float(wait) if 0 <= wait <= MAX_RATE_WAIT else None
