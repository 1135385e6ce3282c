"""The nodes of a cluster gateway (``hutch serve --cluster``): the last state each was seen
in, and whether an operator drained it (``hutch cluster drain``), which outlives a restart.

Ray is the truth about which nodes live; this table is the gateway's memory of them: what
``hutch cluster nodes`` shows for a node Ray no longer lists, and the drains to apply again.
"""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any

from hutch.store.db import Database


def _row(row: sqlite3.Row) -> dict[str, Any]:
    out = dict(row)
    out["drained"] = bool(out["drained"])
    out["info"] = json.loads(out["info"])
    return out


class NodeTable:
    def __init__(self, db: Database) -> None:
        self.db = db

    def seen(self, name: str, state: str, info: dict[str, Any]) -> None:
        """A node's state now (its row made on first sight); the drain flag is left as it is."""
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO nodes (name, state, drained, info, updated_at) VALUES (?, ?, 0, ?, ?) "
                "ON CONFLICT(name) DO UPDATE SET state = excluded.state, info = excluded.info, updated_at = excluded.updated_at",
                (name, state, json.dumps(info), time.time()),
            )

    def drain(self, name: str, drained: bool) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO nodes (name, state, drained, info, updated_at) VALUES (?, 'unknown', ?, '{}', ?) "
                "ON CONFLICT(name) DO UPDATE SET drained = excluded.drained, updated_at = excluded.updated_at",
                (name, int(drained), time.time()),
            )

    def all(self) -> list[dict[str, Any]]:
        rows = self.db.conn().execute("SELECT name, state, drained, info, updated_at FROM nodes ORDER BY name")
        return [_row(r) for r in rows]

    def drained(self) -> set[str]:
        return {r["name"] for r in self.all() if r["drained"]}
