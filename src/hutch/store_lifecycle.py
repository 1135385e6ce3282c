"""The store's lifecycle part: activity and approval requests (mixed into
:class:`hutch.store.Store`, which owns the connection; this module does not import
sqlite3), and the lifecycle migration's SQL."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from hutch.errors import NotFoundError
from hutch.models import ApprovalRecord, ApprovalStatus

LIFECYCLE_SQL = """
        ALTER TABLE sandboxes ADD COLUMN expires_at REAL;
        ALTER TABLE sandboxes ADD COLUMN last_active_at REAL;
        ALTER TABLE sandboxes ADD COLUMN parent_id TEXT;
        CREATE INDEX sandboxes_parent ON sandboxes(parent_id);
        DROP INDEX sandboxes_live_name;
        CREATE UNIQUE INDEX sandboxes_live_name ON sandboxes(name)
            WHERE name IS NOT NULL AND state IN ('creating', 'running', 'paused', 'destroying');
        CREATE TABLE approvals (
            id TEXT PRIMARY KEY,
            sandbox_id TEXT,
            action TEXT NOT NULL,
            detail TEXT,
            reason TEXT,
            status TEXT NOT NULL,
            created_at REAL NOT NULL,
            expires_at REAL,
            decided_at REAL,
            decided_by TEXT,
            decision_reason TEXT,
            used_at REAL
        );
        CREATE INDEX approvals_status ON approvals(status, created_at);
"""


class LifecycleStore:
    transaction: Callable[[], AbstractContextManager[Any]]
    _conn: Callable[[], Any]
    by_prefix: Callable[[str, str], Any]

    def touch(self, sandbox_id: str, when: float) -> None:
        """Record activity (for --idle-timeout); no ``updated_at`` change, no event."""
        with self.transaction() as conn:
            conn.execute("UPDATE sandboxes SET last_active_at = ? WHERE id = ?", (when, sandbox_id))

    # -- approvals -------------------------------------------------------------------

    def insert_approval(self, apr: ApprovalRecord) -> None:
        """The request and its ``approval_requested`` event, in one transaction."""
        with self.transaction() as conn:
            conn.execute(
                "INSERT INTO approvals (id, sandbox_id, action, detail, reason, status, created_at, expires_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (apr.id, apr.sandbox_id, apr.action, apr.detail, apr.reason, apr.status.value, apr.created_at, apr.expires_at),
            )
            data = {"approval_id": apr.id, "action": apr.action, "detail": apr.detail, "reason": apr.reason}
            conn.execute(
                "INSERT INTO events (time, sandbox_id, type, data) VALUES (?, ?, 'approval_requested', ?)",
                (apr.created_at, apr.sandbox_id, json.dumps(data)),
            )

    def get_approval(self, approval_id: str) -> ApprovalRecord:
        row = self._conn().execute("SELECT * FROM approvals WHERE id = ?", (approval_id,)).fetchone()
        row = row or self.by_prefix("approvals", approval_id)  # a short id (store_refs)
        if row is None:
            raise NotFoundError(f"no approval request {approval_id!r}", hint="list them with: hutch approvals")
        return ApprovalRecord(**dict(row))

    def list_approvals(
        self, status: ApprovalStatus | None = None, sandbox_id: str | None = None, action: str | None = None
    ) -> list[ApprovalRecord]:
        where, args = ["1 = 1"], []
        for column, value in (("status", status.value if status else None), ("sandbox_id", sandbox_id), ("action", action)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        rows = self._conn().execute(f"SELECT * FROM approvals WHERE {' AND '.join(where)} ORDER BY created_at, id", args)
        return [ApprovalRecord(**dict(r)) for r in rows]

    def decide_approval(self, approval_id: str, status: ApprovalStatus, by: str | None, reason: str | None, now: float) -> bool:
        """pending -> ``status`` with its event, atomically; False when it was no longer pending."""
        with self.transaction() as conn:
            cur = conn.execute(
                "UPDATE approvals SET status = ?, decided_at = ?, decided_by = ?, decision_reason = ?"
                " WHERE id = ? AND status = 'pending'",
                (status.value, now, by, reason, approval_id),
            )
            if cur.rowcount != 1:
                return False
            row = conn.execute("SELECT sandbox_id, action FROM approvals WHERE id = ?", (approval_id,)).fetchone()
            data = {"approval_id": approval_id, "action": row["action"], "by": by, "reason": reason}
            conn.execute(
                "INSERT INTO events (time, sandbox_id, type, data) VALUES (?, ?, ?, ?)",
                (
                    now,
                    row["sandbox_id"],
                    f"approval_{status.value if status != ApprovalStatus.approved else 'granted'}",
                    json.dumps(data),
                ),
            )
            return True

    def use_approval(self, approval_id: str, now: float) -> bool:
        """Spend an approved request once; False when already used (or not approved)."""
        with self.transaction() as conn:
            cur = conn.execute(
                "UPDATE approvals SET used_at = ? WHERE id = ? AND status = 'approved' AND used_at IS NULL", (now, approval_id)
            )
            return bool(cur.rowcount == 1)
