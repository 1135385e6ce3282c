"""The SQLite store: the only module that imports sqlite3.

WAL mode and a busy timeout so that the daemon and several CLI processes can use it at
once; named migrations recorded in ``migrations``; one :meth:`Store.transaction` helper.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hutch.errors import ConflictError, NotFoundError, UnavailableError
from hutch.models import (
    ExecResult,
    SandboxRecord,
    SandboxSpec,
    SandboxState,
    SnapshotRecord,
)
from hutch.store_claims import CLAIMS_SQL, ClaimsStore
from hutch.store_lifecycle import LIFECYCLE_SQL, LifecycleStore
from hutch.store_refs import RefsStore

MIGRATIONS: list[tuple[str, str]] = [
    (
        "0001_initial",
        """
        CREATE TABLE sandboxes (
            id TEXT PRIMARY KEY,
            name TEXT,
            provider TEXT NOT NULL,
            state TEXT NOT NULL,
            spec TEXT NOT NULL,
            data TEXT NOT NULL DEFAULT '{}',
            enforcement TEXT NOT NULL DEFAULT '{}',
            error TEXT,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL
        );
        CREATE UNIQUE INDEX sandboxes_live_name ON sandboxes(name)
            WHERE name IS NOT NULL AND state IN ('creating', 'running', 'destroying');
        CREATE TABLE runs (
            id TEXT PRIMARY KEY,
            sandbox_id TEXT NOT NULL REFERENCES sandboxes(id),
            command TEXT NOT NULL,
            status TEXT NOT NULL,
            exit_code INTEGER,
            started_at REAL NOT NULL,
            finished_at REAL,
            duration_ms REAL,
            stdout_bytes INTEGER NOT NULL DEFAULT 0,
            stderr_bytes INTEGER NOT NULL DEFAULT 0,
            truncated INTEGER NOT NULL DEFAULT 0
        );
        CREATE INDEX runs_sandbox ON runs(sandbox_id, started_at);
        CREATE TABLE events (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            time REAL NOT NULL,
            sandbox_id TEXT,
            run_id TEXT,
            type TEXT NOT NULL,
            data TEXT NOT NULL DEFAULT '{}'
        );
        CREATE INDEX events_sandbox ON events(sandbox_id, seq);
        """,
    ),
    (
        "0002_run_details",
        """
        ALTER TABLE runs ADD COLUMN background INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE runs ADD COLUMN cwd TEXT;
        ALTER TABLE runs ADD COLUMN env_keys TEXT NOT NULL DEFAULT '[]';
        ALTER TABLE runs ADD COLUMN timeout REAL;
        ALTER TABLE runs ADD COLUMN idle_timeout REAL;
        ALTER TABLE runs ADD COLUMN signal INTEGER;
        ALTER TABLE runs ADD COLUMN error TEXT;
        CREATE INDEX runs_status ON runs(status);
        CREATE INDEX events_type ON events(type, seq);
        """,
    ),
    (
        "0004_workspaces",
        """
        CREATE TABLE snapshots (
            name TEXT PRIMARY KEY,
            sandbox_id TEXT NOT NULL,
            provider TEXT NOT NULL,
            path TEXT NOT NULL,
            size INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL
        );
        CREATE TABLE tenants (
            name TEXT PRIMARY KEY,
            provider TEXT NOT NULL,
            created_at REAL NOT NULL
        );
        CREATE TABLE manifests (
            sandbox_id TEXT PRIMARY KEY,
            data TEXT NOT NULL,
            updated_at REAL NOT NULL
        );
        """,
    ),
    (
        "0005_lifecycle",
        LIFECYCLE_SQL,
    ),
    ("0006_claims", CLAIMS_SQL),
]
LIVE_SQL = "('creating', 'running', 'paused', 'destroying')"
UNSET: Any = object()


REDACTED = "***"


def redacted(spec: SandboxSpec) -> SandboxSpec:
    """Env values may be secrets: the store keeps the keys only (DESIGN: no secrets in the store)."""
    return spec.model_copy(update={"env": dict.fromkeys(spec.env, REDACTED)})


class Store(LifecycleStore, ClaimsStore, RefsStore):
    def __init__(self, path: Path | str) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            for suffix in ("", "-wal", "-shm"):  # owner-only, whichever command creates it first
                with contextlib.suppress(OSError):
                    os.close(os.open(self.path + suffix, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600))
        self._local = threading.local()
        self._migrate()

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            try:
                conn = sqlite3.connect(self.path, timeout=10.0, isolation_level=None, check_same_thread=False)
                conn.row_factory = sqlite3.Row
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA busy_timeout=10000")
                conn.execute("PRAGMA foreign_keys=ON")
                conn.execute("PRAGMA synchronous=NORMAL")
            except sqlite3.Error as exc:
                raise UnavailableError(
                    f"cannot open the store {self.path}: {exc}", hint="check that the state directory is writable (hutch doctor)"
                ) from exc
            self._local.conn = conn
        return conn

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn()
        try:
            conn.execute("BEGIN IMMEDIATE")
            yield conn
            conn.execute("COMMIT")
        except sqlite3.IntegrityError as exc:
            conn.execute("ROLLBACK")
            raise ConflictError(str(exc)) from exc
        except sqlite3.OperationalError as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            hint = "the disk may be full or the state directory read-only; run hutch doctor"
            raise UnavailableError(f"store error: {exc}", hint=hint) from exc
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _migrate(self) -> None:
        with self.transaction() as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
            done = {r["name"] for r in conn.execute("SELECT name FROM migrations")}
            for name, sql in MIGRATIONS:
                if name in done:
                    continue
                for statement in sql.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute("INSERT INTO migrations VALUES (?, ?)", (name, time.time()))

    def migrations(self) -> list[str]:
        return [r["name"] for r in self._conn().execute("SELECT name FROM migrations ORDER BY name")]

    # -- sandboxes -------------------------------------------------------------------

    @staticmethod
    def _record(row: sqlite3.Row) -> SandboxRecord:
        return SandboxRecord(
            id=row["id"],
            name=row["name"],
            provider=row["provider"],
            state=SandboxState(row["state"]),
            spec=json.loads(row["spec"]),
            data=json.loads(row["data"]),
            enforcement=json.loads(row["enforcement"]),
            error=row["error"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            expires_at=row["expires_at"],
            last_active_at=row["last_active_at"],
        )

    def insert_sandbox(self, rec: SandboxRecord) -> None:
        try:
            with self.transaction() as conn:
                conn.execute(
                    "INSERT INTO sandboxes (id, name, provider, state, spec, data, enforcement, error, created_at, updated_at,"
                    " expires_at, last_active_at, parent_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        rec.id,
                        rec.name,
                        rec.provider,
                        rec.state.value,
                        redacted(rec.spec).model_dump_json(),
                        json.dumps(rec.data),
                        json.dumps(rec.enforcement),
                        rec.error,
                        rec.created_at,
                        rec.updated_at,
                        rec.expires_at,
                        rec.last_active_at,
                        rec.spec.parent,
                    ),
                )
        except ConflictError as exc:
            raise ConflictError(
                f"a sandbox named {rec.name!r} already exists",
                hint=f"choose another --name, or destroy it first: hutch destroy {rec.name}",
            ) from exc

    def update_sandbox(
        self,
        sandbox_id: str,
        *,
        state: SandboxState | None = None,
        data: dict[str, Any] | None = None,
        enforcement: dict[str, str] | None = None,
        error: str | None = None,
        spec: SandboxSpec | None = None,
        expires_at: float | None = UNSET,
        last_active_at: float | None = None,
    ) -> SandboxRecord:
        sets: list[str] = ["updated_at = ?"]
        args: list[Any] = [time.time()]
        if spec is not None:
            sets.append("spec = ?")
            args.append(redacted(spec).model_dump_json())
        if expires_at is not UNSET:
            sets.append("expires_at = ?")
            args.append(expires_at)
        if last_active_at is not None:
            sets.append("last_active_at = ?")
            args.append(last_active_at)
        if state is not None:
            sets.append("state = ?")
            args.append(state.value)
        if data is not None:
            sets.append("data = ?")
            args.append(json.dumps(data))
        if enforcement is not None:
            sets.append("enforcement = ?")
            args.append(json.dumps(enforcement))
        if error is not None:
            sets.append("error = ?")
            args.append(error)
        with self.transaction() as conn:
            conn.execute(f"UPDATE sandboxes SET {', '.join(sets)} WHERE id = ?", (*args, sandbox_id))
        return self.get_sandbox(sandbox_id)

    def get_sandbox(self, ref: str) -> SandboxRecord:
        """By id, by name (a live one, else the newest of any state), or by a unique id prefix (store_refs)."""
        conn = self._conn()
        row = conn.execute("SELECT * FROM sandboxes WHERE id = ?", (ref,)).fetchone()
        if row is None:
            row = conn.execute(
                f"SELECT * FROM sandboxes WHERE name = ? ORDER BY state IN {LIVE_SQL} DESC, created_at DESC LIMIT 1",
                (ref,),
            ).fetchone() or self.by_prefix("sandboxes", ref)
        if row is None:
            raise NotFoundError(f"no sandbox {ref!r}", hint="list sandboxes with: hutch list")
        return self._record(row)

    def list_sandboxes(self, states: tuple[SandboxState, ...] | None = None, *, parent: str | None = None) -> list[SandboxRecord]:
        where: list[str] = []
        args: list[Any] = []
        if states:
            where.append(f"state IN ({', '.join('?' for _ in states)})")
            args += [s.value for s in states]
        if parent:
            where.append("parent_id = ?")
            args.append(parent)
        sql = "SELECT * FROM sandboxes" + (f" WHERE {' AND '.join(where)}" if where else "")
        return [self._record(r) for r in self._conn().execute(sql + " ORDER BY created_at", args)]

    # -- runs ------------------------------------------------------------------------

    def insert_run(
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
        with self.transaction() as conn:
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
            conn.execute(
                "INSERT INTO events (time, sandbox_id, run_id, type, data) VALUES (?, ?, ?, 'run_started', ?)",
                (started_at, sandbox_id, run_id, json.dumps(data)),
            )

    def finish_run(self, result: ExecResult, events: Sequence[tuple[str, dict[str, Any]]] = ()) -> None:
        """Record the outcome and its events (``run_finished`` ...) in one transaction, once:
        a run already final (lost with its sandbox ...) keeps its outcome and gets no events."""
        now = time.time()
        with self.transaction() as conn:
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
                    int(result.truncated),
                    result.signal,
                    result.error,
                    result.run_id,
                ),
            ).rowcount
            for type_, data in events if updated else ():
                conn.execute(
                    "INSERT INTO events (time, sandbox_id, run_id, type, data) VALUES (?, ?, ?, ?, ?)",
                    (now, result.sandbox_id, result.run_id, type_, json.dumps(data)),
                )

    @staticmethod
    def _run(row: sqlite3.Row) -> dict[str, Any]:
        return dict(row) | {
            "command": json.loads(row["command"]),
            "env_keys": json.loads(row["env_keys"]),
            "background": bool(row["background"]),
            "truncated": bool(row["truncated"]),
        }

    def get_run(self, run_id: str) -> dict[str, Any]:
        row = self._conn().execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone() or self.by_prefix("runs", run_id)
        if row is None:
            raise NotFoundError(f"no run {run_id!r}", hint="list a sandbox's runs with: hutch runs SANDBOX")
        return self._run(row)

    def list_runs(self, sandbox_id: str, status: str | None = None) -> list[dict[str, Any]]:
        sql, args = "SELECT * FROM runs WHERE sandbox_id = ?", [sandbox_id]
        if status:
            sql, args = sql + " AND status = ?", [*args, status]
        return [self._run(r) for r in self._conn().execute(sql + " ORDER BY started_at, id", args)]

    def mark_running_runs_lost(self, sandbox_id: str | None = None, error: str = "lost") -> int:
        sql = "UPDATE runs SET status = 'lost', finished_at = ?, error = ? WHERE status = 'running'"
        args: list[Any] = [time.time(), error]
        if sandbox_id:
            sql += " AND sandbox_id = ?"
            args.append(sandbox_id)
        with self.transaction() as conn:
            return conn.execute(sql, args).rowcount

    # -- events ----------------------------------------------------------------------

    def append_event(self, type_: str, sandbox_id: str | None, run_id: str | None = None, **data: Any) -> int:
        with self.transaction() as conn:
            cur = conn.execute(
                "INSERT INTO events (time, sandbox_id, run_id, type, data) VALUES (?, ?, ?, ?, ?)",
                (time.time(), sandbox_id, run_id, type_, json.dumps(data)),
            )
            return int(cur.lastrowid or 0)

    def count_events(self, sandbox_id: str, types: Sequence[str]) -> dict[str, int]:
        marks = ", ".join("?" for _ in types)
        rows = self._conn().execute(
            f"SELECT type, COUNT(*) AS n FROM events WHERE sandbox_id = ? AND type IN ({marks}) GROUP BY type",
            (sandbox_id, *types),
        )
        found = {r["type"]: int(r["n"]) for r in rows}
        return {t: found.get(t, 0) for t in types}

    def list_events(
        self,
        sandbox_id: str | None = None,
        limit: int = 1000,
        *,
        types: list[str] | None = None,
        since: float | None = None,
        after_seq: int = 0,
        run_id: str | None = None,
    ) -> list[dict[str, Any]]:
        where: list[str] = ["seq > ?"]
        args: list[Any] = [after_seq]
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
        rows = self._conn().execute(f"SELECT * FROM events WHERE {' AND '.join(where)} ORDER BY seq LIMIT ?", (*args, limit))
        return [dict(r) | {"data": json.loads(r["data"])} for r in rows]

    # -- workspaces: snapshots, tenants, push manifests --------------------------------

    def insert_snapshot(self, snap: SnapshotRecord) -> None:
        try:
            with self.transaction() as conn:
                conn.execute(
                    "INSERT INTO snapshots (name, sandbox_id, provider, path, size, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                    (snap.name, snap.sandbox_id, snap.provider, snap.path, snap.size, snap.created_at),
                )
        except ConflictError as exc:
            raise ConflictError(
                f"a snapshot named {snap.name!r} already exists",
                hint=f"choose another name, or delete it first: hutch snapshot delete {snap.name}",
            ) from exc

    def get_snapshot(self, name: str) -> SnapshotRecord:
        row = self._conn().execute("SELECT * FROM snapshots WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise NotFoundError(f"no snapshot {name!r}", hint="list snapshots with: hutch snapshot list")
        return SnapshotRecord(**dict(row))

    def list_snapshots(self) -> list[SnapshotRecord]:
        return [SnapshotRecord(**dict(r)) for r in self._conn().execute("SELECT * FROM snapshots ORDER BY created_at")]

    def delete_snapshot(self, name: str) -> bool:
        with self.transaction() as conn:
            return conn.execute("DELETE FROM snapshots WHERE name = ?", (name,)).rowcount > 0

    def ensure_tenant(self, name: str, provider: str) -> None:
        with self.transaction() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO tenants (name, provider, created_at) VALUES (?, ?, ?)", (name, provider, time.time())
            )

    def list_tenants(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self._conn().execute("SELECT * FROM tenants ORDER BY name")]

    def get_tenant(self, name: str) -> dict[str, Any]:
        row = self._conn().execute("SELECT * FROM tenants WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise NotFoundError(f"no tenant {name!r}", hint="list tenants with: hutch tenant list")
        return dict(row)

    def delete_tenant(self, name: str) -> bool:
        with self.transaction() as conn:
            return conn.execute("DELETE FROM tenants WHERE name = ?", (name,)).rowcount > 0

    def get_manifest(self, sandbox_id: str) -> dict[str, Any]:
        row = self._conn().execute("SELECT data FROM manifests WHERE sandbox_id = ?", (sandbox_id,)).fetchone()
        return dict(json.loads(row["data"])) if row else {}

    def set_manifest(self, sandbox_id: str, manifest: dict[str, Any]) -> None:
        with self.transaction() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO manifests (sandbox_id, data, updated_at) VALUES (?, ?, ?)",
                (sandbox_id, json.dumps(manifest), time.time()),
            )
