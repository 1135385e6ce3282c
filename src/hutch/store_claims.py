"""The claims table's queries, mixed into :class:`hutch.store.Store` (which owns the
connection and the migration ``0006_claims``; this module does not import sqlite3).

A claim is the durable local record that hutch owns a remote resource; the workflow is in
``hutch.service.claims``. Every update is a compare-and-set on ``revision``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from hutch.errors import ConflictError, NotFoundError

CLAIMS_SQL = """
CREATE TABLE claims (
    id TEXT PRIMARY KEY,
    provider TEXT NOT NULL,
    sandbox_id TEXT,
    name TEXT NOT NULL UNIQUE,
    endpoint TEXT NOT NULL,
    account TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    resource_id TEXT,
    state TEXT NOT NULL,
    revision INTEGER NOT NULL DEFAULT 1,
    keep INTEGER NOT NULL DEFAULT 0,
    expires_at REAL,
    error TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE INDEX claims_scope ON claims(provider, endpoint, account);
CREATE INDEX claims_sandbox ON claims(sandbox_id);
"""


class ClaimsStore:
    transaction: Callable[[], AbstractContextManager[Any]]  # provided by Store
    _conn: Callable[[], Any]

    CLAIM_FIELDS = frozenset({"sandbox_id", "resource_id", "state", "keep", "expires_at", "error"})

    def insert_claim(self, claim: dict[str, Any]) -> dict[str, Any]:
        now = time.time()
        row = {"revision": 1, "keep": 0, "expires_at": None, "error": None, "resource_id": None} | claim
        row |= {"created_at": now, "updated_at": now}
        cols = ", ".join(row)
        with self.transaction() as conn:
            conn.execute(f"INSERT INTO claims ({cols}) VALUES ({', '.join('?' for _ in row)})", tuple(row.values()))
        return self.get_claim(str(row["id"]))

    def get_claim(self, claim_id: str) -> dict[str, Any]:
        row = self._conn().execute("SELECT * FROM claims WHERE id = ? OR name = ?", (claim_id, claim_id)).fetchone()
        if row is None:
            raise NotFoundError(f"no claim {claim_id!r}", hint="list claims with: hutch list --provider PROVIDER")
        return dict(row)

    def find_claim(self, sandbox_id: str) -> dict[str, Any] | None:
        row = self._conn().execute("SELECT * FROM claims WHERE sandbox_id = ?", (sandbox_id,)).fetchone()
        return dict(row) if row is not None else None

    def list_claims(self, provider: str | None = None, endpoint: str | None = None) -> list[dict[str, Any]]:
        sql, args = "SELECT * FROM claims WHERE 1", list[Any]()
        if provider:
            sql, args = sql + " AND provider = ?", [*args, provider]
        if endpoint:
            sql, args = sql + " AND endpoint = ?", [*args, endpoint]
        return [dict(r) for r in self._conn().execute(sql + " ORDER BY created_at", args)]

    def update_claim(self, claim_id: str, revision: int, **fields: Any) -> dict[str, Any]:
        """Compare-and-set: fails with ConflictError unless the claim is still at ``revision``."""
        unknown = set(fields) - self.CLAIM_FIELDS
        if unknown:
            raise ValueError(f"unknown claim fields {unknown}")
        sets = "".join(f"{k} = ?, " for k in fields)
        with self.transaction() as conn:
            cur = conn.execute(
                f"UPDATE claims SET {sets}revision = revision + 1, updated_at = ? WHERE id = ? AND revision = ?",
                (*fields.values(), time.time(), claim_id, revision),
            )
            if cur.rowcount != 1:
                raise ConflictError(f"claim {claim_id} changed under us (expected revision {revision})", hint="retry the command")
        return self.get_claim(claim_id)

    def delete_claim(self, claim_id: str, revision: int) -> None:
        with self.transaction() as conn:
            cur = conn.execute("DELETE FROM claims WHERE id = ? AND revision = ?", (claim_id, revision))
            if cur.rowcount != 1:
                raise ConflictError(f"claim {claim_id} changed under us (expected revision {revision})", hint="retry the command")
