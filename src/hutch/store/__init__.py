"""The SQLite store: the only package that imports sqlite3.

:class:`Store` owns one :class:`~hutch.store.db.Database` (the connection, WAL, the busy
timeout, the named migrations, ``transaction()``) and one object per group of tables,
each in its own module::

    store.sandboxes   SandboxTable    sandboxes.py   insert, update, touch, get, all
    store.runs        RunTable        runs.py        insert, finish, get, all, mark_lost
    store.events      EventTable      events.py      append, count, all
    store.approvals   ApprovalTable   approvals.py   insert, get, all, decide, use
    store.claims      ClaimTable      claims.py      insert, get, of_sandbox, all, update, delete
    store.snapshots   SnapshotTable   workspaces.py  insert, get, all, delete
    store.tenants     TenantTable     workspaces.py  ensure, all, get, delete
    store.manifests   ManifestTable   workspaces.py  get, set
    store.images      ImageTable      images.py      put, get, by_name, by_prefix, names, all, untag, delete
    store.keys        KeyTable        keys.py        insert, get, find, all, revoke, rotate
    store.certificates CertificateTable certs.py     insert, get, all, find, revoke
    store.pool        PoolTable       pool.py        add, ready, remove, members, leave, set_size, sizes
    store.ports       PortTable       ports.py       put, delete, all
    store.nodes       NodeTable       nodes.py       seen, drain, all, drained
    store.e2b_processes E2bProcessTable e2b.py       add, find, live_of, next_pid

A write that must land with its event (a run and ``run_started`` ...) is one transaction
inside its table's method. Each event's ``actor`` and each new row's ``owner`` come from the
request's actor (hutch.actors). Short ids (``sbx_19c2f``) are resolved by refs.py.
"""

from __future__ import annotations

from pathlib import Path

from hutch.store.approvals import ApprovalTable
from hutch.store.certs import CertificateTable
from hutch.store.claims import ClaimTable
from hutch.store.db import Database
from hutch.store.e2b import E2bProcessTable
from hutch.store.events import EventTable
from hutch.store.images import ImageTable
from hutch.store.keys import KeyTable
from hutch.store.migrations import MIGRATIONS
from hutch.store.nodes import NodeTable
from hutch.store.pool import PoolTable
from hutch.store.ports import PortTable
from hutch.store.runs import RunTable
from hutch.store.sandboxes import SandboxTable
from hutch.store.workspaces import ManifestTable, SnapshotTable, TenantTable

__all__ = ["MIGRATIONS", "Database", "Store"]


class Store:
    def __init__(self, path: Path | str) -> None:
        self.db = Database(path)  # opens the file and brings its schema up to date
        self.sandboxes = SandboxTable(self.db)
        self.runs = RunTable(self.db)
        self.events = EventTable(self.db)
        self.approvals = ApprovalTable(self.db)
        self.claims = ClaimTable(self.db)
        self.snapshots = SnapshotTable(self.db)
        self.tenants = TenantTable(self.db)
        self.manifests = ManifestTable(self.db)
        self.images = ImageTable(self.db)
        self.keys = KeyTable(self.db)
        self.certificates = CertificateTable(self.db)
        self.pool = PoolTable(self.db)
        self.ports = PortTable(self.db)
        self.nodes = NodeTable(self.db)
        self.e2b_processes = E2bProcessTable(self.db)
