"""The E2B API's process table: the pid it handed out for a command, and the hutch run behind
it (``hutch.server.e2b.process``). Kept so that ``commands.connect(pid)``, ``kill`` and
``list`` find a command again after a daemon restart."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from hutch.store.db import Database

FIRST_PID = 1000


@dataclass(frozen=True)
class ProcessRow:
    sandbox_id: str
    pid: int
    run_id: str
    tag: str | None
    pty: bool
    config: dict[str, Any]


def _row(r: sqlite3.Row) -> ProcessRow:
    return ProcessRow(r["sandbox_id"], int(r["pid"]), r["run_id"], r["tag"], bool(r["pty"]), json.loads(r["config"]))


class E2bProcessTable:
    def __init__(self, db: Database) -> None:
        self.db = db

    def add(self, row: ProcessRow) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO e2b_processes (sandbox_id, pid, run_id, tag, pty, config) VALUES (?, ?, ?, ?, ?, ?)",
                (row.sandbox_id, row.pid, row.run_id, row.tag, int(row.pty), json.dumps(row.config)),
            )

    def find(self, sandbox_id: str, pid: int | None, tag: str | None) -> ProcessRow | None:
        """The newest process of ``sandbox_id`` with that pid (or tag)."""
        sql = "SELECT * FROM e2b_processes WHERE sandbox_id = ? AND " + ("pid = ?" if pid is not None else "tag = ?")
        found = self.db.conn().execute(sql + " ORDER BY pid DESC LIMIT 1", (sandbox_id, pid if pid is not None else tag))
        row = found.fetchone()
        return _row(row) if row is not None else None

    def live_of(self, sandbox_id: str) -> list[ProcessRow]:
        """The processes of ``sandbox_id`` whose run is still running."""
        sql = (
            "SELECT p.* FROM e2b_processes p JOIN runs r ON r.id = p.run_id"
            " WHERE p.sandbox_id = ? AND r.status = 'running' ORDER BY p.pid"
        )
        return [_row(r) for r in self.db.conn().execute(sql, (sandbox_id,))]

    def next_pid(self) -> int:
        row = self.db.conn().execute("SELECT MAX(pid) FROM e2b_processes").fetchone()
        return max(FIRST_PID, int(row[0] or 0) + 1)
