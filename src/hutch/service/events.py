"""The audit stream read back: ``hutch events`` and ``GET /v1/events``.

Every use-case appends its events to the store as it goes; this is the one way the edges
read them (the server never reads the store itself).
"""

from __future__ import annotations

import builtins
import time
from typing import TYPE_CHECKING, Any

from hutch.errors import InvalidError

if TYPE_CHECKING:
    from hutch.service import Service

FUTURE_SLACK = 86400.0  # a --since further ahead than this is a mistake, not a clock skew


class Events:
    """The event use-cases of :class:`hutch.service.Service` (one instance per Service)."""

    def __init__(self, service: Service) -> None:
        self.service = service

    def list(
        self,
        sandbox: str | None = None,
        limit: int = 1000,
        *,
        types: builtins.list[str] | None = None,
        since: float | None = None,
        after: int = 0,
        run: str | None = None,
    ) -> builtins.list[dict[str, Any]]:
        """Events after ``after`` (a sequence number), oldest first: of one sandbox, one run
        (a short id works too), some types, since a time."""
        store = self.service.store
        sandbox_id = self.service.get(sandbox).id if sandbox else None  # another key's sandbox does not exist
        if since is not None and since > time.time() + FUTURE_SLACK:
            raise InvalidError("--since is in the future", hint="give a past time, e.g. 10m or 2026-11-29T10:00")
        run_id = self.service.runs.get(run)["id"] if run else None
        owner = self.service.access.owner_filter()  # a key reads what is about its own sandboxes, or by it
        return store.events.all(sandbox_id, limit, types=types, since=since, after_seq=after, run_id=run_id, owner=owner)
