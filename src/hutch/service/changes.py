"""What a sandbox changed: ``hutch diff`` and ``hutch ls --since`` (the provider's ``changes``)."""

from __future__ import annotations

import math
import posixpath
from typing import TYPE_CHECKING, Any

from hutch.errors import InvalidError
from hutch.provider import changes_provider
from hutch.service.files import sandbox_path

if TYPE_CHECKING:
    from hutch.service import Service

MAX_TIME = 1e11  # a Unix time past the year 5000 is not a time


class Changes:
    def __init__(self, service: Service) -> None:
        self.service = service

    async def diff(self, ref: str, since: float | None = None, path: str | None = None) -> dict[str, Any]:
        """The changes of ``ref`` at or under ``path`` (all of them when None), at or after ``since``."""
        if since is not None and not (math.isfinite(since) and 0 <= since <= MAX_TIME):
            raise InvalidError(f"invalid since {since!r}", hint="a Unix time in seconds, e.g. 1767225600")
        svc = self.service
        rec = svc.live(ref)
        provider = changes_provider(svc.provider(rec.provider))
        under = posixpath.normpath(sandbox_path(rec, path)) if path else "/"
        under = "/" + under.lstrip("/")
        found = await svc._guarded(rec, provider.changes(rec, since, under))
        return {"sandbox": rec.id, "path": under} | found
