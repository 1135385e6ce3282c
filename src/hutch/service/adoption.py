"""Runs after a daemon restart: settling the runs a previous daemon left 'running'.

Mixed into :class:`hutch.service.runs.Runs`. A run that finished meanwhile gets its real
outcome from the provider's record, one still going is followed again, one whose
processes died is ``lost``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hutch.errors import HutchError
from hutch.models import ExecResult, RawOutput, RunStatus, SandboxRecord, SandboxState

if TYPE_CHECKING:
    from hutch.service import Service
    from hutch.store import Store

WATCH_INTERVAL = 0.2


class Adoption:
    """Adopting, settling and losing runs (the attributes are :class:`Runs`' own)."""

    svc: Service
    store: Store
    _spawn: Callable[[Any, str], asyncio.Task[ExecResult]]
    _record: Callable[[ExecResult, bool], None]
    result: Callable[[str, str, RawOutput, float, int], ExecResult]

    async def adopt(self, rec: SandboxRecord) -> dict[str, int]:
        """Settle the runs a previous daemon left 'running' in a sandbox that is still alive."""
        counts = {"finished": 0, "running": 0, "lost": 0}
        provider = self.svc.provider(rec.provider)
        running = self.store.runs.all(rec.id, "running")
        if not running:
            return counts
        alive: set[str] | None
        try:
            alive = await provider.runs_alive(rec)
        except HutchError:
            alive = None  # not answering just now: follow every run until it is known
        for run in running:
            status = await provider.run_status(rec, run["id"])
            if status is not None:
                self.settle(rec, run, status)
                counts["finished"] += 1
            elif alive is None or run["id"] in alive:
                self._spawn(self._watch(rec, run), run["id"])
                counts["running"] += 1
            else:
                self.lose(rec, run, "its processes died while the daemon was down")
                counts["lost"] += 1
        return counts

    def settle(self, rec: SandboxRecord, run: dict[str, Any], raw: RawOutput) -> ExecResult:
        duration = ((raw.finished_at or time.time()) - run["started_at"]) * 1000
        result = self.result(rec.id, run["id"], raw, duration, 0)
        result.truncated = raw.truncated_on_disk
        self._record(result, False)
        return result

    def lose(self, rec: SandboxRecord, run: dict[str, Any], why: str) -> ExecResult:
        lost = ExecResult(
            run_id=run["id"],
            sandbox_id=rec.id,
            exit_code=125,
            status=RunStatus.lost,
            stdout="",
            stderr="",
            duration_ms=(time.time() - run["started_at"]) * 1000,
            error=why,
        )
        self._record(lost, False)
        return lost

    async def _watch(self, rec: SandboxRecord, run: dict[str, Any]) -> ExecResult:
        """Follow an adopted run through its status file until it ends."""
        provider = self.svc.provider(rec.provider)
        while True:
            await asyncio.sleep(WATCH_INTERVAL)
            status = await provider.run_status(rec, run["id"])
            if status is not None:
                return self.settle(rec, run, status)
            now = self.store.sandboxes.get(rec.id)
            if now.state == SandboxState.paused:
                continue  # frozen: its runs are neither alive nor dead until it is resumed
            try:
                alive = await provider.runs_alive(rec)
            except HutchError:
                if now.state == SandboxState.running and await provider.alive(now):
                    continue  # the sandbox is there but did not answer this time: ask again
                alive = set()
            if run["id"] not in alive:
                status = await provider.run_status(rec, run["id"])  # it may have just finished
                return self.settle(rec, run, status) if status else self.lose(rec, run, "its processes died")
