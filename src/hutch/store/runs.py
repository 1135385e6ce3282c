"""The runs table: one row per exec, written when it starts and once more when it ends."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence
from typing import Any

from hutch.actors import current
from hutch.errors import NotFoundError
from hutch.models import ExecResult
from hutch.store.db import Database
from hutch.store.events import insert_event
from hutch.store.refs import by_prefix, owned_by


def _run(row: sqlite3.Row) -> dict[str, Any]:
    return dict(row) | {
        "command": json.loads(row["command"]),
        "env_keys": json.loads(row["env_keys"]),
        "background": bool(row["background"]),
        "truncated": bool(row["truncated"]),
    }


class RunTable:
    def __init__(self, db: Database) -> None:
        self.db = db

    def insert(
        self,
        run_id: str,
        sandbox_id: str,
        command: list[str],
        started_at: float,
        *,
        background: bool = False,
        cwd: str | None = None,
        env_keys: list[str] | None = None,
        timeout: float | None = None,
        idle_timeout: float | None = None,
    ) -> None:
        """The run and its ``run_started`` event, in one transaction."""
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO runs (id, sandbox_id, command, status, started_at, background, cwd, env_keys, timeout, idle_timeout)"
                " VALUES (?, ?, ?, 'running', ?, ?, ?, ?, ?, ?)",
                (
                    run_id,
                    sandbox_id,
                    json.dumps(command),
                    started_at,
                    int(background),
                    cwd,
                    json.dumps(env_keys or []),
                    timeout,
                    idle_timeout,
                ),
            )
            data = {"command": command, "env_keys": env_keys or [], "background": background}
            insert_event(conn, started_at, "run_started", sandbox_id, run_id, data)

    def finish(self, result: ExecResult, events: Sequence[tuple[str, dict[str, Any]]] = ()) -> None:
        """Record the outcome and its events (``run_finished`` ...) in one transaction, once:
        a run already final (lost with its sandbox ...) keeps its outcome and gets no events."""
        now = time.time()
        with self.db.transaction() as conn:
            updated = conn.execute(
                "UPDATE runs SET status = ?, exit_code = ?, finished_at = ?, duration_ms = ?, stdout_bytes = ?,"
                " stderr_bytes = ?, truncated = ?, signal = ?, error = ? WHERE id = ? AND status = 'running'",
                (
                    result.status.value,
                    result.exit_code,
                    now,
                    result.duration_ms,
                    result.stdout_bytes,
                    result.stderr_bytes,
                    int(result.stored_truncated),  # the record's output is the stored copy
                    result.signal,
                    result.error,
                    result.run_id,
                ),
            ).rowcount
            for type_, data in events if updated else ():
                insert_event(conn, now, type_, result.sandbox_id, result.run_id, data)

    def get(self, run_id: str) -> dict[str, Any]:
        """By id or by a unique id prefix (refs.py)."""
        conn = self.db.conn()
        row = conn.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone() or by_prefix(
            conn, "runs", run_id, owned_by(current())
        )
        if row is None:
            raise NotFoundError(f"no run {run_id!r}", hint="list a sandbox's runs with: hutch runs SANDBOX")
        return _run(row)

    def all(self, sandbox_id: str, status: str | None = None) -> list[dict[str, Any]]:
        """A sandbox's runs (with ``status``), oldest first."""
        sql, args = "SELECT * FROM runs WHERE sandbox_id = ?", [sandbox_id]
        if status:
            sql, args = sql + " AND status = ?", [*args, status]
        return [_run(r) for r in self.db.conn().execute(sql + " ORDER BY started_at, id", args)]

    def mark_lost(self, sandbox_id: str | None = None, error: str = "lost") -> int:
        """Every run still ``running`` (of one sandbox, or of all) becomes ``lost``; how many did."""
        sql = "UPDATE runs SET status = 'lost', finished_at = ?, error = ? WHERE status = 'running'"
        args: list[Any] = [time.time(), error]
        if sandbox_id:
            sql += " AND sandbox_id = ?"
            args.append(sandbox_id)
        with self.db.transaction() as conn:
            return conn.execute(sql, args).rowcount
