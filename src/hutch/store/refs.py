"""Short ids.

Wherever an id is taken (``sbx_…``, ``run_…``, ``apr_…``), any prefix of it that keeps its
type tag and at least one character after it is enough, as long as exactly one id of that
table starts with it: ``sbx_19c2f`` for ``sbx_19c2f4a0b1e7d3c9a85``. The exact id always
wins, and for sandboxes an exact name wins over a prefix. A prefix that fits several ids
is a ``conflict`` that lists them; one that fits none is ``not_found`` as usual.
"""

from __future__ import annotations

import re
import sqlite3

from hutch.errors import ConflictError

TAGS = {"sandboxes": "sbx", "runs": "run", "approvals": "apr"}
NOUNS = {"sandboxes": "sandbox", "runs": "run", "approvals": "approval request"}
SHOWN = 10  # candidates named in an ambiguity error


def short_ref(table: str, ref: str) -> bool:
    """Could ``ref`` be a short id of ``table``'s ids (its tag, ``_``, then id characters)?"""
    return re.fullmatch(rf"{TAGS[table]}_[0-9a-f]+", ref) is not None


def by_prefix(conn: sqlite3.Connection, table: str, ref: str) -> sqlite3.Row | None:
    """The one row of ``table`` whose id starts with ``ref``; None when none does (or
    ``ref`` is not a short id); ``conflict`` naming the candidates when several do."""
    if table not in TAGS or not short_ref(table, ref):
        return None
    # a range over the primary key's index: every id starting with ref sorts in [ref, ref + U+FFFF)
    rows: list[sqlite3.Row] = conn.execute(
        f"SELECT * FROM {table} WHERE id >= ? AND id < ? ORDER BY id LIMIT ?", (ref, ref + "\uffff", SHOWN + 1)
    ).fetchall()
    if len(rows) > 1:
        names = ", ".join(r["id"] for r in rows[:SHOWN]) + (", ..." if len(rows) > SHOWN else "")
        many = f"{len(rows)}" if len(rows) <= SHOWN else f"more than {SHOWN}"
        raise ConflictError(
            f"{ref!r} is the start of {many} {NOUNS[table]} ids: {names}",
            hint="give more characters of the id (any prefix that only one id has will do)",
        )
    return rows[0] if rows else None
