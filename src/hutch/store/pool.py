"""The warm pool's tables: its members (started sandboxes nobody has yet) and the sizes set
per shape (``hutch pool set``). The workflow is in ``hutch.service.pool``.

A member's row is written before it is started (state ``starting``), so a daemon killed
at any point finds what it must clean; it leaves the table in the same transaction that
records the sandbox it becomes (:meth:`PoolTable.leave`).
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from typing import Any

from hutch.errors import NotFoundError
from hutch.models import SandboxSpec
from hutch.store.db import Database
from hutch.store.sandboxes import Within


@dataclass
class MemberRow:
    id: str
    provider: str
    image: str  # "": the host's /usr
    state: str  # starting | ready
    spec: SandboxSpec
    data: dict[str, Any]
    enforcement: dict[str, str]
    created_at: float


def _member(row: sqlite3.Row) -> MemberRow:
    return MemberRow(
        id=row["id"],
        provider=row["provider"],
        image=row["image"],
        state=row["state"],
        spec=SandboxSpec.model_validate_json(row["spec"]),
        data=json.loads(row["data"]),
        enforcement=json.loads(row["enforcement"]),
        created_at=row["created_at"],
    )


class PoolTable:
    def __init__(self, db: Database) -> None:
        self.db = db

    # -- members -------------------------------------------------------------------------

    def add(self, member_id: str, provider: str, image: str, spec: SandboxSpec) -> None:
        """A member about to be started (written first: a crash leaves something to clean)."""
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO pool_members (id, provider, image, state, spec, created_at) VALUES (?, ?, ?, 'starting', ?, ?)",
                (member_id, provider, image, spec.model_dump_json(), time.time()),
            )

    def ready(self, member_id: str, data: dict[str, Any], enforcement: dict[str, str]) -> bool:
        """The member started; False when its row went meanwhile (drained)."""
        with self.db.transaction() as conn:
            cur = conn.execute(
                "UPDATE pool_members SET state = 'ready', data = ?, enforcement = ? WHERE id = ?",
                (json.dumps(data), json.dumps(enforcement), member_id),
            )
            return cur.rowcount == 1

    def remove(self, member_id: str) -> None:
        with self.db.transaction() as conn:
            conn.execute("DELETE FROM pool_members WHERE id = ?", (member_id,))

    def members(self) -> list[MemberRow]:
        return [_member(r) for r in self.db.conn().execute("SELECT * FROM pool_members ORDER BY created_at")]

    def leave(self, member_id: str) -> Within:
        """The write that takes ``member_id`` out of the pool, for the transaction that records
        the sandbox it becomes (``SandboxTable.insert(rec, within=...)``): NotFoundError when
        it is no longer a member, and the whole transaction is undone."""

        def leave(conn: sqlite3.Connection) -> None:
            if conn.execute("DELETE FROM pool_members WHERE id = ?", (member_id,)).rowcount != 1:
                raise NotFoundError(f"{member_id} is no longer a pool member")

        return leave

    # -- sizes ---------------------------------------------------------------------------

    def set_size(self, provider: str, image: str, size: int | None) -> None:
        """The size ``hutch pool set`` gave a shape; None forgets it (the default applies)."""
        with self.db.transaction() as conn:
            if size is None:
                conn.execute("DELETE FROM pools WHERE provider = ? AND image = ?", (provider, image))
            else:
                conn.execute(
                    "INSERT INTO pools (provider, image, size, updated_at) VALUES (?, ?, ?, ?)"
                    " ON CONFLICT (provider, image) DO UPDATE SET size = excluded.size, updated_at = excluded.updated_at",
                    (provider, image, size, time.time()),
                )

    def sizes(self) -> dict[tuple[str, str], int]:
        rows = self.db.conn().execute("SELECT provider, image, size FROM pools ORDER BY provider, image")
        return {(r["provider"], r["image"]): int(r["size"]) for r in rows}
