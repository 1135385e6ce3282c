"""After a daemon restart: what a previous daemon left. Live sandboxes are adopted (followed
again, their runs settled, their network taken up again), dead ones marked ``lost``, ones
cut short in creating or destroying cleaned up, and ones another version of hutch made
(their agent speaks another protocol) kept apart: listed, refused, destroyable.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from hutch.errors import HutchError, IncompatibleError
from hutch.models import LIVE_STATES, SandboxRecord, SandboxState
from hutch.provider import Provider, claims_provider

if TYPE_CHECKING:
    from hutch.service import Service
    from hutch.service.keyring import Scope

log = logging.getLogger("hutch.service")


class Restart:
    def __init__(self, svc: Service) -> None:
        self.svc = svc
        self.deferred: set[str] = set()  # sandboxes whose runs are adopted once their credential is back

    async def start(self) -> dict[str, list[str]]:
        """Re-adopt what a previous daemon left: live sandboxes stay, dead ones are marked lost."""
        report: dict[str, list[str]] = {"adopted": [], "lost": [], "cleaned": [], "incompatible": []}
        store = self.svc.store
        orphans: list[SandboxRecord] = []
        for rec in store.sandboxes.all(LIVE_STATES):
            provider = self.svc.provider(rec.provider)
            if self.svc.claimed(provider) and rec.state != SandboxState.running:
                # its claim holds the truth; hutch cleanup settles the remote side
                store.sandboxes.update(rec.id, state=SandboxState.failed, error="interrupted by a daemon restart")
                report["cleaned"].append(rec.id)
                continue
            try:
                there = rec.state in (SandboxState.running, SandboxState.paused) and await provider.alive(rec)
            except IncompatibleError as exc:  # made by another version of hutch: kept, listed, destroyable
                self.incompatible(rec, exc)
                report["incompatible"].append(rec.id)
                continue
            if there and rec.data.get("oneshot") and rec.state == SandboxState.running:
                orphans.append(rec)  # its hutch run's request ended with the previous daemon
                continue
            if there:
                self.svc.lifecycle.watch(rec)  # not our child any more: followed all the same
                if rec.state == SandboxState.running:  # a paused one's runs are settled once resumed
                    await self.adopt_runs(rec, provider)
                if rec.spec.network.mode != "none":
                    try:  # the proxy listener lived in the previous daemon: take it up again
                        await self.svc._set_network(provider, rec)
                    except HutchError as exc:
                        log.warning("sandbox %s: cannot restore its network: %s", rec.id, exc.message)
                report["adopted"].append(rec.id)
                continue
            store.runs.mark_lost(rec.id, "the sandbox died while the daemon was down")
            if rec.state in (SandboxState.running, SandboxState.paused):
                store.sandboxes.update(rec.id, state=SandboxState.lost, error="the sandbox died while the daemon was down")
                store.events.append("sandbox_lost", rec.id)
                report["lost"].append(rec.id)
            else:
                await provider.destroy(rec)
                final = SandboxState.destroyed if rec.state == SandboxState.destroying else SandboxState.failed
                store.sandboxes.update(rec.id, state=final, error="interrupted by a daemon restart")
                report["cleaned"].append(rec.id)
        for rec in orphans:
            await self.end_oneshot(rec)
            report["cleaned"].append(rec.id)
        return report

    async def end_oneshot(self, rec: SandboxRecord) -> None:
        """A sandbox ``hutch run`` made for one command, left by a daemon that died under the
        run: nobody waits for that run any more, so its runs are settled (a finished one keeps
        its outcome, one still going is lost) and the sandbox is destroyed, not adopted."""
        why = "its hutch run ended with the daemon that ran it"
        provider = self.svc.provider(rec.provider)
        for run in self.svc.store.runs.all(rec.id, "running"):
            try:
                status = await provider.run_status(rec, run["id"])
            except HutchError:
                status = None
            if status is not None:
                self.svc.runs.settle(rec, run, status)
            else:
                self.svc.runs.lose(rec, run, why)
        try:
            await self.svc.destroy(rec.id, cause=why, checked=True)
        except HutchError as exc:
            log.warning("sandbox %s: %s, and could not be destroyed: %s", rec.id, why, exc.message)

    def incompatible(self, rec: SandboxRecord, exc: IncompatibleError) -> None:
        """A sandbox this hutch cannot speak to: every call on it fails with ``exc`` (see
        :meth:`Service.live`) but destroy, which needs no word from it; its death is still noticed."""
        self.svc.lifecycle.watch(rec)
        self.svc.store.runs.mark_lost(rec.id, f"its sandbox cannot be reached any more: {exc.message}")
        if rec.data.get("incompatible") is None:
            self.svc.store.events.append("sandbox_incompatible", rec.id, message=exc.message)
        body = exc.to_dict()["error"]
        self.svc.store.sandboxes.update(rec.id, error=exc.message, data=rec.data | {"incompatible": body})
        log.warning("sandbox %s: %s", rec.id, exc.message)

    async def adopt_runs(self, rec: SandboxRecord, provider: Provider) -> None:
        try:
            await self.svc.runs.adopt(rec)
        except HutchError as exc:  # no credential for its account yet: adopted once one is back
            if not self.svc.claimed(provider):
                raise
            log.warning("sandbox %s: its runs are adopted later: %s", rec.id, exc.message)
            self.deferred.add(rec.id)

    async def rearm(self, scope: Scope) -> None:
        """The daemon holds ``scope``'s credential again: adopt the runs that waited for it and
        settle the account's leftover claims (the reaper expires what is due on its own)."""
        provider = self.svc.provider(scope[0])
        for sandbox_id in sorted(self.deferred):
            rec = self.svc.store.sandboxes.get(sandbox_id)
            if self.svc.keyring.scope_of(rec) == scope:
                self.deferred.discard(sandbox_id)
                if rec.state == SandboxState.running:
                    await self.adopt_runs(rec, provider)
        settled = await self.svc.claims.reconcile(claims_provider(provider), scope[1], scope[2])
        if settled:
            log.info("settled %d claims of account %s at %s", len(settled), scope[2], scope[1])
