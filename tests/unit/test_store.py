"""The SQLite store: migrations, WAL, sandboxes, runs, events, several writers."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from hutch.errors import ConflictError, NotFoundError
from hutch.models import ExecResult, RunStatus, SandboxRecord, SandboxSpec, SandboxState, new_id
from hutch.store import MIGRATIONS, Store


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "hutch.db"


@pytest.fixture
def store(db: Path) -> Store:
    return Store(db)


def record(name: str | None = None, state: SandboxState = SandboxState.running, **data: object) -> SandboxRecord:
    now = time.time()
    return SandboxRecord(
        id=new_id("sbx"),
        name=name,
        provider="fake",
        state=state,
        spec=SandboxSpec(name=name, provider="fake"),
        created_at=now,
        updated_at=now,
        data=dict(data),
    )


# -- migrations and pragmas -----------------------------------------------------------


def test_migrations_are_recorded(store: Store) -> None:
    assert store.db.migrations() == [name for name, _ in MIGRATIONS]
    assert store.db.migrations()[0] == "0001_initial"


def test_migrations_are_idempotent(db: Path) -> None:
    first = Store(db)
    first.sandboxes.insert(record("keep"))
    second = Store(db)
    assert second.db.migrations() == first.db.migrations()
    raw = sqlite3.connect(db)
    try:
        assert raw.execute("SELECT count(*) FROM migrations").fetchone()[0] == len(MIGRATIONS)
    finally:
        raw.close()
    assert second.sandboxes.get("keep").name == "keep"


def test_wal_mode(store: Store, db: Path) -> None:
    assert store.db.conn().execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    raw = sqlite3.connect(db)
    try:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # persistent in the file
    finally:
        raw.close()


def test_busy_timeout_and_foreign_keys(store: Store) -> None:
    conn = store.db.conn()
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] >= 1000
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1


# -- sandboxes ------------------------------------------------------------------------


def test_insert_and_get_by_id_and_name(store: Store) -> None:
    rec = record("web", slot=3)
    rec.enforcement = {"memory": "cgroup"}
    store.sandboxes.insert(rec)
    by_id = store.sandboxes.get(rec.id)
    by_name = store.sandboxes.get("web")
    assert by_id == by_name
    assert by_id.id == rec.id
    assert by_id.state == SandboxState.running
    assert by_id.spec == rec.spec
    assert by_id.data == {"slot": 3}
    assert by_id.enforcement == {"memory": "cgroup"}


def test_get_unknown_is_not_found_with_hint(store: Store) -> None:
    with pytest.raises(NotFoundError) as info:
        store.sandboxes.get("nope")
    assert "nope" in info.value.message
    assert "hutch list" in (info.value.hint or "")


def test_live_name_is_unique(store: Store) -> None:
    store.sandboxes.insert(record("dup"))
    with pytest.raises(ConflictError) as info:
        store.sandboxes.insert(record("dup"))
    assert "dup" in info.value.message
    assert info.value.hint and "hutch destroy dup" in info.value.hint
    assert len(store.sandboxes.all()) == 1


@pytest.mark.parametrize("state", [SandboxState.creating, SandboxState.destroying])
def test_every_live_state_holds_the_name(store: Store, state: SandboxState) -> None:
    store.sandboxes.insert(record("held", state=state))
    with pytest.raises(ConflictError):
        store.sandboxes.insert(record("held"))


def test_unnamed_sandboxes_do_not_conflict(store: Store) -> None:
    for _ in range(3):
        store.sandboxes.insert(record(None))
    assert len(store.sandboxes.all()) == 3


@pytest.mark.parametrize("final", [SandboxState.destroyed, SandboxState.failed, SandboxState.lost])
def test_dead_sandbox_name_can_be_reused(store: Store, final: SandboxState) -> None:
    old = record("again")
    store.sandboxes.insert(old)
    store.sandboxes.update(old.id, state=final)
    new = record("again")
    store.sandboxes.insert(new)
    assert store.sandboxes.get("again").id == new.id  # the live one wins
    assert store.sandboxes.get(old.id).state == final


def test_name_lookup_falls_back_to_newest_dead(store: Store) -> None:
    a = record("gone")
    store.sandboxes.insert(a)
    store.sandboxes.update(a.id, state=SandboxState.destroyed)
    b = record("gone")
    b.created_at += 1
    store.sandboxes.insert(b)
    store.sandboxes.update(b.id, state=SandboxState.destroyed)
    assert store.sandboxes.get("gone").id == b.id


def test_update_sandbox(store: Store) -> None:
    rec = record("u")
    store.sandboxes.insert(rec)
    time.sleep(0.002)
    out = store.sandboxes.update(rec.id, state=SandboxState.failed, data={"k": 1}, enforcement={"pids": "rlimit"}, error="boom")
    assert out.state == SandboxState.failed
    assert out.data == {"k": 1}
    assert out.enforcement == {"pids": "rlimit"}
    assert out.error == "boom"
    assert out.updated_at > rec.updated_at
    # fields not given stay as they are
    again = store.sandboxes.update(rec.id, state=SandboxState.destroyed)
    assert again.data == {"k": 1} and again.error == "boom"


def test_list_sandboxes_filters_by_state_in_creation_order(store: Store) -> None:
    recs = []
    for i, state in enumerate([SandboxState.running, SandboxState.destroyed, SandboxState.running, SandboxState.lost]):
        r = record(f"s{i}", state=state)
        r.created_at += i
        store.sandboxes.insert(r)
        recs.append(r)
    assert [r.id for r in store.sandboxes.all()] == [r.id for r in recs]
    running = store.sandboxes.all((SandboxState.running,))
    assert [r.id for r in running] == [recs[0].id, recs[2].id]
    assert [r.id for r in store.sandboxes.all((SandboxState.lost, SandboxState.destroyed))] == [recs[1].id, recs[3].id]


# -- runs -----------------------------------------------------------------------------


def _result(run_id: str, sandbox_id: str, code: int, status: RunStatus) -> ExecResult:
    return ExecResult(
        run_id=run_id,
        sandbox_id=sandbox_id,
        exit_code=code,
        status=status,
        stdout="",
        stderr="",
        stdout_bytes=5,
        stderr_bytes=7,
        truncated=False,
        stored_truncated=True,  # what the record keeps: its output on disk was cut
        duration_ms=12.5,
    )


def test_runs_insert_finish_list(store: Store) -> None:
    rec = record("r")
    store.sandboxes.insert(rec)
    r1, r2 = new_id("run"), new_id("run")
    t = time.time()
    store.runs.insert(r1, rec.id, ["echo", "hi"], t)
    store.runs.insert(r2, rec.id, ["/bin/sh", "-c", "exit 3"], t + 1)
    runs = store.runs.all(rec.id)
    assert [r["id"] for r in runs] == [r1, r2]
    assert runs[0]["command"] == ["echo", "hi"]
    assert all(r["status"] == "running" and r["exit_code"] is None for r in runs)

    store.runs.finish(_result(r2, rec.id, 3, RunStatus.failed))
    done = {r["id"]: r for r in store.runs.all(rec.id)}
    assert done[r2]["status"] == "failed"
    assert done[r2]["exit_code"] == 3
    assert done[r2]["duration_ms"] == 12.5
    assert (done[r2]["stdout_bytes"], done[r2]["stderr_bytes"], done[r2]["truncated"]) == (5, 7, 1)
    assert done[r2]["finished_at"] is not None

    assert store.runs.mark_lost(rec.id) == 1
    done = {r["id"]: r for r in store.runs.all(rec.id)}
    assert done[r1]["status"] == "lost"
    assert done[r2]["status"] == "failed"


def test_mark_lost_is_scoped_to_the_sandbox(store: Store) -> None:
    a, b = record("a"), record("b")
    store.sandboxes.insert(a)
    store.sandboxes.insert(b)
    store.runs.insert(new_id("run"), a.id, ["true"], time.time())
    store.runs.insert(new_id("run"), b.id, ["true"], time.time())
    assert store.runs.mark_lost(a.id) == 1
    assert store.runs.all(b.id)[0]["status"] == "running"
    assert store.runs.mark_lost() == 1


def test_run_needs_an_existing_sandbox(store: Store) -> None:
    with pytest.raises(ConflictError):
        store.runs.insert(new_id("run"), "sbx_missing", ["true"], time.time())


# -- events ---------------------------------------------------------------------------


def test_events_have_increasing_seq(store: Store) -> None:
    a, b = record("a"), record("b")
    store.sandboxes.insert(a)
    store.sandboxes.insert(b)
    seqs = [
        store.events.append("sandbox_created", a.id, provider="fake"),
        store.events.append("sandbox_created", b.id),
        store.events.append("run_started", a.id, "run_1", command=["ls"]),
        store.events.append("sandbox_destroyed", a.id),
    ]
    assert seqs == sorted(seqs) and len(set(seqs)) == 4
    events = store.events.all(a.id)
    assert [e["type"] for e in events] == ["sandbox_created", "run_started", "sandbox_destroyed"]
    assert [e["seq"] for e in events] == [seqs[0], seqs[2], seqs[3]]
    assert events[0]["data"] == {"provider": "fake"}
    assert events[1]["run_id"] == "run_1" and events[1]["data"] == {"command": ["ls"]}
    assert len(store.events.all()) == 4
    assert [e["seq"] for e in store.events.all(limit=2)] == seqs[:2]


# -- several processes ----------------------------------------------------------------


def test_two_stores_see_each_others_writes(db: Path) -> None:
    one, two = Store(db), Store(db)
    rec = record("shared")
    one.sandboxes.insert(rec)
    assert two.sandboxes.get("shared").id == rec.id
    two.sandboxes.update(rec.id, state=SandboxState.destroyed)
    assert one.sandboxes.get(rec.id).state == SandboxState.destroyed
    two.events.append("sandbox_destroyed", rec.id)
    assert [e["type"] for e in one.events.all(rec.id)] == ["sandbox_destroyed"]
    with pytest.raises(ConflictError):
        one.sandboxes.insert(record("x"))
        two.sandboxes.insert(record("x"))


def test_failed_transaction_rolls_back(store: Store) -> None:
    rec = record("tx")
    store.sandboxes.insert(rec)
    with pytest.raises(RuntimeError), store.db.transaction() as conn:
        conn.execute("UPDATE sandboxes SET state = 'failed' WHERE id = ?", (rec.id,))
        raise RuntimeError("boom")
    assert store.sandboxes.get("tx").state == SandboxState.running
    assert not store.db.conn().in_transaction
