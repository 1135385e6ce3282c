"""Names are each owner's own: two keys may both name a sandbox or a snapshot ``web``; a key's
name (and id prefix) finds its own only, and a clash never tells of another key's; an admin
finds its own first, else the one there is, and is told to give the id when several keys have
one. The local user (the unix socket's owner, an admin) sees no difference."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from hutch.actors import OWNER, TOKEN, Actor, reset_current, set_current
from hutch.errors import ConflictError, NotFoundError
from hutch.models import SandboxRecord, SandboxSpec, SandboxState, SnapshotRecord, new_id
from hutch.provider import tenant_storage
from hutch.service import Service
from hutch.store import MIGRATIONS, Store

ALICE = Actor("key_alice", "alice", frozenset({"read", "write"}))
BOB = Actor("key_bob", "bob", frozenset({"read", "write"}))


@contextmanager
def acting(actor: Actor) -> Iterator[None]:
    token = set_current(actor)
    try:
        yield
    finally:
        reset_current(token)


def box(name: str, owner: str, sid: str | None = None, state: SandboxState = SandboxState.running) -> SandboxRecord:
    now = time.time()
    return SandboxRecord(
        id=sid or new_id("sbx"),
        name=name,
        provider="fake",
        state=state,
        spec=SandboxSpec(name=name, provider="fake"),
        created_at=now,
        updated_at=now,
        owner=owner,
    )


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "hutch.db")


def test_two_keys_may_use_one_name_and_each_finds_its_own(store: Store) -> None:
    a, b = box("web", ALICE.id), box("web", BOB.id)
    store.sandboxes.insert(a)
    store.sandboxes.insert(b)  # no conflict: the name is bob's own
    with acting(ALICE):
        assert store.sandboxes.get("web").id == a.id
    with acting(BOB):
        assert store.sandboxes.get("web").id == b.id
    with pytest.raises(ConflictError, match="you already have a sandbox named 'web'"):
        store.sandboxes.insert(box("web", ALICE.id))  # a key's own names stay unique


def test_a_key_never_finds_another_keys_sandbox_by_name_or_prefix(store: Store) -> None:
    a = box("only-alice", ALICE.id, sid="sbx_abc111")
    store.sandboxes.insert(a)
    store.sandboxes.insert(box("x", BOB.id, sid="sbx_abc222"))
    with acting(BOB), pytest.raises(NotFoundError):
        store.sandboxes.get("only-alice")
    with acting(BOB):  # the prefix fits two ids, but only one is bob's: no conflict listing alice's
        assert store.sandboxes.get("sbx_abc").id == "sbx_abc222"
    with acting(ALICE):
        assert store.sandboxes.get("sbx_abc").id == "sbx_abc111"
    with acting(TOKEN), pytest.raises(ConflictError, match="sbx_abc111, sbx_abc222"):
        store.sandboxes.get("sbx_abc")  # an admin sees both


def test_an_admin_finds_its_own_first_else_the_one_else_must_give_the_id(store: Store) -> None:
    a, b = box("web", ALICE.id), box("web", BOB.id)
    store.sandboxes.insert(a)
    with acting(TOKEN):
        assert store.sandboxes.get("web").id == a.id  # the only one
    store.sandboxes.insert(b)
    with acting(TOKEN), pytest.raises(ConflictError, match="several keys have a sandbox named 'web'") as info:
        store.sandboxes.get("web")
    assert a.id in info.value.message and b.id in info.value.message and "id" in (info.value.hint or "")
    mine = box("web", TOKEN.id)
    store.sandboxes.insert(mine)
    with acting(TOKEN):
        assert store.sandboxes.get("web").id == mine.id  # its own first
        assert store.sandboxes.get(a.id).id == a.id  # the id always works


def test_the_local_user_sees_no_difference(store: Store) -> None:
    rec = box("dev", OWNER.id)
    store.sandboxes.insert(rec)
    assert store.sandboxes.get("dev").id == rec.id  # no actor: hutch itself, the owner
    with pytest.raises(ConflictError, match="'dev'") as info:
        store.sandboxes.insert(box("dev", OWNER.id))
    assert "hutch destroy dev" in (info.value.hint or "")


def test_snapshot_names_are_per_owner(store: Store) -> None:
    def snap(owner: str) -> SnapshotRecord:
        return SnapshotRecord(
            name="s1", sandbox_id="sbx_1", provider="fake", path=f"/x/{owner}", size=1, created_at=1.0, owner=owner
        )

    store.snapshots.insert(snap(ALICE.id))
    store.snapshots.insert(snap(BOB.id))
    with pytest.raises(ConflictError, match="you already have a snapshot named 's1'"):
        store.snapshots.insert(snap(BOB.id))
    with acting(ALICE):
        assert store.snapshots.get("s1").path == f"/x/{ALICE.id}"
    with acting(BOB):
        assert store.snapshots.get("s1").path == f"/x/{BOB.id}"
    with acting(TOKEN), pytest.raises(ConflictError, match="several keys have a snapshot named 's1'"):
        store.snapshots.get("s1")
    assert store.snapshots.delete(ALICE.id, "s1") and not store.snapshots.delete(ALICE.id, "s1")
    with acting(TOKEN):
        assert store.snapshots.get("s1").owner == BOB.id
    with acting(ALICE), pytest.raises(NotFoundError):
        store.snapshots.get("s1")


def test_the_migration_keeps_what_was_there(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
    for name, sql in MIGRATIONS:
        if name == "0012_names_per_owner":
            break
        conn.executescript(sql)
        conn.execute("INSERT INTO migrations VALUES (?, ?)", (name, time.time()))
    insert = (
        "INSERT INTO snapshots (name, sandbox_id, provider, path, size, created_at, owner)"
        " VALUES (?, 'sbx_1', 'fake', ?, 3, 1.0, ?)"
    )
    conn.execute(insert, ("s", "/p", None))
    conn.execute(insert, ("t", "/q", "key_alice"))
    conn.execute("INSERT INTO tenants (name, provider, created_at, owner) VALUES ('lab', 'fake', 1.0, 'key_alice')")
    conn.commit()
    conn.close()
    store = Store(path)
    assert "0012_names_per_owner" in store.db.migrations()
    assert store.snapshots.get("s").path == "/p"  # the local user's, as before
    assert {(s.name, s.owner) for s in store.snapshots.all()} == {("s", "owner"), ("t", ALICE.id)}
    [lab] = store.tenants.all()
    assert (lab["owner"], lab["name"], lab["storage"]) == (ALICE.id, "lab", "lab")  # its workspace stays where it is
    assert store.tenants.ensure("lab", "fake", BOB.id) == f"lab@{BOB.id}"
    assert store.tenants.ensure("lab", "fake", OWNER.id) == f"lab@{OWNER.id}"  # "lab" is alice's place already


def test_tenants_are_each_keys_own_with_workspaces_apart(service: Service) -> None:
    """Two keys' tenants named ``agent``: two workspaces (the provider keeps each under its own
    storage key), each key sees, reuses and deletes only its own; an admin must say which."""
    from tests.unit.test_workspaces_fake import fake, run

    with acting(OWNER):
        alice = service.keys.actor(service.keys.create("alice")["id"])
        bob = service.keys.actor(service.keys.create("bob")["id"])
    with acting(alice):
        a, _ = run(service.workspaces.ensure(SandboxSpec(provider="fake", tenant="agent")))
    fake(service).sandboxes[a.id]["/workspace/notes"] = b"alice's"
    with acting(bob):
        b, created = run(service.workspaces.ensure(SandboxSpec(provider="fake", tenant="agent")))  # no conflict
        assert created and "/workspace/notes" not in fake(service).sandboxes[b.id]  # not alice's workspace
        assert [(t["name"], t["owner"], t["sandbox"]) for t in service.workspaces.tenants()] == [("agent", bob.id, b.id)]
        assert "storage" not in service.workspaces.tenants()[0]
    assert tenant_storage(a) == f"agent@{alice.id}" and tenant_storage(b) == f"agent@{bob.id}"
    with acting(TOKEN), pytest.raises(ConflictError, match="several keys have a tenant named 'agent'"):
        run(service.workspaces.delete_tenant("agent"))
    with acting(alice):
        done = run(service.workspaces.delete_tenant("agent"))
        assert done["existed"] and done["destroyed"] == [a.id]
        again, _ = run(service.workspaces.ensure(SandboxSpec(provider="fake", tenant="agent")))
        assert "/workspace/notes" not in fake(service).sandboxes[again.id]  # a new workspace
    with acting(bob):
        assert service.get(b.id).state == SandboxState.running  # bob's tenant and sandbox untouched
        assert [t["sandbox"] for t in service.workspaces.tenants()] == [b.id]


def test_the_local_users_tenants_keep_their_place(service: Service) -> None:
    from tests.unit.test_workspaces_fake import run

    rec, _ = run(service.workspaces.ensure(SandboxSpec(provider="fake", tenant="dev")))
    assert tenant_storage(rec) == "dev"  # tenants/dev, as before names were per owner
    legacy = box("x", OWNER.id)
    legacy.spec = SandboxSpec(provider="fake", tenant="old")
    assert tenant_storage(legacy) == "old"  # a sandbox made before: its tenant's name
