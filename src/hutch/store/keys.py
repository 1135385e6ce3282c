"""The API keys of a gateway: one row per key, its secret kept only as a SHA-256 hash.

A revoked key keeps its row (its id stays the owner of what it made, and the audit stream
still names it); its name is free again for a new key.

Every request of a gateway looks its key up (:meth:`KeyTable.get`), so the rows read are kept
in memory while nothing could have changed them: a change made here (create, revoke, rotate)
drops them, and so does any commit to the database by another connection (SQLite's
``PRAGMA data_version``, one cheap statement: another process, or another thread of this one).
A revocation is therefore seen by the very next request; an expiry is checked against the
clock on each request by the caller.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from hutch.errors import ConflictError, NotFoundError
from hutch.store.db import Database
from hutch.store.events import insert_event

COLUMNS = (
    "id, name, hash, scopes, quotas, network_default, network_ceiling, created_at, expires_at, revoked_at, rotated_at, created_by"
)


def _row(row: sqlite3.Row) -> dict[str, Any]:
    out = dict(row)
    out["scopes"] = json.loads(out["scopes"])
    out["quotas"] = json.loads(out["quotas"])
    for name in ("network_default", "network_ceiling"):
        out[name] = json.loads(out[name]) if out[name] else None
    return out


CACHED = 4096  # key rows kept at most (only known keys are kept)


class KeyTable:
    def __init__(self, db: Database) -> None:
        self.db = db
        self._rows: dict[str, dict[str, Any]] = {}
        self._version: tuple[int, int] | None = None  # (connection, its data_version) the rows were read at

    def _changed(self) -> None:
        self._rows = {}
        self._version = None

    def insert(self, key: dict[str, Any]) -> None:
        """A new key (and its ``key_created`` event); ``conflict`` when a live key has its name."""
        try:
            with self.db.transaction() as conn:
                conn.execute(
                    f"INSERT INTO keys ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, ?)",
                    (
                        key["id"],
                        key["name"],
                        key["hash"],
                        json.dumps(key["scopes"]),
                        json.dumps(key.get("quotas") or {}),
                        json.dumps(key["network_default"]) if key.get("network_default") else None,
                        json.dumps(key["network_ceiling"]) if key.get("network_ceiling") else None,
                        key["created_at"],
                        key.get("expires_at"),
                        key.get("created_by"),
                    ),
                )
                data = {"key": key["id"], "name": key["name"], "scopes": key["scopes"]}
                insert_event(conn, key["created_at"], "key_created", None, None, data)
            self._changed()
        except ConflictError as exc:
            raise ConflictError(
                f"a key named {key['name']!r} already exists",
                hint=f"choose another --name, or revoke it first: hutch key revoke {key['name']}",
            ) from exc

    def get(self, key_id: str) -> dict[str, Any] | None:
        """By id (None when unknown): the lookup of every request, so nothing else, and kept
        (see the module's docstring). The row is shared: read it, never change it."""
        conn = self.db.conn()
        version = (id(conn), conn.execute("PRAGMA data_version").fetchone()[0])
        if version != self._version:
            self._rows = {}
            self._version = version
        cached = self._rows.get(key_id)
        if cached is not None:
            return cached
        row = conn.execute(f"SELECT {COLUMNS} FROM keys WHERE id = ?", (key_id,)).fetchone()
        if row is None:
            return None
        out = _row(row)
        if len(self._rows) >= CACHED:
            self._rows = {}
        self._rows[key_id] = out
        return out

    def find(self, ref: str) -> dict[str, Any]:
        """By id, or by the name of a live key (else the newest revoked one of that name)."""
        conn = self.db.conn()
        row = (
            conn.execute(f"SELECT {COLUMNS} FROM keys WHERE id = ?", (ref,)).fetchone()
            or conn.execute(
                f"SELECT {COLUMNS} FROM keys WHERE name = ? ORDER BY revoked_at IS NULL DESC, created_at DESC LIMIT 1", (ref,)
            ).fetchone()
        )
        if row is None:
            raise NotFoundError(f"no key {ref!r}", hint="list keys with: hutch key list")
        return _row(row)

    def all(self) -> list[dict[str, Any]]:
        return [_row(r) for r in self.db.conn().execute(f"SELECT {COLUMNS} FROM keys ORDER BY created_at, id")]

    def revoke(self, key_id: str, now: float) -> bool:
        """False when it was already revoked."""
        with self.db.transaction() as conn:
            cur = conn.execute("UPDATE keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", (now, key_id))
            if cur.rowcount != 1:
                return False
            insert_event(conn, now, "key_revoked", None, None, {"key": key_id})
        self._changed()  # committed: the next request reads the row again
        return True

    def rotate(self, key_id: str, new_hash: str, now: float, expires_at: float | None) -> bool:
        """A new secret for a live key (the old one stops working at once); False when revoked."""
        with self.db.transaction() as conn:
            cur = conn.execute(
                "UPDATE keys SET hash = ?, rotated_at = ?, expires_at = ? WHERE id = ? AND revoked_at IS NULL",
                (new_hash, now, expires_at, key_id),
            )
            if cur.rowcount != 1:
                return False
            insert_event(conn, now, "key_rotated", None, None, {"key": key_id})
        self._changed()
        return True
