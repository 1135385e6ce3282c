"""The approvals table: requests for a human's decision, each decided and spent once."""

from __future__ import annotations

from hutch.actors import current
from hutch.errors import NotFoundError
from hutch.models import ApprovalRecord, ApprovalStatus
from hutch.store.db import Database
from hutch.store.events import insert_event
from hutch.store.refs import by_prefix, owned_by


class ApprovalTable:
    def __init__(self, db: Database) -> None:
        self.db = db

    def insert(self, apr: ApprovalRecord) -> None:
        """The request and its ``approval_requested`` event, in one transaction."""
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO approvals (id, sandbox_id, action, detail, reason, status, created_at, expires_at, owner)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    apr.id,
                    apr.sandbox_id,
                    apr.action,
                    apr.detail,
                    apr.reason,
                    apr.status.value,
                    apr.created_at,
                    apr.expires_at,
                    apr.owner,
                ),
            )
            data = {"approval_id": apr.id, "action": apr.action, "detail": apr.detail, "reason": apr.reason}
            insert_event(conn, apr.created_at, "approval_requested", apr.sandbox_id, None, data)

    def get(self, approval_id: str) -> ApprovalRecord:
        """By id or by a unique id prefix (refs.py)."""
        conn = self.db.conn()
        row = conn.execute("SELECT * FROM approvals WHERE id = ?", (approval_id,)).fetchone()
        row = row or by_prefix(conn, "approvals", approval_id, owned_by(current()))
        if row is None:
            raise NotFoundError(f"no approval request {approval_id!r}", hint="list them with: hutch approvals")
        return ApprovalRecord(**dict(row))

    def all(
        self, status: ApprovalStatus | None = None, sandbox_id: str | None = None, action: str | None = None
    ) -> list[ApprovalRecord]:
        """The requests (with ``status``, of a sandbox, for an action), oldest first."""
        where, args = ["1 = 1"], []
        for column, value in (("status", status.value if status else None), ("sandbox_id", sandbox_id), ("action", action)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        rows = self.db.conn().execute(f"SELECT * FROM approvals WHERE {' AND '.join(where)} ORDER BY created_at, id", args)
        return [ApprovalRecord(**dict(r)) for r in rows]

    def decide(self, approval_id: str, status: ApprovalStatus, by: str | None, reason: str | None, now: float) -> bool:
        """pending -> ``status`` with its event, atomically; False when it was no longer pending."""
        with self.db.transaction() as conn:
            cur = conn.execute(
                "UPDATE approvals SET status = ?, decided_at = ?, decided_by = ?, decision_reason = ?"
                " WHERE id = ? AND status = 'pending'",
                (status.value, now, by, reason, approval_id),
            )
            if cur.rowcount != 1:
                return False
            row = conn.execute("SELECT sandbox_id, action FROM approvals WHERE id = ?", (approval_id,)).fetchone()
            data = {"approval_id": approval_id, "action": row["action"], "by": by, "reason": reason}
            type_ = f"approval_{status.value if status != ApprovalStatus.approved else 'granted'}"
            insert_event(conn, now, type_, row["sandbox_id"], None, data)
            return True

    def use(self, approval_id: str, now: float) -> bool:
        """Spend an approved request once; False when already used (or not approved)."""
        with self.db.transaction() as conn:
            cur = conn.execute(
                "UPDATE approvals SET used_at = ? WHERE id = ? AND status = 'approved' AND used_at IS NULL", (now, approval_id)
            )
            return bool(cur.rowcount == 1)
