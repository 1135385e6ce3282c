"""The store's connection: one SQLite file shared by the daemon and several CLI processes.

WAL mode and a busy timeout so that they can use it at once; one connection per thread;
the named migrations of :mod:`hutch.store.migrations`, recorded in ``migrations``; one
:meth:`Database.transaction` helper that every write goes through.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hutch.errors import ConflictError, UnavailableError
from hutch.store.migrations import MIGRATIONS


class Database:
    def __init__(self, path: Path | str) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            for suffix in ("", "-wal", "-shm"):  # owner-only, whichever command creates it first
                with contextlib.suppress(OSError):
                    os.close(os.open(self.path + suffix, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600))
        self._local = threading.local()
        self._migrate()

    def conn(self) -> sqlite3.Connection:
        """This thread's connection (opened on first use)."""
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
        """``BEGIN IMMEDIATE`` ... ``COMMIT``; a broken constraint is a ConflictError, a
        failing database (full disk, read-only) an UnavailableError; rolled back on any error."""
        conn = self.conn()
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
        """The names of the migrations this database has had."""
        return [r["name"] for r in self.conn().execute("SELECT name FROM migrations ORDER BY name")]
