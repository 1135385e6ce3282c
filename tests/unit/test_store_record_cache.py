"""The parsed sandbox records the store keeps per thread (store/sandboxes.py): every write
is seen by the next read, whoever made it (this table, another thread, another Store or
Service on the same file), and a record handed out is the caller's own."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from hutch.config import Settings
from hutch.errors import ConflictError, NotFoundError
from hutch.models import ExecRequest, SandboxRecord, SandboxSpec, SandboxState
from hutch.service import Service
from hutch.store import Store

run = asyncio.run


def record(sandbox_id: str = "sbx_cache1") -> SandboxRecord:
    now = time.time()
    return SandboxRecord(
        id=sandbox_id, name=None, provider="fake", state=SandboxState.running, spec=SandboxSpec(provider="fake"),
        created_at=now, updated_at=now, last_active_at=now, owner="owner", data={"socket": "/x", "nested": {"a": 1}},
    )  # fmt: skip


def reads(store: Store) -> list[str]:
    """Counts the SELECTs of sandbox rows by id that this store's connection (this thread's) runs."""
    seen: list[str] = []
    store.db.conn().set_trace_callback(
        lambda sql: seen.append(sql) if sql.startswith("SELECT * FROM sandboxes WHERE id") else None
    )
    return seen


def test_a_record_read_again_is_not_read_from_the_file_until_something_changes(tmp_path: Path) -> None:
    store = Store(tmp_path / "db")
    store.sandboxes.insert(record())
    seen = reads(store)
    store.sandboxes.get("sbx_cache1")
    store.sandboxes.get("sbx_cache1")
    assert len(seen) == 1  # the second came from the parsed copy (this proves the cache is used)
    store.runs.insert("run_c1", "sbx_cache1", ["true"], time.time())  # another table, same connection: kept
    store.sandboxes.get("sbx_cache1")
    assert len(seen) == 1
    store.sandboxes.update("sbx_cache1", state=SandboxState.paused)  # a write of this table: read again
    assert store.sandboxes.get("sbx_cache1").state == SandboxState.paused


def test_every_write_of_this_table_is_seen_by_the_next_read(tmp_path: Path) -> None:
    store = Store(tmp_path / "db")
    store.sandboxes.insert(record())
    store.sandboxes.get("sbx_cache1")
    store.sandboxes.touch("sbx_cache1", 12345.0)
    assert store.sandboxes.get("sbx_cache1").last_active_at == 12345.0
    spec = SandboxSpec(provider="fake", env={"A": "1"}, labels={"k": "v"}, ttl=60)
    store.sandboxes.update("sbx_cache1", spec=spec, expires_at=99.0, data={"socket": "/y"}, error="e")
    got = store.sandboxes.get("sbx_cache1")
    assert (got.spec.labels, set(got.spec.env), got.expires_at, got.data, got.error) == (
        {"k": "v"},
        {"A"},
        99.0,
        {"socket": "/y"},
        "e",
    )
    store.sandboxes.update("sbx_cache1", expires_at=None)
    assert store.sandboxes.get("sbx_cache1").expires_at is None
    store.sandboxes.insert(record("sbx_cache2").model_copy(update={"state": SandboxState.creating}))
    store.sandboxes.get("sbx_cache2")
    store.sandboxes.forget("sbx_cache2")
    with pytest.raises(NotFoundError):
        store.sandboxes.get("sbx_cache2")


def test_a_write_by_another_store_on_the_same_file_is_seen(tmp_path: Path) -> None:
    mine, theirs = Store(tmp_path / "db"), Store(tmp_path / "db")  # another process (a CLI, a second Service)
    mine.sandboxes.insert(record())
    assert mine.sandboxes.get("sbx_cache1").state == SandboxState.running
    theirs.sandboxes.update("sbx_cache1", state=SandboxState.destroyed)
    assert mine.sandboxes.get("sbx_cache1").state == SandboxState.destroyed
    theirs.events.append("anything", None)  # any commit of theirs: read again, still right
    assert mine.sandboxes.get("sbx_cache1").state == SandboxState.destroyed


def test_a_write_from_another_thread_is_seen(tmp_path: Path) -> None:
    store = Store(tmp_path / "db")
    store.sandboxes.insert(record())
    assert store.sandboxes.get("sbx_cache1").error is None
    worker = threading.Thread(target=lambda: store.sandboxes.update("sbx_cache1", error="from a thread"))
    worker.start()
    worker.join()
    assert store.sandboxes.get("sbx_cache1").error == "from a thread"


def test_a_record_handed_out_is_the_callers_own(tmp_path: Path) -> None:
    store = Store(tmp_path / "db")
    store.sandboxes.insert(record())
    first = store.sandboxes.get("sbx_cache1")
    first.data["socket"] = "changed"
    first.data["added"] = True
    first.enforcement["x"] = "y"
    first.spec.labels = {"changed": "yes"}
    first.state = SandboxState.lost
    again = store.sandboxes.get("sbx_cache1")
    assert again.data == {"socket": "/x", "nested": {"a": 1}}
    assert again.enforcement == {} and again.spec.labels == {} and again.state == SandboxState.running


# -- through the Service: what an exec sees after each kind of change -------------------


def create(service: Service, **kw: object) -> SandboxRecord:
    return run(service.create(SandboxSpec.model_validate({"provider": "fake", **kw})))


def exec_true(service: Service, ref: str) -> int:
    return run(service.exec(ref, ExecRequest(command=["true"]))).exit_code


def test_an_exec_after_destroy_pause_resume_label_or_ttl_sees_the_change(service: Service) -> None:
    rec = create(service)
    assert exec_true(service, rec.id) == 0
    run(service.lifecycle.pause(rec.id))
    with pytest.raises(ConflictError, match="paused"):
        exec_true(service, rec.id)
    run(service.lifecycle.resume(rec.id))
    assert exec_true(service, rec.id) == 0
    service.lifecycle.label(rec.id, {"team": "a"}, [])
    assert service.live(rec.id).spec.labels == {"team": "a"}
    service.lifecycle.keepalive(rec.id, ttl=600)
    assert service.live(rec.id).expires_at is not None
    run(service.destroy(rec.id))
    with pytest.raises(NotFoundError, match="destroyed"):
        exec_true(service, rec.id)


def test_an_exec_sees_what_a_second_service_on_the_same_store_did(service: Service, settings: Settings) -> None:
    rec = create(service)
    assert exec_true(service, rec.id) == 0
    other = Service(settings)  # its own Store (connections) on the same file
    try:
        other.store.sandboxes.update(rec.id, spec=rec.spec.model_copy(update={"env": {"NEW": "x"}}))
        assert set(service.live(rec.id).spec.env) == {"NEW"}
        other.store.sandboxes.update(rec.id, state=SandboxState.paused)
        with pytest.raises(ConflictError, match="paused"):
            exec_true(service, rec.id)
        other.store.sandboxes.update(rec.id, state=SandboxState.lost, error="gone")
        with pytest.raises(NotFoundError, match="lost"):
            exec_true(service, rec.id)
    finally:
        run(other.close())
