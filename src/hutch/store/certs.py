"""The gateway's client certificates: one row per issued certificate, found by its SHA-256
fingerprint, bound to the API key it acts as. A revoked certificate keeps its row."""

from __future__ import annotations

from typing import Any

from hutch.errors import NotFoundError
from hutch.store.db import Database
from hutch.store.events import insert_event


class CertificateTable:
    def __init__(self, db: Database) -> None:
        self.db = db

    def insert(self, row: dict[str, Any]) -> None:
        """A new certificate and its ``certificate_issued`` event."""
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO certificates (fingerprint, serial, name, key_id, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?)",
                (row["fingerprint"], row["serial"], row["name"], row["key_id"], row["created_at"], row["expires_at"]),
            )
            data = {"name": row["name"], "key": row["key_id"], "serial": row["serial"], "expires_at": row["expires_at"]}
            insert_event(conn, row["created_at"], "certificate_issued", None, None, data)

    def get(self, fingerprint: str) -> dict[str, Any] | None:
        row = self.db.conn().execute("SELECT * FROM certificates WHERE fingerprint = ?", (fingerprint,)).fetchone()
        return dict(row) if row is not None else None

    def all(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self.db.conn().execute("SELECT * FROM certificates ORDER BY created_at")]

    def find(self, ref: str) -> list[dict[str, Any]]:
        """The live certificates ``ref`` names: a name, a serial, or a fingerprint (or a prefix of one, 8+)."""
        sql = "SELECT * FROM certificates WHERE revoked_at IS NULL AND (name = ? OR serial = ? OR fingerprint = ?"
        args: list[Any] = [ref, ref.lower(), ref.lower()]
        if len(ref) >= 8:
            sql += " OR fingerprint LIKE ?"
            args.append(ref.lower().replace("%", "").replace("_", "") + "%")
        rows = [dict(r) for r in self.db.conn().execute(sql + ") ORDER BY created_at", args)]
        if not rows:
            raise NotFoundError(f"no live certificate {ref!r}", hint="list them with: hutch gateway certs")
        return rows

    def revoke(self, fingerprints: list[str], now: float) -> None:
        with self.db.transaction() as conn:
            for fp in fingerprints:
                cur = conn.execute(
                    "UPDATE certificates SET revoked_at = ? WHERE fingerprint = ? AND revoked_at IS NULL", (now, fp)
                )
                if cur.rowcount:
                    row = conn.execute("SELECT name, key_id, serial FROM certificates WHERE fingerprint = ?", (fp,)).fetchone()
                    insert_event(
                        conn,
                        now,
                        "certificate_revoked",
                        None,
                        None,
                        {"name": row["name"], "key": row["key_id"], "serial": row["serial"]},
                    )
