"""Workspace use-cases (sessions, push/pull, snapshots, fork) on the fake provider."""

from __future__ import annotations

import asyncio
import io
import tarfile
from pathlib import Path
from typing import Any

import pytest

from hutch.client import transfer
from hutch.errors import ConflictError, InvalidError, NotFoundError, PolicyError
from hutch.models import SandboxSpec, SandboxState
from hutch.providers.fake import FakeProvider
from hutch.service import Service

run = asyncio.run


def fake(service: Service) -> FakeProvider:
    provider = service.provider("fake")
    assert isinstance(provider, FakeProvider)
    return provider


def push(service: Service, ref: str, root: Path, **kw: Any) -> dict[str, Any]:
    """What the client does: plan against the kept manifest, send one tar."""
    kept = service.workspaces.manifest(ref)["files"]
    plan = transfer.plan_push(root, kw.pop("exclude", ()), kept)
    body = transfer.push_body(root, plan.manifest, plan.send)
    head, _, rest = body.partition(b"\n")
    tar = root.parent / "push.tar"
    tar.write_bytes(rest[int(head) :])
    return run(service.workspaces.push(ref, plan.manifest, tar if plan.send else None, **kw))


def tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def sbx(service: Service, **kw: Any) -> str:
    return run(service.create(SandboxSpec(provider="fake", **kw))).id


def test_push_sends_changes_only_and_keeps_modes(service: Service, tmp_path: Path) -> None:
    root = tree(tmp_path / "src", {"a.txt": "a", "sub/b.sh": "echo b"})
    (root / "sub/b.sh").chmod(0o755)
    ref = sbx(service)
    first = push(service, ref, root)
    assert (first["files_sent"], first["skipped"], first["deleted"]) == (2, 0, 0)
    files = fake(service).sandboxes[ref]
    assert files["/workspace/a.txt"] == b"a" and files["/workspace/sub/b.sh"] == b"echo b"
    assert fake(service).modes[f"{ref}:/workspace/sub/b.sh"] == 0o755
    again = push(service, ref, root)
    assert (again["files_sent"], again["skipped"], again["bytes"]) == (0, 2, 0)
    (root / "a.txt").write_text("changed")
    third = push(service, ref, root)
    assert (third["files_sent"], third["skipped"]) == (1, 1)
    assert files["/workspace/a.txt"] == b"changed"
    assert [e["type"] for e in service.store.events.all(ref)].count("workspace_pushed") == 3


def test_push_delete_guard_and_dry_run(service: Service, tmp_path: Path) -> None:
    root = tree(tmp_path / "src", {f"f{i}.txt": str(i) for i in range(10)})
    ref = sbx(service)
    push(service, ref, root)
    for i in range(3):
        (root / f"f{i}.txt").unlink()
    with pytest.raises(PolicyError) as err:
        push(service, ref, root, delete=True)  # 3 of 10 > 20%
    assert "--force" in (err.value.hint or "")
    assert "/workspace/f0.txt" in fake(service).sandboxes[ref]  # nothing deleted
    plan = push(service, ref, root, delete=True, force=True, dry_run=True)
    assert plan["delete"] == ["f0.txt", "f1.txt", "f2.txt"] and plan["dry_run"]
    assert "/workspace/f0.txt" in fake(service).sandboxes[ref]
    done = push(service, ref, root, delete=True, force=True)
    assert done["deleted"] == 3
    assert "/workspace/f0.txt" not in fake(service).sandboxes[ref]
    (root / "f3.txt").unlink()  # 1 of 7: under both thresholds
    assert push(service, ref, root, delete=True)["deleted"] == 1


def test_push_refuses_paths_outside_the_workspace(service: Service) -> None:
    ref = sbx(service)
    for bad in ("../etc/passwd", "/etc/passwd", "a/../../b", ""):
        with pytest.raises(InvalidError):
            run(service.workspaces.push(ref, {bad: {"type": "file", "sha256": "x"}}, None))
    assert service.workspaces.manifest(ref)["files"] == {}


def test_push_without_content_is_a_conflict(service: Service) -> None:
    ref = sbx(service)
    with pytest.raises(ConflictError):
        run(service.workspaces.push(ref, {"a": {"type": "file", "sha256": "x", "size": 1}}, None))
    assert service.workspaces.manifest(ref)["files"] == {}


def test_pull_round_trip_and_overwrite_guard(service: Service, tmp_path: Path) -> None:
    root = tree(tmp_path / "src", {"a.txt": "a", "d/b.txt": "b"})
    ref = sbx(service)
    push(service, ref, root)
    tar = run(service.workspaces.pull(ref))
    data = tar.read_bytes()
    tar.unlink()
    out = tmp_path / "out"
    summary = transfer.pull_into(data, out)
    assert summary["files_received"] == 2
    assert (out / "d/b.txt").read_text() == "b"
    assert transfer.pull_into(data, out)["overwritten"] == 0  # same content: no conflict
    (out / "a.txt").write_text("mine")
    with pytest.raises(ConflictError) as err:
        transfer.pull_into(data, out)
    assert "--force" in (err.value.hint or "")
    assert (out / "a.txt").read_text() == "mine"
    assert transfer.pull_into(data, out, dry_run=True)["overwrite"] == ["a.txt"]
    transfer.pull_into(data, out, force=True)
    assert (out / "a.txt").read_text() == "a"


