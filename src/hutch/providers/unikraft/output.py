"""A command's output through the sandbox plugin's logs API, while it runs and once it ended
(mixed into the provider)."""

from __future__ import annotations

import base64
import logging
from typing import Any

from hutch.models import SandboxRecord
from hutch.provider import OnOutput
from hutch.providers.unikraft.api import Reply
from hutch.providers.unikraft.wire import HOLD

DRAIN_PAGE = 1 << 20  # output read per request once a streamed command has ended
log = logging.getLogger("hutch.unikraft")


class OutputMixin:
    async def _plugin(self, rec: SandboxRecord, method: str, path: str, what: str, **kw: Any) -> Reply:
        raise NotImplementedError  # the provider's own

    async def _drain(
        self, rec: SandboxRecord, cmd: str, sent: dict[str, int], totals: dict[str, int], on_output: OnOutput
    ) -> None:
        """Pass on what the command wrote past ``sent``, up to ``totals``, a page at a time."""
        for name in ("stdout", "stderr"):
            other = "stderr" if name == "stdout" else "stdout"
            while sent[name] < totals[name]:
                want = min(DRAIN_PAGE, totals[name] - sent[name])
                ranges = {name: {"offset": sent[name], "limit": want}, other: {"offset": 0, "limit": 0}}
                reply = await self._plugin(rec, "GET", f"/commands/{cmd}/logs", "reading output", body=ranges)
                chunk = base64.b64decode(reply.data.get(name) or "")[:want]
                if not chunk:
                    log.warning("the sandbox plugin no longer has %s of command %s past byte %d", name, cmd, sent[name])
                    return
                sent[name] += len(chunk)
                await on_output(name, chunk)

    async def _follow(self, rec: SandboxRecord, cmd: str, sent: dict[str, int], on_output: OnOutput | None) -> bool:
        """New output since ``sent`` (stderr minus the bytes that may be the exit marker)."""
        ranges = {n: {"offset": sent[n]} for n in ("stdout", "stderr")}
        reply = await self._plugin(rec, "GET", f"/commands/{cmd}/logs", "reading output", body=ranges)
        grew = False
        for name in ("stdout", "stderr"):
            chunk = base64.b64decode(reply.data.get(name) or "")
            if name == "stderr":
                chunk = chunk[: max(0, len(chunk) - HOLD)]
            if chunk:
                grew = True
                sent[name] += len(chunk)
                if on_output is not None:
                    await on_output(name, chunk)
        return grew
