"""Databases made by earlier hutch versions open, migrate and keep working.

``data/store-main.sql`` is a dump (``Connection.iterdump``) of a database written through
every table by the store as it was before it became a package (all five migrations);
``data/store-0002.sql`` one from before the workspace, lifecycle and claims migrations.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from hutch.errors import ConflictError
from hutch.models import ApprovalStatus, RunStatus, SandboxRecord, SandboxSpec, SandboxState, SnapshotRecord, new_id
from hutch.store import MIGRATIONS, Store

DATA = Path(__file__).parent / "data"
WEB, CHILD, OLD = (f"sbx_{i:020x}" for i in (1, 3, 7))


def restore(dump: str, db: Path) -> Path:
    conn = sqlite3.connect(db)
    try:
        conn.executescript((DATA / dump).read_text())
    finally:
        conn.close()
    return db


def test_a_database_of_the_previous_layout_reads_and_writes(tmp_path: Path) -> None:
    store = Store(restore("store-main.sql", tmp_path / "hutch.db"))
    assert store.db.migrations() == [name for name, _ in MIGRATIONS]
    web = store.sandboxes.get("web")
    assert (web.id, web.state, web.data, web.enforcement) == (WEB, SandboxState.running, {"slot": 1}, {"memory": "cgroup"})
    assert web.spec.env == {"API_KEY": "***"} and web.last_active_at == 1700000050.0
    assert [r.id for r in store.sandboxes.all(parent=WEB)] == [CHILD]
    assert len(store.sandboxes.all((SandboxState.running, SandboxState.paused))) == 2
    with pytest.raises(ConflictError):
        store.sandboxes.get("sbx_0")  # a short id that fits all three
    done = store.runs.get("run_00000000000000000001")
    assert (done["status"], done["command"], done["env_keys"], done["cwd"]) == ("completed", ["echo", "hi"], ["A"], "/w")
    assert [r["background"] for r in store.runs.all(WEB)] == [False, True]
    assert [e["type"] for e in store.events.all(WEB)] == [
        "run_started",
        "run_finished",
        "run_started",
        "sandbox_created",
        "approval_requested",
    ]
    assert store.approvals.get("apr_00000000000000000001").status == ApprovalStatus.pending
    claim = store.claims.of_sandbox(WEB)
    assert claim is not None and (claim["name"], claim["revision"]) == ("hutch-1", 1)
    assert store.snapshots.get("snap1").size == 42
    assert store.tenants.get("acme")["provider"] == "fake"
    assert store.manifests.get(WEB) == {"a.txt": [1, 2]}
    # and it takes writes as before
    assert store.runs.mark_lost(WEB) == 1
    assert store.approvals.decide("apr_00000000000000000001", ApprovalStatus.approved, "me", None, time.time())
    assert store.claims.update(claim["id"], 1, state="delete_attempt")["revision"] == 2
    assert store.events.append("sandbox_destroyed", WEB) == 7  # the sequence goes on: 5, the decision, this
    with pytest.raises(ConflictError):
        store.sandboxes.insert(_record("child", SandboxState.running))  # a paused sandbox holds its name


def test_a_database_from_before_workspaces_is_migrated(tmp_path: Path) -> None:
    store = Store(restore("store-0002.sql", tmp_path / "hutch.db"))
    assert store.db.migrations() == [name for name, _ in MIGRATIONS]
    old = store.sandboxes.get("old")
    assert (old.id, old.state, old.expires_at, old.last_active_at) == (OLD, SandboxState.running, None, None)
    assert [(r["id"], r["status"], r["background"]) for r in store.runs.all(OLD)] == [(f"run_{7:020x}", "running", False)]
    assert [e["type"] for e in store.events.all(OLD)] == ["sandbox_created"]
    store.sandboxes.insert(_record("held", SandboxState.paused))
    with pytest.raises(ConflictError):
        store.sandboxes.insert(_record("held", SandboxState.running))
    store.snapshots.insert(SnapshotRecord(name="s", sandbox_id=OLD, provider="fake", path="/x", size=1, created_at=1.0))
    assert [s.name for s in store.snapshots.all()] == ["s"]
    assert store.runs.mark_lost(OLD) == 1
    assert store.runs.get(f"run_{7:020x}")["status"] == RunStatus.lost


def _record(name: str, state: SandboxState) -> SandboxRecord:
    now = time.time()
    return SandboxRecord(
        id=new_id("sbx"),
        name=name,
        provider="fake",
        state=state,
        spec=SandboxSpec(name=name, provider="fake"),
        created_at=now,
        updated_at=now,
    )
