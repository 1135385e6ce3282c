"""The claims table: the durable local record that hutch owns a remote resource.

The workflow is in ``hutch.service.claims``. Every update is a compare-and-set on ``revision``.
"""

from __future__ import annotations

import time
from typing import Any

from hutch.errors import ConflictError, NotFoundError
from hutch.store.db import Database

CLAIM_FIELDS = frozenset({"sandbox_id", "resource_id", "state", "keep", "expires_at", "error"})


class ClaimTable:
    def __init__(self, db: Database) -> None:
        self.db = db

    def insert(self, claim: dict[str, Any]) -> dict[str, Any]:
        now = time.time()
        row = {"revision": 1, "keep": 0, "expires_at": None, "error": None, "resource_id": None} | claim
        row |= {"created_at": now, "updated_at": now}
        cols = ", ".join(row)
        with self.db.transaction() as conn:
            conn.execute(f"INSERT INTO claims ({cols}) VALUES ({', '.join('?' for _ in row)})", tuple(row.values()))
        return self.get(str(row["id"]))

    def get(self, claim_id: str) -> dict[str, Any]:
        """By id or by name."""
        row = self.db.conn().execute("SELECT * FROM claims WHERE id = ? OR name = ?", (claim_id, claim_id)).fetchone()
        if row is None:
            raise NotFoundError(f"no claim {claim_id!r}", hint="list claims with: hutch list --provider PROVIDER")
        return dict(row)

    def of_sandbox(self, sandbox_id: str) -> dict[str, Any] | None:
        """The claim of a sandbox, if it has one."""
        row = self.db.conn().execute("SELECT * FROM claims WHERE sandbox_id = ?", (sandbox_id,)).fetchone()
        return dict(row) if row is not None else None

    def all(self, provider: str | None = None, endpoint: str | None = None) -> list[dict[str, Any]]:
        """The claims (of a provider, at an endpoint), oldest first."""
        sql, args = "SELECT * FROM claims WHERE 1", list[Any]()
        if provider:
            sql, args = sql + " AND provider = ?", [*args, provider]
        if endpoint:
            sql, args = sql + " AND endpoint = ?", [*args, endpoint]
        return [dict(r) for r in self.db.conn().execute(sql + " ORDER BY created_at", args)]

    def update(self, claim_id: str, revision: int, **fields: Any) -> dict[str, Any]:
        """Compare-and-set: fails with ConflictError unless the claim is still at ``revision``."""
        unknown = set(fields) - CLAIM_FIELDS
        if unknown:
            raise ValueError(f"unknown claim fields {unknown}")
        sets = "".join(f"{k} = ?, " for k in fields)
        with self.db.transaction() as conn:
            cur = conn.execute(
                f"UPDATE claims SET {sets}revision = revision + 1, updated_at = ? WHERE id = ? AND revision = ?",
                (*fields.values(), time.time(), claim_id, revision),
            )
            if cur.rowcount != 1:
                raise ConflictError(f"claim {claim_id} changed under us (expected revision {revision})", hint="retry the command")
        return self.get(claim_id)

    def delete(self, claim_id: str, revision: int) -> None:
        """Compare-and-set, like :meth:`update`."""
        with self.db.transaction() as conn:
            cur = conn.execute("DELETE FROM claims WHERE id = ? AND revision = ?", (claim_id, revision))
            if cur.rowcount != 1:
                raise ConflictError(f"claim {claim_id} changed under us (expected revision {revision})", hint="retry the command")
