"""Approvals: durable requests for a human's decision, and the policy that enforces them.

A request (``apr_...``) is stored before anyone waits on it, so it survives a daemon
restart; every step is an event (``approval_requested``, ``approval_granted``,
``approval_rejected``, ``approval_expired``). A sandbox created with
``--require-approval ACTIONS`` has those actions refused with ``approval_required`` and
the id of a pending request; once a human approved it, the caller retries with
``--approval ID`` and the action is performed (each approval is good for one
performance). Only a client of the daemon's socket can decide: the socket is the
owner's alone and is never visible inside a sandbox.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import fnmatch
import shlex
import time
from collections import Counter
from typing import TYPE_CHECKING

from hutch.checks import check_action
from hutch.errors import ApprovalRequiredError, ConflictError, InvalidError, NotFoundError, PolicyError
from hutch.models import ApprovalRecord, ApprovalStatus, SandboxRecord, SandboxState, new_id

if TYPE_CHECKING:
    from hutch.service import Service

RECHECK = 5.0  # a wait re-reads the store this often: a decision made through another Service on the same store


def command_text(command: list[str] | str) -> str:
    return command if isinstance(command, str) else shlex.join(command)


def gated(rec: SandboxRecord, action: str, detail: str | None = None) -> bool:
    """Does the sandbox's policy require approval for ``action`` (``exec`` with its command)?"""
    for rule in rec.spec.require_approval:
        if action == "exec" and rule.startswith("exec:") and detail is not None:
            if fnmatch.fnmatchcase(detail, rule.removeprefix("exec:")):
                return True
        elif rule == action:
            return True
    return False


