"""The exposed ports (``hutch expose``): one row per exposed port of a sandbox, so that an
exposure outlives a restart of the daemon (its nonce too: the private links given before
keep working). A row goes with ``hutch unexpose`` and with its sandbox."""

from __future__ import annotations

from typing import Any

from hutch.store.db import Database

COLUMNS = "sandbox_id, port, public, owner, nonce, created_at"


class PortTable:
    def __init__(self, db: Database) -> None:
        self.db = db

    def put(self, sandbox_id: str, port: int, public: bool, owner: str | None, nonce: str, created_at: float) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                f"INSERT OR REPLACE INTO ports ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
                (sandbox_id, port, int(public), owner, nonce, created_at),
            )

    def delete(self, sandbox_id: str, port: int | None = None) -> None:
        """One port of a sandbox, or (``port`` None) all of them."""
        with self.db.transaction() as conn:
            if port is None:
                conn.execute("DELETE FROM ports WHERE sandbox_id = ?", (sandbox_id,))
            else:
                conn.execute("DELETE FROM ports WHERE sandbox_id = ? AND port = ?", (sandbox_id, port))

    def all(self) -> list[dict[str, Any]]:
        rows = self.db.conn().execute(f"SELECT {COLUMNS} FROM ports ORDER BY created_at")
        return [dict(r) | {"public": bool(r["public"])} for r in rows]
