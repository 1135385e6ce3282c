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

from hutch.errors import ConflictError
from hutch.store.db import Database

SHOWN = 10


def _row(row: Any) -> dict[str, Any]:
    out = dict(row)
    for key in ("manifest", "config", "layers"):
        out[key] = json.loads(out[key])
    return out


class ImageTable:
    """Rows of ``images`` (``id`` = the config's digest) and ``image_names``."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def put(self, image: dict[str, Any], names: list[str]) -> None:
        """Record ``image`` (unless known) and point ``names`` at it (a name that pointed at another image moves)."""
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
            for name in names:
                conn.execute(
                    "INSERT INTO image_names (name, image_id, updated_at) VALUES (?, ?, ?)"
                    " ON CONFLICT(name) DO UPDATE SET image_id = excluded.image_id, updated_at = excluded.updated_at",
                    (name, image["id"], now),
                )

    def get(self, image_id: str) -> dict[str, Any] | None:
        row = self.db.conn().execute("SELECT * FROM images WHERE id = ?", (image_id,)).fetchone()
        return _row(row) if row is not None else None

    def by_name(self, name: str) -> str | None:
        """The id of the image ``name`` points at."""
        row = self.db.conn().execute("SELECT image_id FROM image_names WHERE name = ?", (name,)).fetchone()
        return str(row["image_id"]) if row is not None else None

    def by_prefix(self, hex_prefix: str) -> str | None:
        """The one image whose id starts with ``sha256:HEX_PREFIX``; ``conflict`` when several do."""
        start = "sha256:" + hex_prefix
        rows = (
            self.db.conn()
            .execute("SELECT id FROM images WHERE id >= ? AND id < ? ORDER BY id LIMIT ?", (start, start + "\uffff", SHOWN + 1))
            .fetchall()
        )
        if len(rows) > 1:
            ids = ", ".join(r["id"][7:19] for r in rows[:SHOWN])
            raise ConflictError(f"{hex_prefix!r} is the start of several image ids: {ids}", hint="give more of the id")
        return str(rows[0]["id"]) if rows else None

    def names(self, image_id: str) -> list[str]:
        rows = self.db.conn().execute("SELECT name FROM image_names WHERE image_id = ? ORDER BY name", (image_id,))
        return [str(r["name"]) for r in rows]

    def all(self) -> list[dict[str, Any]]:
        """Every image, newest first, with its names."""
        names: dict[str, list[str]] = {}
        for r in self.db.conn().execute("SELECT name, image_id FROM image_names ORDER BY name"):
            names.setdefault(r["image_id"], []).append(r["name"])
        rows = self.db.conn().execute("SELECT * FROM images ORDER BY created_at DESC, id")
        return [_row(r) | {"names": names.get(r["id"], [])} for r in rows]

    def untag(self, name: str) -> bool:
        with self.db.transaction() as conn:
            return conn.execute("DELETE FROM image_names WHERE name = ?", (name,)).rowcount > 0

    def delete(self, image_id: str) -> list[str]:
        """Remove an image and every name pointing at it; the names it had."""
        with self.db.transaction() as conn:
            names = [str(r["name"]) for r in conn.execute("SELECT name FROM image_names WHERE image_id = ?", (image_id,))]
            conn.execute("DELETE FROM image_names WHERE image_id = ?", (image_id,))
            conn.execute("DELETE FROM images WHERE id = ?", (image_id,))
        return names

    def delete_if_unnamed(self, image_id: str) -> bool:
        """Remove ``image_id`` when no name points at it any more (in one transaction); whether it was."""
        with self.db.transaction() as conn:
            left = conn.execute("SELECT 1 FROM image_names WHERE image_id = ? LIMIT 1", (image_id,)).fetchone()
            if left is not None:
                return False
            return conn.execute("DELETE FROM images WHERE id = ?", (image_id,)).rowcount > 0