class Approvals:
    """The approval use-cases of :class:`hutch.service.Service` (one instance per Service)."""

    def __init__(self, service: Service) -> None:
        self.svc = service
        self.store = service.store
        self._decided: dict[str, asyncio.Event] = {}  # approval id -> set when it is decided or expired
        self._waits: Counter[str] = Counter()  # approval id -> waits in progress

    @property
    def waiting(self) -> int:
        """How many waits are in progress (each ends when decided, expired, timed out or its client left)."""
        return self._waits.total()

    def _wake(self, approval_id: str) -> None:
        event = self._decided.pop(approval_id, None)
        if event is not None:
            event.set()

    def request(
        self,
        action: str,
        sandbox: str | None = None,
        reason: str | None = None,
        timeout: float | None = None,
        detail: str | None = None,
    ) -> ApprovalRecord:
        if not action.strip():
            raise InvalidError("an approval request needs an action", hint='e.g. hutch confirm SBX "deploy to staging"')
        sandbox_id = None
        if sandbox:
            rec = self.svc.get(sandbox)
            if rec.state in (SandboxState.destroyed, SandboxState.failed):
                raise ConflictError(f"sandbox {rec.id} is {rec.state.value}", hint="ask about a live sandbox")
            sandbox_id = rec.id
        now = time.time()
        apr = ApprovalRecord(
            id=new_id("apr"),
            sandbox_id=sandbox_id,
            action=action,
            detail=detail,
            reason=reason,
            status=ApprovalStatus.pending,
            created_at=now,
            expires_at=now + (timeout or self.svc.settings.approval_timeout),
            owner=self.svc.store.sandboxes.get(sandbox_id).owner if sandbox_id else self.svc.access.owner(),
        )
        self.store.approvals.insert(apr)
        return apr

    def get(self, approval_id: str) -> ApprovalRecord:
        """A request the actor may see (another key's does not exist for it)."""
        apr = self.store.approvals.get(approval_id)
        if not self.svc.access.visible(apr.owner):
            raise NotFoundError(f"no approval request {approval_id!r}", hint="list them with: hutch approvals")
        if apr.status == ApprovalStatus.pending and apr.expires_at is not None and apr.expires_at <= time.time():
            self.store.approvals.decide(apr.id, ApprovalStatus.expired, "hutch (timeout)", None, time.time())
            apr = self.store.approvals.get(approval_id)
        return apr

    def list(self, pending: bool = False, sandbox: str | None = None) -> builtins.list[ApprovalRecord]:
        self.expire_due(time.time())
        sandbox_id = self.svc.get(sandbox).id if sandbox else None
        items = self.store.approvals.all(ApprovalStatus.pending if pending else None, sandbox_id)
        return [a for a in items if self.svc.access.visible(a.owner)]

    async def wait(self, approval_id: str, timeout: float | None) -> ApprovalRecord:
        """Until decided or expired, or ``timeout`` seconds (then it is returned still pending).

        Woken by the decision itself: nothing polls (the store is re-read every ``RECHECK``
        seconds for a decision made elsewhere, and at the request's own expiry)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        apr = self.get(approval_id)
        self._waits[approval_id] += 1
        try:
            while apr.status == ApprovalStatus.pending:
                pause = RECHECK
                if deadline is not None:
                    pause = min(pause, deadline - time.monotonic())
                    if pause <= 0:
                        break
                if apr.expires_at is not None:
                    pause = min(pause, max(0.0, apr.expires_at - time.time()) + 0.01)
                event = self._decided.setdefault(approval_id, asyncio.Event())
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), pause)
                apr = self.get(approval_id)
        finally:
            self._waits[approval_id] -= 1
            if not self._waits[approval_id]:
                del self._waits[approval_id]
                self._decided.pop(approval_id, None)
        return apr

    def decide(self, approval_id: str, approve: bool, reason: str | None = None, by: str | None = None) -> ApprovalRecord:
        apr = self.get(approval_id)  # not_found for an unknown id; a request past its time is expired first
        status = ApprovalStatus.approved if approve else ApprovalStatus.rejected
        if apr.status != ApprovalStatus.pending or not self.store.approvals.decide(apr.id, status, by, reason, time.time()):
            apr = self.store.approvals.get(approval_id)
            who = f" by {apr.decided_by}" if apr.decided_by else ""
            raise ConflictError(
                f"approval request {approval_id} is already {apr.status.value}{who}",
                hint="list pending requests with: hutch approvals --pending",
            )
        self._wake(apr.id)
        return self.store.approvals.get(approval_id)

    def close_for(self, sandbox_id: str) -> None:
        """The sandbox is gone: what was pending about it can no longer be performed."""
        for apr in self.store.approvals.all(ApprovalStatus.pending, sandbox_id):
            self.store.approvals.decide(apr.id, ApprovalStatus.expired, "hutch (sandbox destroyed)", None, time.time())
            self._wake(apr.id)

    def expire_due(self, now: float) -> int:
        count = 0
        for apr in self.store.approvals.all(ApprovalStatus.pending):
            due = apr.expires_at is not None and apr.expires_at <= now
            if due and self.store.approvals.decide(apr.id, ApprovalStatus.expired, "hutch (timeout)", None, now):
                count += 1
                self._wake(apr.id)
        return count

    # -- enforcement -----------------------------------------------------------------

    def require(self, rec: SandboxRecord, action: str, approval: str | None, detail: str | None = None) -> None:
        """Pass when the policy does not gate ``action``, or ``approval`` approves exactly this
        action (spent by this call); otherwise refuse with ``approval_required``."""
        check_action(action if action != "exec" else f"exec:{detail or '*'}")
        if not gated(rec, action, detail):
            return
        what = f"{action} {detail}" if detail else action
        if approval:
            apr = self.get(approval)
            if apr.sandbox_id != rec.id or apr.action != action or apr.detail != detail:
                raise InvalidError(
                    f"approval {approval} is for {apr.action} {apr.detail or ''} on {apr.sandbox_id}, not {what} on {rec.id}",
                    hint="retry with the id the approval_required error gave",
                )
            if apr.status == ApprovalStatus.rejected:
                why = f": {apr.decision_reason}" if apr.decision_reason else ""
                raise PolicyError(f"{what} on {rec.id} was rejected by {apr.decided_by or 'a human'}{why}")
            if apr.status == ApprovalStatus.approved:
                if not self.store.approvals.use(apr.id, time.time()):
                    raise ConflictError(
                        f"approval {approval} was already used", hint="each approval is good for one action: ask again"
                    )
                self.store.events.append("approval_used", rec.id, approval_id=apr.id, action=action, detail=detail)
                return
            if apr.status == ApprovalStatus.pending:
                raise self._required(apr, what)
        waiting = [a for a in self.store.approvals.all(ApprovalStatus.pending, rec.id, action) if a.detail == detail]
        apr = waiting[0] if waiting else self.request(action, rec.id, f"required by the sandbox's policy: {what}", None, detail)
        raise self._required(apr, what)

    @staticmethod
    def _required(apr: ApprovalRecord, what: str) -> ApprovalRequiredError:
        return ApprovalRequiredError(
            f"{what} on {apr.sandbox_id} needs a human's approval (request {apr.id})",
            hint=f"a human approves with: hutch approve {apr.id}; then retry with --approval {apr.id}",
            approval_id=apr.id,
        )
