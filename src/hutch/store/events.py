"""The event log: an append-only table, read in ``seq`` order."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence
from typing import Any

from hutch.actors import current_id
from hutch.store.db import Database


def insert_event(
    conn: sqlite3.Connection, when: float, type_: str, sandbox_id: str | None, run_id: str | None, data: dict[str, Any]
) -> int:
    """One event, inside the caller's transaction (a row and its event are written together);
    its ``actor`` is the request's (hutch.actors), None when hutch acts on its own."""
    cur = conn.execute(
        "INSERT INTO events (time, sandbox_id, run_id, type, data, actor) VALUES (?, ?, ?, ?, ?, ?)",
        (when, sandbox_id, run_id, type_, json.dumps(data), current_id()),
    )
    return int(cur.lastrowid or 0)


class EventTable:
    def __init__(self, db: Database) -> None:
        self.db = db

    def append(self, type_: str, sandbox_id: str | None, run_id: str | None = None, **data: Any) -> int:
        """Record one event now; its ``seq``."""
        with self.db.transaction() as conn:
            return insert_event(conn, time.time(), type_, sandbox_id, run_id, data)

    def count(self, sandbox_id: str, types: Sequence[str]) -> dict[str, int]:
        marks = ", ".join("?" for _ in types)
        rows = self.db.conn().execute(
            f"SELECT type, COUNT(*) AS n FROM events WHERE sandbox_id = ? AND type IN ({marks}) GROUP BY type",
            (sandbox_id, *types),
        )
        found = {r["type"]: int(r["n"]) for r in rows}
        return {t: found.get(t, 0) for t in types}

    def all(
        self,
        sandbox_id: str | None = None,
        limit: int = 1000,
        *,
        types: list[str] | None = None,
        since: float | None = None,
        after_seq: int = 0,
        run_id: str | None = None,
        owner: str | None = None,
    ) -> list[dict[str, Any]]:
        """Events after ``after_seq`` (of a sandbox, a run, some types, since a time; with
        ``owner``, only those about its sandboxes or, about none, made by it), oldest first."""
        where: list[str] = ["seq > ?"]
        args: list[Any] = [after_seq]
        if owner is not None:
            where.append("(sandbox_id IN (SELECT id FROM sandboxes WHERE owner = ?) OR (sandbox_id IS NULL AND actor = ?))")
            args += [owner, owner]
        if sandbox_id:
            where.append("sandbox_id = ?")
            args.append(sandbox_id)
        if run_id:
            where.append("run_id = ?")
            args.append(run_id)
        if types:
            where.append(f"type IN ({', '.join('?' for _ in types)})")
            args.extend(types)
        if since is not None:
            where.append("time >= ?")
            args.append(since)
        rows = self.db.conn().execute(f"SELECT * FROM events WHERE {' AND '.join(where)} ORDER BY seq LIMIT ?", (*args, limit))
        return [dict(r) | {"data": json.loads(r["data"])} for r in rows]
