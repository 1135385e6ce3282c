"""The image tables: stored images (manifest + config, by config digest) and the names that point at them.

An image's files (blobs, unpacked layers, its flattened root filesystem) live on disk under the
state directory (``hutch.providers.local.images.store``); these rows say which images exist,
what they are made of (so unreferenced files can be pruned) and which names resolve to them.
A name is canonical (``docker.io/library/python:3.12``, ``localhost:5000/team/img@sha256:...``).
"""

from __future__ import annotations

import json
import time
from typing import Any

from hutch.actors import OWNER_ID, current
from hutch.errors import ConflictError
from hutch.store.db import Database

SHOWN = 10


def _row(row: Any) -> dict[str, Any]:
    out = dict(row)
    for key in ("manifest", "config", "layers"):
        out[key] = json.loads(out[key])
    return out


class ImageTable:
    """Rows of ``images`` (``id`` = the config's digest), ``image_owners`` and ``image_names``.

    An image is held by the owners (``hutch.actors``: the local user ``owner``, a key) that pulled,
    imported or committed it, and each owner names images in a namespace of its own: two keys may
    both call something ``app:1``. Its files are shared (content-addressed); the row goes when its
    last owner lets it go. ``owner=None`` in a read means every owner's (an admin's view).
    """

    def __init__(self, db: Database) -> None:
        self.db = db

    def put(self, image: dict[str, Any], names: list[str], owner: str | None = None) -> None:
        """Record ``image`` (unless known) as held by ``owner`` (default: the request's actor) and point
        the owner's ``names`` at it (a name of that owner that pointed at another image moves)."""
        owner = owner if owner is not None else current().id
        now = time.time()
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO images (id, manifest_digest, manifest, config, layers, size, platform, source, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    image["id"],
                    image["manifest_digest"],
                    json.dumps(image["manifest"]),
                    json.dumps(image["config"]),
                    json.dumps(image["layers"]),
                    image["size"],
                    image["platform"],
                    image["source"],
                    now,
                ),
            )
            conn.execute("INSERT OR IGNORE INTO image_owners (image_id, owner) VALUES (?, ?)", (image["id"], owner))
            for name in names:
                conn.execute(
                    "INSERT INTO image_names (owner, name, image_id, updated_at) VALUES (?, ?, ?, ?)"
                    " ON CONFLICT(owner, name) DO UPDATE SET image_id = excluded.image_id, updated_at = excluded.updated_at",
                    (owner, name, image["id"], now),
                )

    def get(self, image_id: str) -> dict[str, Any] | None:
        row = self.db.conn().execute("SELECT * FROM images WHERE id = ?", (image_id,)).fetchone()
        return _row(row) if row is not None else None

    def owners(self, image_id: str) -> list[str]:
        rows = self.db.conn().execute("SELECT owner FROM image_owners WHERE image_id = ? ORDER BY owner", (image_id,))
        return [str(r["owner"]) for r in rows]

    def held(self, image_id: str, owner: str | None) -> bool:
        """Whether ``owner`` holds ``image_id`` (None: whether the image exists)."""
        if owner is None:
            return self.get(image_id) is not None
        row = self.db.conn().execute("SELECT 1 FROM image_owners WHERE image_id = ? AND owner = ?", (image_id, owner))
        return row.fetchone() is not None

    def by_name(self, name: str, owner: str | None = None, prefer: str | None = None) -> str | None:
        """The id of the image ``owner``'s ``name`` points at (owner None: any owner's, ``prefer``'s first)."""
        found = self.named(name, owner, prefer)
        return found[1] if found is not None else None

    def named(self, name: str, owner: str | None = None, prefer: str | None = None) -> tuple[str, str] | None:
        """Whose ``name`` it is and the image id it points at (see :meth:`by_name`)."""
        args: tuple[str, ...]
        if owner is not None:
            sql, args = "SELECT owner, image_id FROM image_names WHERE name = ? AND owner = ?", (name, owner)
        else:  # the preferred owner's, then the local user's, then the newest
            sql = (
                "SELECT owner, image_id FROM image_names WHERE name = ? ORDER BY owner = ? DESC, owner = ? DESC, updated_at DESC"
            )
            args = (name, prefer or OWNER_ID, OWNER_ID)
        row = self.db.conn().execute(sql + " LIMIT 1", args).fetchone()
        return (str(row["owner"]), str(row["image_id"])) if row is not None else None

    def by_prefix(self, hex_prefix: str, owner: str | None = None) -> str | None:
        """The one image (of ``owner``'s) whose id starts with ``sha256:HEX_PREFIX``; ``conflict`` when several do."""
        start = "sha256:" + hex_prefix
        sql = "SELECT id FROM images WHERE id >= ? AND id < ?"
        args: tuple[Any, ...] = (start, start + "\uffff")
        if owner is not None:
            sql += " AND id IN (SELECT image_id FROM image_owners WHERE owner = ?)"
            args += (owner,)
        rows = self.db.conn().execute(sql + " ORDER BY id LIMIT ?", (*args, SHOWN + 1)).fetchall()
        if len(rows) > 1:
            ids = ", ".join(r["id"][7:19] for r in rows[:SHOWN])
            raise ConflictError(f"{hex_prefix!r} is the start of several image ids: {ids}", hint="give more of the id")
        return str(rows[0]["id"]) if rows else None

    def by_manifest(self, digest: str, owner: str | None = None) -> str | None:
        """The id of an image (of ``owner``'s) whose manifest has ``digest``."""
        sql, args = "SELECT id FROM images WHERE manifest_digest = ?", (digest,)
        args2: tuple[str, ...] = args
        if owner is not None:
            sql, args2 = sql + " AND id IN (SELECT image_id FROM image_owners WHERE owner = ?)", (digest, owner)
        row = self.db.conn().execute(sql + " ORDER BY id LIMIT 1", args2).fetchone()
        return str(row["id"]) if row is not None else None

    def names(self, image_id: str, owner: str | None = None) -> list[str]:
        """The names pointing at ``image_id`` (``owner``'s; None: every owner's, each once)."""
        if owner is None:
            rows = self.db.conn().execute("SELECT DISTINCT name FROM image_names WHERE image_id = ? ORDER BY name", (image_id,))
        else:
            sql = "SELECT name FROM image_names WHERE image_id = ? AND owner = ? ORDER BY name"
            rows = self.db.conn().execute(sql, (image_id, owner))
        return [str(r["name"]) for r in rows]

    def all(self, owner: str | None = None) -> list[dict[str, Any]]:
        """Every image (``owner``'s; None: everyone's), newest first, with its names (the owner's)."""
        names: dict[str, list[str]] = {}
        if owner is None:
            found = self.db.conn().execute("SELECT DISTINCT name, image_id FROM image_names ORDER BY name")
            rows = self.db.conn().execute("SELECT * FROM images ORDER BY created_at DESC, id")
        else:
            found = self.db.conn().execute("SELECT name, image_id FROM image_names WHERE owner = ? ORDER BY name", (owner,))
            held = "SELECT image_id FROM image_owners WHERE owner = ?"
            rows = self.db.conn().execute(f"SELECT * FROM images WHERE id IN ({held}) ORDER BY created_at DESC, id", (owner,))
        for r in found:
            names.setdefault(r["image_id"], []).append(r["name"])
        return [_row(r) | {"names": names.get(r["id"], [])} for r in rows]

    def untag(self, name: str, owner: str | None = None) -> bool:
        """Remove ``owner``'s ``name`` (None: every owner's)."""
        with self.db.transaction() as conn:
            if owner is None:
                return conn.execute("DELETE FROM image_names WHERE name = ?", (name,)).rowcount > 0
            return conn.execute("DELETE FROM image_names WHERE name = ? AND owner = ?", (name, owner)).rowcount > 0

    def delete(self, image_id: str) -> list[str]:
        """Remove an image for every owner, with every name pointing at it; the names it had."""
        with self.db.transaction() as conn:
            names = sorted({str(r["name"]) for r in conn.execute("SELECT name FROM image_names WHERE image_id = ?", (image_id,))})
            conn.execute("DELETE FROM image_names WHERE image_id = ?", (image_id,))
            conn.execute("DELETE FROM image_owners WHERE image_id = ?", (image_id,))
            conn.execute("DELETE FROM images WHERE id = ?", (image_id,))
        return names

    def disown(self, image_id: str, owner: str) -> tuple[list[str], bool]:
        """``owner`` lets ``image_id`` go (its names of it too); the image goes with its last owner.
        The names removed, and whether the image went."""
        with self.db.transaction() as conn:
            where = "image_id = ? AND owner = ?"
            names = [
                str(r["name"])
                for r in conn.execute(f"SELECT name FROM image_names WHERE {where} ORDER BY name", (image_id, owner))
            ]
            conn.execute(f"DELETE FROM image_names WHERE {where}", (image_id, owner))
            conn.execute(f"DELETE FROM image_owners WHERE {where}", (image_id, owner))
            if conn.execute("SELECT 1 FROM image_owners WHERE image_id = ? LIMIT 1", (image_id,)).fetchone() is not None:
                return names, False
            conn.execute("DELETE FROM image_names WHERE image_id = ?", (image_id,))
            conn.execute("DELETE FROM images WHERE id = ?", (image_id,))
        return names, True

    def delete_if_unnamed(self, image_id: str) -> bool:
        """Remove ``image_id`` when no name points at it any more (in one transaction); whether it was."""
        with self.db.transaction() as conn:
            left = conn.execute("SELECT 1 FROM image_names WHERE image_id = ? LIMIT 1", (image_id,)).fetchone()
            if left is not None:
                return False
            conn.execute("DELETE FROM image_owners WHERE image_id = ?", (image_id,))
            return conn.execute("DELETE FROM images WHERE id = ?", (image_id,)).rowcount > 0
