"""The workspace tables: snapshots, tenants and push manifests."""

from __future__ import annotations

import json
import time
from typing import Any

from hutch.actors import OWNER_ID, current
from hutch.errors import ConflictError, NotFoundError
from hutch.models import SnapshotRecord
from hutch.store.db import Database


class SnapshotTable:
    def __init__(self, db: Database) -> None:
        self.db = db

    def insert(self, snap: SnapshotRecord) -> None:
        try:
            with self.db.transaction() as conn:
                conn.execute(
                    "INSERT INTO snapshots (name, sandbox_id, provider, path, size, created_at, owner)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (snap.name, snap.sandbox_id, snap.provider, snap.path, snap.size, snap.created_at, snap.owner or OWNER_ID),
                )
        except ConflictError as exc:
            raise ConflictError(
                f"you already have a snapshot named {snap.name!r}",
                hint=f"choose another name, or delete it first: hutch snapshot delete {snap.name}",
            ) from exc

    def get(self, name: str) -> SnapshotRecord:
        """By name, among the actor's own (hutch.actors); an admin's finds its own first, else
        the one snapshot of that name, and when several keys have one, says which (``conflict``)."""
        actor = current()
        conn = self.db.conn()
        row = conn.execute("SELECT * FROM snapshots WHERE owner = ? AND name = ?", (actor.id, name)).fetchone()
        if row is None and actor.admin:
            rows = conn.execute("SELECT * FROM snapshots WHERE name = ? ORDER BY owner LIMIT 11", (name,)).fetchall()
            if len(rows) > 1:
                raise ConflictError(
                    f"several keys have a snapshot named {name!r} (owners {', '.join(r['owner'] for r in rows[:10])})",
                    hint="names are each key's own: act as the key that saved it",
                )
            row = rows[0] if rows else None
        if row is None:
            raise NotFoundError(f"no snapshot {name!r}", hint="list snapshots with: hutch snapshot list")
        return SnapshotRecord(**dict(row))

    def exists(self, owner: str, name: str) -> bool:
        return (
            self.db.conn().execute("SELECT 1 FROM snapshots WHERE owner = ? AND name = ?", (owner, name)).fetchone() is not None
        )

    def all(self) -> list[SnapshotRecord]:
        return [SnapshotRecord(**dict(r)) for r in self.db.conn().execute("SELECT * FROM snapshots ORDER BY created_at")]

    def delete(self, owner: str, name: str) -> bool:
        """False when ``owner`` had no such snapshot."""
        with self.db.transaction() as conn:
            return conn.execute("DELETE FROM snapshots WHERE owner = ? AND name = ?", (owner, name)).rowcount > 0


class TenantTable:
    """Tenants, each its owner's own (like snapshots): two keys may both have a tenant ``agent``.
    ``storage`` is where its provider keeps it (hutch.models.tenant_storage): the name for the
    local user's (and for every tenant made before names were per owner), ``NAME@OWNER`` for
    a key's, so two keys' tenants of one name never share a workspace."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def ensure(self, name: str, provider: str, owner: str | None = None) -> str:
        """Record the tenant unless it is already known; its storage key."""
        owner = owner or OWNER_ID
        with self.db.transaction() as conn:
            row = conn.execute("SELECT storage FROM tenants WHERE owner = ? AND name = ?", (owner, name)).fetchone()
            if row is not None:
                return str(row["storage"])
            taken = conn.execute("SELECT 1 FROM tenants WHERE storage = ?", (name,)).fetchone() is not None
            storage = name if owner == OWNER_ID and not taken else f"{name}@{owner}"
            conn.execute(
                "INSERT INTO tenants (owner, name, provider, storage, created_at) VALUES (?, ?, ?, ?, ?)",
                (owner, name, provider, storage, time.time()),
            )
            return storage

    def all(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self.db.conn().execute("SELECT * FROM tenants ORDER BY name, owner")]

    def get(self, name: str) -> dict[str, Any]:
        """By name, among the actor's own; an admin's finds its own first, else the one tenant of
        that name, and when several keys have one, says which (``conflict``)."""
        actor = current()
        conn = self.db.conn()
        row = conn.execute("SELECT * FROM tenants WHERE owner = ? AND name = ?", (actor.id, name)).fetchone()
        if row is None and actor.admin:
            rows = conn.execute("SELECT * FROM tenants WHERE name = ? ORDER BY owner LIMIT 11", (name,)).fetchall()
            if len(rows) > 1:
                raise ConflictError(
                    f"several keys have a tenant named {name!r} (owners {', '.join(r['owner'] for r in rows[:10])})",
                    hint="names are each key's own: act as the key that made it",
                )
            row = rows[0] if rows else None
        if row is None:
            raise NotFoundError(f"no tenant {name!r}", hint="list tenants with: hutch tenant list")
        return dict(row)

    def delete(self, owner: str, name: str) -> bool:
        """False when ``owner`` had no such tenant."""
        with self.db.transaction() as conn:
            return conn.execute("DELETE FROM tenants WHERE owner = ? AND name = ?", (owner, name)).rowcount > 0


class ManifestTable:
    """What each sandbox's workspace holds after its last sync (path -> type, mode, sha256 ...)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def get(self, sandbox_id: str) -> dict[str, Any]:
        row = self.db.conn().execute("SELECT data FROM manifests WHERE sandbox_id = ?", (sandbox_id,)).fetchone()
        return dict(json.loads(row["data"])) if row else {}

    def set(self, sandbox_id: str, manifest: dict[str, Any]) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO manifests (sandbox_id, data, updated_at) VALUES (?, ?, ?)",
                (sandbox_id, json.dumps(manifest), time.time()),
            )
