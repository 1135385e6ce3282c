"""``Idempotency-Key``: a POST that may be sent again (create, background exec) is performed once.

The clients put a fresh key on each such request and send the same key again when the
connection dropped before the answer came (see hutch.client.retry). A repeat of a key the
daemon has seen gets the first request's outcome: its result, or its error (a repeat that
arrives while the first is still being performed waits for it). Keys live in the daemon's
memory for ``TTL`` seconds, at most ``MAX_KEYS`` of them; a key sent again with a different
request is refused. Keys are kept per actor (hutch.actors): on a gateway, a key another API key
sent is not seen (its outcome is that key's, and a clash must not tell that it was used).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from fastapi import Header

from hutch.actors import current
from hutch.errors import ConflictError, HutchError, InvalidError, UnavailableError

T = TypeVar("T")
HEADER = "Idempotency-Key"
TTL = 600.0
MAX_KEYS = 10_000
KEY_RE = re.compile(r"[\x21-\x7e]{1,255}")  # printable ASCII, no spaces
DESCRIPTION = (
    "Makes this POST safe to send again after a dropped connection: a repeat with the same key "
    f"(within {int(TTL)} s) gets the first request's outcome instead of being performed again."
)

Key = Annotated[str | None, Header(alias=HEADER, description=DESCRIPTION)]  # a route's optional key


@dataclass
class _Entry:
    at: float
    fingerprint: str
    outcome: asyncio.Future[Any]


class Idempotency:
    def __init__(self) -> None:
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()

    def _expire(self, now: float) -> None:
        while self._entries:
            key, entry = next(iter(self._entries.items()))
            if now - entry.at < TTL and len(self._entries) <= MAX_KEYS:
                break
            if not entry.outcome.done():  # still being performed: keep it, look no further
                break
            del self._entries[key]

    async def once(self, key: str | None, request: str, call: Callable[[], Awaitable[T]]) -> T:
        """``call()``, or the outcome of the earlier request with the same ``key``;
        ``request`` names what is asked (route and body), so a key reused for another
        request is told apart."""
        if key is None:
            return await call()
        if not KEY_RE.fullmatch(key):
            raise InvalidError(f"invalid {HEADER} header", hint="use 1 to 255 printable ASCII characters, e.g. a random hex id")
        fingerprint = hashlib.sha256(request.encode()).hexdigest()
        now = time.monotonic()
        self._expire(now)
        slot = (current().id, key)
        entry = self._entries.get(slot)
        if entry is not None:
            if entry.fingerprint != fingerprint:
                raise ConflictError(f"the {HEADER} {key!r} was used for another request", hint="use a fresh key for each request")
            result: T = await asyncio.shield(entry.outcome)
            return result
        outcome: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._entries[slot] = _Entry(now, fingerprint, outcome)
        try:
            value = await call()
        except HutchError as exc:  # an answer like any other: a repeat gets it too
            outcome.set_exception(exc)
            outcome.exception()  # retrieved here: nobody may wait for it
            raise
        except BaseException as exc:  # not performed to its end (a bug, a cancel): a later repeat performs it
            self._entries.pop(slot, None)
            why = f"the first request with this {HEADER} did not finish ({exc.__class__.__name__})"
            outcome.set_exception(UnavailableError(why, hint="send it again"))
            outcome.exception()
            raise
        outcome.set_result(value)
        return value
