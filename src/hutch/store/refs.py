"""Short ids.

Wherever an id is taken (``sbx_…``, ``run_…``, ``apr_…``), any prefix of it that keeps its
type tag and at least one character after it is enough, as long as exactly one id of that
table starts with it: ``sbx_19c2f`` for ``sbx_19c2f4a0b1e7d3c9a85``. The exact id always
wins, and for sandboxes an exact name wins over a prefix. A prefix that fits several ids
is a ``conflict`` that lists them; one that fits none is ``not_found`` as usual. A key that
is not an admin matches only its own (a prefix never lists, nor counts, another key's ids).
"""

from __future__ import annotations

import re
import sqlite3

from hutch.actors import Actor
from hutch.errors import ConflictError

TAGS = {"sandboxes": "sbx", "runs": "run", "approvals": "apr"}
NOUNS = {"sandboxes": "sandbox", "runs": "run", "approvals": "approval request"}
SHOWN = 10  # candidates named in an ambiguity error
OWNED = {  # each table's rows of one owner
    "sandboxes": "owner = ?",
    "approvals": "owner = ?",
    "runs": "sandbox_id IN (SELECT id FROM sandboxes WHERE owner = ?)",
}


def owned_by(actor: Actor) -> str | None:
    """The owner a lookup is limited to (None: an admin's, everyone's)."""
    return None if actor.admin else actor.id


def short_ref(table: str, ref: str) -> bool:
    """Could ``ref`` be a short id of ``table``'s ids (its tag, ``_``, then id characters)?"""
    return re.fullmatch(rf"{TAGS[table]}_[0-9a-f]+", ref) is not None


def by_prefix(conn: sqlite3.Connection, table: str, ref: str, owner: str | None = None) -> sqlite3.Row | None:
    """The one row of ``table`` (of ``owner``'s, when given) whose id starts with ``ref``; None
    when none does (or ``ref`` is not a short id); ``conflict`` naming the candidates when several do."""
    if table not in TAGS or not short_ref(table, ref):
        return None
    mine, args = (f" AND {OWNED[table]}", (owner,)) if owner is not None else ("", ())
    # a range over the primary key's index: every id starting with ref sorts in [ref, ref + U+FFFF)
    rows: list[sqlite3.Row] = conn.execute(
        f"SELECT * FROM {table} WHERE id >= ? AND id < ?{mine} ORDER BY id LIMIT ?", (ref, ref + "\uffff", *args, SHOWN + 1)
    ).fetchall()
    if len(rows) > 1:
        names = ", ".join(r["id"] for r in rows[:SHOWN]) + (", ..." if len(rows) > SHOWN else "")
        many = f"{len(rows)}" if len(rows) <= SHOWN else f"more than {SHOWN}"
        raise ConflictError(
            f"{ref!r} is the start of {many} {NOUNS[table]} ids: {names}",
            hint="give more characters of the id (any prefix that only one id has will do)",
        )
    return rows[0] if rows else None