def test_pull_skips_links_leaving_the_tree(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        # "a" looks inside when read alone, but leaves the tree through the link "b"
        for name, target in (("up", ".."), ("abs", "/etc"), ("b", "."), ("a", "b/.."), ("ok", "b")):
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
        info = tarfile.TarInfo("a/escape")
        tar.addfile(info, io.BytesIO(b""))
    out = tmp_path / "out"
    summary = transfer.pull_into(buf.getvalue(), out)
    assert not (tmp_path / "escape").exists()
    assert not (out / "up").is_symlink() and not (out / "abs").is_symlink() and not (out / "a").is_symlink()
    assert (out / "ok").is_symlink() and summary["skipped"] == 2
    with pytest.raises(InvalidError):
        bad = io.BytesIO()
        with tarfile.open(fileobj=bad, mode="w") as tar:
            tar.addfile(tarfile.TarInfo("../evil"), io.BytesIO(b""))
        transfer.pull_into(bad.getvalue(), out)
    assert not (tmp_path / "evil").exists()


def test_snapshot_save_restore_delete(service: Service, tmp_path: Path) -> None:
    root = tree(tmp_path / "src", {"a.txt": "a"})
    ref = sbx(service, name="base")
    push(service, ref, root)
    snap = run(service.workspaces.snapshot_save(ref, "s1"))
    assert Path(snap.path).is_file()
    fake(service).sandboxes[ref]["/workspace/later.txt"] = b"later"
    with pytest.raises(ConflictError):
        run(service.workspaces.snapshot_save(ref, "s1"))
    restored = run(service.workspaces.snapshot_restore("s1", "copy"))
    assert restored.name == "copy"
    assert fake(service).sandboxes[restored.id] == {"/workspace/a.txt": b"a"}
    assert [s.name for s in service.workspaces.snapshots()] == ["s1"]
    assert run(service.workspaces.snapshot_delete("s1"))["existed"]
    assert not Path(snap.path).exists()
    assert not run(service.workspaces.snapshot_delete("s1"))["existed"]


def test_restore_of_a_missing_snapshot_makes_nothing(service: Service) -> None:
    with pytest.raises(NotFoundError):
        run(service.workspaces.snapshot_restore("nope"))
    with pytest.raises(InvalidError):
        run(service.workspaces.snapshot_save(sbx(service), "bad name"))
    assert len(service.list(include_all=True)) == 1


def test_fork_gives_independent_copies(service: Service) -> None:
    ref = sbx(service)
    fake(service).sandboxes[ref]["/workspace/x"] = b"x"
    result = run(service.workspaces.fork(ref, 3, "kid-"))
    assert (result["created"], result["failed"]) == (3, 0)
    kids = [c["sandbox"] for c in result["children"]]
    assert [c["name"] for c in result["children"]] == ["kid-1", "kid-2", "kid-3"]
    fake(service).sandboxes[kids[0]]["/workspace/x"] = b"changed"
    assert fake(service).sandboxes[kids[1]]["/workspace/x"] == b"x"
    assert fake(service).sandboxes[ref]["/workspace/x"] == b"x"


def test_fork_reports_each_child(service: Service) -> None:
    ref = sbx(service)
    run(service.create(SandboxSpec(provider="fake", name="kid-2")))  # takes the second child's name
    result = run(service.workspaces.fork(ref, 3, "kid-"))
    assert (result["created"], result["failed"]) == (2, 1)
    assert result["children"][1]["error"]["kind"] == "conflict"


def test_fork_of_a_destroyed_sandbox_makes_nothing(service: Service) -> None:
    ref = sbx(service)
    run(service.destroy(ref))
    with pytest.raises(NotFoundError):
        run(service.workspaces.fork(ref, 2))
    with pytest.raises(InvalidError):
        run(service.workspaces.fork(ref, 0))
    assert len(service.list(include_all=True)) == 1


def test_auto_mode_reuses_then_recreates(service: Service) -> None:
    spec = SandboxSpec(provider="fake", reuse_key="k1")
    first, created = run(service.workspaces.ensure(spec))
    assert created
    again, created = run(service.workspaces.ensure(spec))
    assert (again.id, created) == (first.id, False)
    other, created = run(service.workspaces.ensure(SandboxSpec(provider="fake", reuse_key="k2")))
    assert created and other.id != first.id
    del fake(service).sandboxes[first.id]  # the sandbox vanished
    third, created = run(service.workspaces.ensure(spec))
    assert created and third.id != first.id
    assert service.get(first.id).state == SandboxState.lost


def test_tenant_workspace_survives_destroy(service: Service) -> None:
    rec, _ = run(service.workspaces.ensure(SandboxSpec(provider="fake", tenant="alice")))
    fake(service).sandboxes[rec.id]["/workspace/notes"] = b"keep"
    with pytest.raises(ConflictError):
        run(service.create(SandboxSpec(provider="fake", tenant="alice")))
    run(service.destroy(rec.id))
    again, created = run(service.workspaces.ensure(SandboxSpec(provider="fake", tenant="alice")))
    assert created and fake(service).sandboxes[again.id]["/workspace/notes"] == b"keep"
    assert [(t["name"], t["sandbox"]) for t in service.workspaces.tenants()] == [("alice", again.id)]
    result = run(service.workspaces.delete_tenant("alice"))
    assert result["destroyed"] == [again.id] and result["existed"] is True
    assert service.workspaces.tenants() == [] and "alice" not in fake(service).tenants
    # idempotent teardown, like destroy and snapshot delete: gone already is a success that says so
    again = run(service.workspaces.delete_tenant("alice"))
    assert again == {"tenant": "alice", "deleted": True, "existed": False, "destroyed": []}
