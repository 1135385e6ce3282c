"""The sandboxes table: one record per sandbox, kept after it is destroyed."""

from __future__ import annotations

import functools
import json
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any

from hutch.actors import OWNER_ID, current
from hutch.errors import ConflictError, NotFoundError
from hutch.models import SandboxRecord, SandboxSpec, SandboxState
from hutch.store.db import Database
from hutch.store.refs import SHOWN, by_prefix, owned_by

Within = Callable[[sqlite3.Connection], None]  # more writes for a transaction of this table's
LIVE_STATES_TEXT = ("creating", "running", "paused", "destroying")
LIVE_SQL = "('creating', 'running', 'paused', 'destroying')"
UNSET: Any = object()
REDACTED = "***"


def redacted(spec: SandboxSpec) -> SandboxSpec:
    """Env values may be secrets: the store keeps the keys only (DESIGN: no secrets in the store)."""
    return spec.model_copy(update={"env": dict.fromkeys(spec.env, REDACTED)})


SPECS = 4096  # parsed specs kept (by their stored text), and parsed records per thread: every exec reads its sandbox's record


@functools.lru_cache(maxsize=SPECS)
def _spec(text: str) -> SandboxSpec:
    return SandboxSpec.model_validate(json.loads(text))


def _record(row: sqlite3.Row) -> SandboxRecord:
    return SandboxRecord(
        id=row["id"],
        name=row["name"],
        provider=row["provider"],
        state=SandboxState(row["state"]),
        spec=_spec(row["spec"]).model_copy(),  # a copy of its own: a caller may change its record's fields
        data=json.loads(row["data"]),
        enforcement=json.loads(row["enforcement"]),
        error=row["error"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        expires_at=row["expires_at"],
        last_active_at=row["last_active_at"],
        owner=row["owner"],
    )


def no_sandbox(ref: str) -> NotFoundError:
    """The error of a sandbox reference that names nothing (a run's id given for a sandbox: said so)."""
    hint = "list sandboxes with: hutch list"
    if ref.startswith("run_"):
        hint = f"{ref} is a run, not a sandbox: hutch poll {ref} (or wait, kill) takes it; hutch logs SANDBOX --run {ref}"
    return NotFoundError(f"no sandbox {ref!r}", hint=hint)


class _Parsed(threading.local):
    """This thread's parsed records by id (a thread has a connection of its own: see db.py).

    Every exec reads its sandbox's record; parsing it each time was a fifth of the store's
    share of an exec. A record kept here is handed out (as a copy) while its connection's
    ``PRAGMA data_version`` is unchanged, that is while no other connection (another
    thread's, a CLI's, a second Service's on the same file) committed anything; the writes
    of this table drop the records they change themselves (their own connection's commits
    do not move that number)."""

    def __init__(self) -> None:
        self.version = -1
        self.records: dict[str, SandboxRecord] = {}


def _copy(rec: SandboxRecord) -> SandboxRecord:
    """A record of its own for a caller that may set its fields and its ``data``'s keys;
    nested values are shared (as a spec's are, see ``_spec``): replace them, never change them in place."""
    return rec.model_copy(update={"spec": rec.spec.model_copy(), "data": dict(rec.data), "enforcement": dict(rec.enforcement)})


class SandboxTable:
    def __init__(self, db: Database) -> None:
        self.db = db
        self._parsed = _Parsed()

    def _drop(self, sandbox_id: str) -> None:
        """This thread's parsed copy of a record it writes goes (other threads see the commit's data_version)."""
        self._parsed.records.pop(sandbox_id, None)

    def insert(self, rec: SandboxRecord, within: Within | None = None) -> None:
        """``within``: more writes that land with this one, in its transaction (a pool member
        handed out leaves the pool as its sandbox is recorded)."""
        self._drop(rec.id)
        try:
            with self.db.transaction() as conn:
                if within is not None:
                    within(conn)
                conn.execute(
                    "INSERT INTO sandboxes (id, name, provider, state, spec, data, enforcement, error, created_at, updated_at,"
                    " expires_at, last_active_at, parent_id, owner) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
                        rec.owner if rec.owner is not None else OWNER_ID,  # names are unique per owner
                    ),
                )
        except ConflictError as exc:
            raise ConflictError(
                f"you already have a sandbox named {rec.name!r}",
                hint=f"choose another --name, or destroy it first: hutch destroy {rec.name}",
            ) from exc

    def update(
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
        """Change the fields given (``expires_at=None`` clears it); the record as it is now."""
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
        try:
            with self.db.transaction() as conn:
                conn.execute(f"UPDATE sandboxes SET {', '.join(sets)} WHERE id = ?", (*args, sandbox_id))
        finally:
            self._drop(sandbox_id)
        return self.get(sandbox_id)

    def forget(self, sandbox_id: str) -> None:
        """Remove the record of a sandbox still being created that nobody saw and nothing
        refers to (a pool member that died as it was handed out)."""
        try:
            with self.db.transaction() as conn:
                conn.execute("DELETE FROM sandboxes WHERE id = ? AND state = 'creating'", (sandbox_id,))
        finally:
            self._drop(sandbox_id)

    def touch(self, sandbox_id: str, when: float) -> None:
        """Record activity (for --idle-timeout); no ``updated_at`` change, no event."""
        try:
            with self.db.transaction() as conn:
                conn.execute("UPDATE sandboxes SET last_active_at = ? WHERE id = ?", (when, sandbox_id))
        finally:
            self._drop(sandbox_id)

    def get(self, ref: str) -> SandboxRecord:
        """By id, by name (a live one, else the newest of any state), or by a unique id prefix
        (refs.py). Names are the owner's own (hutch.actors): a key's name finds its own sandbox
        only; an admin's finds its own first, else the one live sandbox of that name, and when
        several keys have one, says which (``conflict``: give the id)."""
        conn = self.db.conn()
        parsed = self._parsed
        version = conn.execute("PRAGMA data_version").fetchone()[0]  # before the read: a later commit moves it
        if version != parsed.version:
            parsed.records.clear()
            parsed.version = version
        if (rec := parsed.records.get(ref)) is not None:
            return _copy(rec)
        row = conn.execute("SELECT * FROM sandboxes WHERE id = ?", (ref,)).fetchone()
        if row is not None:  # by id: kept
            if len(parsed.records) >= SPECS:
                parsed.records.clear()
            rec = parsed.records[ref] = _record(row)
            return _copy(rec)
        actor = current()
        row = self._by_name(conn, ref, actor.id, actor.admin) or by_prefix(conn, "sandboxes", ref, owned_by(actor))
        if row is None:
            raise no_sandbox(ref)
        return _record(row)

    @staticmethod
    def _by_name(conn: sqlite3.Connection, name: str, owner: str, admin: bool) -> sqlite3.Row | None:
        order = f"ORDER BY state IN {LIVE_SQL} DESC, created_at DESC"
        mine: sqlite3.Row | None = conn.execute(
            f"SELECT * FROM sandboxes WHERE name = ? AND owner = ? {order} LIMIT 1", (name, owner)
        ).fetchone()
        if mine is not None or not admin:
            return mine
        rows = conn.execute(f"SELECT * FROM sandboxes WHERE name = ? {order} LIMIT ?", (name, SHOWN + 1)).fetchall()
        live = [r for r in rows if r["state"] in LIVE_STATES_TEXT]
        if len({r["owner"] for r in live}) > 1:
            which = ", ".join(f"{r['id']} (owner {r['owner']})" for r in live[:SHOWN])
            raise ConflictError(
                f"several keys have a sandbox named {name!r}: {which}",
                hint="names are each key's own: give the sandbox's id instead",
            )
        return rows[0] if rows else None

    def live_ids(self) -> set[str]:
        """The ids of the running and paused sandboxes (no record parsed)."""
        return {r[0] for r in self.db.conn().execute("SELECT id FROM sandboxes WHERE state IN ('running', 'paused')")}

    def with_deadlines(self) -> list[SandboxRecord]:
        """The running and paused sandboxes with a TTL or an idle timeout: what the reaper
        checks every second (parsing every record was a pass over all 1000 idle sandboxes)."""
        sql = (
            "SELECT * FROM sandboxes WHERE state IN ('running', 'paused')"
            " AND (expires_at IS NOT NULL OR json_extract(spec, '$.idle_timeout') IS NOT NULL) ORDER BY created_at"
        )
        return [_record(r) for r in self.db.conn().execute(sql)]

    def all(
        self, states: tuple[SandboxState, ...] | None = None, *, parent: str | None = None, owner: str | None = None
    ) -> list[SandboxRecord]:
        """Every sandbox (in one of ``states``, a child of ``parent``, made by ``owner``), oldest first."""
        where: list[str] = []
        args: list[Any] = []
        if owner is not None:
            where.append("owner = ?")
            args.append(owner)
        if states:
            where.append(f"state IN ({', '.join('?' for _ in states)})")
            args += [s.value for s in states]
        if parent:
            where.append("parent_id = ?")
            args.append(parent)
        sql = "SELECT * FROM sandboxes" + (f" WHERE {' AND '.join(where)}" if where else "")
        return [_record(r) for r in self.db.conn().execute(sql + " ORDER BY created_at", args)]

    def page(
        self, states: tuple[SandboxState, ...], owner: str | None, offset: int, limit: int
    ) -> tuple[list[SandboxRecord], int]:
        """One page of the sandboxes in ``states`` (of ``owner``; None: everyone's), newest
        first, and how many there are in all: only the page's records are read and parsed."""
        where = f"state IN ({', '.join('?' for _ in states)})"
        args: list[Any] = [s.value for s in states]
        if owner is not None:
            where += " AND owner = ?"
            args.append(owner)
        conn = self.db.conn()
        total = int(conn.execute(f"SELECT COUNT(*) FROM sandboxes WHERE {where}", args).fetchone()[0])
        sql = f"SELECT * FROM sandboxes WHERE {where} ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?"
        return [_record(r) for r in conn.execute(sql, (*args, limit, offset))], total

    def counts(self) -> list[tuple[str, str, int]]:
        """(state, provider, how many) for every pair that has sandboxes."""
        rows = self.db.conn().execute("SELECT state, provider, COUNT(*) AS n FROM sandboxes GROUP BY state, provider")
        return [(r["state"], r["provider"], int(r["n"])) for r in rows]
