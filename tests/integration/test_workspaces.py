"""Workspaces on real sandboxes: session modes, push/pull, snapshots, fork, bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import Daemon, sweep

from hutch import HutchError, Sandbox

# Inside a sandbox: every path under /workspace with its type, mode, content hash,
# symlink target and user xattrs, as JSON.
TREE = r"""
import hashlib, json, os, stat
out = {}
for top, dirs, files in os.walk("/workspace"):
    for n in dirs + files:
        p = os.path.join(top, n); st = os.lstat(p); rel = os.path.relpath(p, "/workspace")
        e = {"mode": stat.S_IMODE(st.st_mode), "uid": st.st_uid}
        if stat.S_ISLNK(st.st_mode): e["link"] = os.readlink(p)
        elif stat.S_ISREG(st.st_mode):
            e["sha"] = hashlib.sha256(open(p, "rb").read()).hexdigest()
            e["xattrs"] = {k: os.getxattr(p, k).decode() for k in os.listxattr(p)}
        else: e["dir"] = True
        out[rel] = e
print(json.dumps(out, sort_keys=True))
"""


def cli(daemon: Daemon, *args: str, cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "hutch", *args], env=daemon.env, capture_output=True, text=True, cwd=cwd, timeout=120
    )
    if check:
        assert proc.returncode == 0, proc.stderr + proc.stdout
    return proc


def cli_json(daemon: Daemon, *args: str, **kw: Any) -> Any:
    at = args.index("--") if "--" in args else len(args)
    return json.loads(cli(daemon, *args[:at], "--json", *args[at:], **kw).stdout)


def tree_of(sbx: Sandbox) -> dict[str, Any]:
    r = sbx.exec(["python3", "-c", TREE])
    assert r.exit_code == 0, r.stderr
    return dict(json.loads(r.stdout))


def make_tree(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "README").write_text("hello\n")
    (root / "pkg/run.sh").write_text("#!/bin/sh\necho run\n")
    (root / "pkg/run.sh").chmod(0o750)
    (root / "pkg/data.bin").write_bytes(bytes(range(256)) * 100)
    (root / "link").symlink_to("pkg/run.sh")
    (root / "escape").symlink_to("/etc/passwd")
    return root


def test_push_pull_round_trip(daemon: Daemon, tmp_path: Path) -> None:
    src = make_tree(tmp_path / "src")
    sbx = Sandbox.create(settings=daemon.settings)
    first = cli_json(daemon, "push", sbx.id, str(src))
    assert (first["files_sent"], first["deleted"]) == (4, 0)
    assert any("escape" in s for s in first["skipped_paths"])  # pointing outside: not followed
    inside = tree_of(sbx)
    assert inside["pkg/run.sh"]["mode"] == 0o750 and inside["link"]["link"] == "pkg/run.sh"
    assert "escape" not in inside
    assert sbx.exec("./link").stdout == "run\n"
    again = cli_json(daemon, "push", sbx.id, str(src))
    assert (again["files_sent"], again["bytes"], again["skipped"]) == (0, 0, 4)  # a repeat push sends nothing

    sbx.exec("echo made > made.txt")
    out = tmp_path / "out"
    pulled = cli_json(daemon, "pull", sbx.id, str(out))
    assert pulled["files_received"] == 5
    assert (out / "pkg/run.sh").stat().st_mode & 0o777 == 0o750
    assert os.readlink(out / "link") == "pkg/run.sh"
    assert (out / "pkg/data.bin").read_bytes() == (src / "pkg/data.bin").read_bytes()
    assert (out / "made.txt").read_text() == "made\n"


def test_delete_guard_and_deletions(daemon: Daemon, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for i in range(10):
        (src / f"f{i}").write_text(str(i))
    sbx = Sandbox.create(settings=daemon.settings)
    cli(daemon, "push", sbx.id, str(src))
    sbx.exec("echo mine > own.txt")
    for i in range(5):
        (src / f"f{i}").unlink()
    tripped = cli(daemon, "push", sbx.id, str(src), "--delete", "--json", check=False)
    assert tripped.returncode == 1
    assert json.loads(tripped.stdout)["error"]["kind"] == "policy"
    assert sbx.exec("ls f0").exit_code == 0  # nothing deleted
    done = cli_json(daemon, "push", sbx.id, str(src), "--delete", "--force")
    assert done["deleted"] == 5
    names = sbx.exec("ls").stdout.split()
    assert names == sorted(["f5", "f6", "f7", "f8", "f9", "own.txt"])  # made in the sandbox: kept


def test_push_of_a_git_repo_sends_what_git_would(daemon: Daemon, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / ".gitignore").write_text("build/\n")
    (repo / "tracked.py").write_text("x = 1\n")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "init"], check=True)
    (repo / "new.py").write_text("y = 2\n")
    (repo / "build").mkdir()
    (repo / "build/out.o").write_text("ignored")
    sbx = Sandbox.create(settings=daemon.settings)
    summary = sbx.push(str(repo))
    assert summary["files_sent"] == 3
    assert sorted(sbx.exec("ls -A").stdout.split()) == [".gitignore", "new.py", "tracked.py"]


def test_snapshot_restore_gives_an_equal_tree(daemon: Daemon) -> None:
    sbx = Sandbox.create(settings=daemon.settings)
    sbx.exec(
        "mkdir -p d/e && echo a > a && echo b > d/e/b && chmod 640 d/e/b && chmod 711 d && ln -s d/e/b lb && "
        "python3 -c \"import os; os.setxattr('a', 'user.tag', b'v1')\""
    )
    base = sbx.snapshot("base")
    assert base["size"] > 0
    sbx.exec("rm d/e/b && echo changed > a && echo new > n")
    before = tree_of(sbx)
    sbx.snapshot("after")
    restored = Sandbox.restore("after", name="restored", settings=daemon.settings)
    assert restored.id != sbx.id and restored.name == "restored"
    assert tree_of(restored) == before  # hashes, modes, xattrs, symlinks, the deletion
    old = Sandbox.restore("base", settings=daemon.settings)
    old_tree = tree_of(old)
    assert old_tree["a"]["xattrs"] == {"user.tag": "v1"} and old_tree["d/e/b"]["mode"] == 0o640
    assert "n" not in old_tree and old_tree["d"]["mode"] == 0o711
    listed = [s["name"] for s in cli_json(daemon, "snapshot", "list")]
    assert listed == ["base", "after"]
    assert cli_json(daemon, "snapshot", "delete", "base")["existed"]
    assert not (daemon.home / "snapshots" / "base.tar").exists()


def test_fork_gives_independent_workspaces(daemon: Daemon) -> None:
    sbx = Sandbox.create(settings=daemon.settings)
    sbx.exec("echo source > f && mkdir -p d && echo x > d/x")
    kids = sbx.fork(5, name_prefix="kid-")
    assert all(isinstance(k, Sandbox) for k in kids) and len(kids) == 5
    sandboxes = [k for k in kids if isinstance(k, Sandbox)]
    assert [k.name for k in sandboxes] == [f"kid-{i}" for i in range(1, 6)]
    for i, kid in enumerate(sandboxes):
        kid.exec(f"echo {i} > f")
    assert sbx.exec("cat f").stdout == "source\n"
    assert [k.exec("cat f d/x").stdout for k in sandboxes] == [f"{i}\nx\n" for i in range(5)]


def test_fork_of_an_empty_workspace_runs_no_copy_and_gives_what_the_tar_copy_gave(daemon: Daemon) -> None:
    root = "stat -c '%a %Y' /workspace; ls -A /workspace | wc -l"
    keep = "python3 -c 'import os; print(sorted(os.listxattr(\"/workspace\")))'"
    sbx = Sandbox.create(settings=daemon.settings)
    assert sbx.exec("chmod 751 /workspace && touch -d 2001-01-01 /workspace").exit_code == 0
    (child,) = daemon.client().fork(sbx.id)["children"]
    assert child["method"] == "empty" and child["skipped"] == 0, child
    kid = Sandbox.connect(child["sandbox"], settings=daemon.settings)
    # as the tar pipe left it: its own directory's mode (--no-overwrite-dir), the source's mtime, nothing in it
    assert kid.exec(root).stdout.split() == ["700", "978307200", "0"]
    forked = daemon.client().events(kid.id, types=["sandbox_forked"])
    assert [e["data"]["method"] for e in forked if e["type"] == "sandbox_forked"] == ["empty"]

    # a user attribute on the directory, a lone dot file, a lone symlink out: the tar pipe carries them
    setx = 'python3 -c \'import os; os.setxattr("/workspace", "user.k", b"v")\''
    cases = {"xattr": setx, "dotfile": "echo hidden > .h", "symlink": "ln -s /etc/passwd escape"}
    for what, make in cases.items():
        src = Sandbox.create(settings=daemon.settings)
        assert src.exec(make).exit_code == 0, what
        (child,) = daemon.client().fork(src.id)["children"]
        assert child["method"] == "tar", (what, child)
        kid = Sandbox.connect(child["sandbox"], settings=daemon.settings)
        assert tree_of(kid) == tree_of(src), what
        assert kid.exec(keep).stdout == src.exec(keep).stdout, what


def test_auto_mode_reuses_and_recreates_without_rerunning(daemon: Daemon, tmp_path: Path) -> None:
    count = "echo x >> /workspace/count; wc -l < /workspace/count"
    one = cli_json(daemon, "run", "--reuse", "--", count, cwd=tmp_path)
    two = cli_json(daemon, "run", "--reuse", "--", count, cwd=tmp_path)
    assert (one["stdout"], two["stdout"]) == ("1\n", "2\n") and one["sandbox_id"] == two["sandbox_id"]
    other = tmp_path / "other"
    other.mkdir()
    env_mode = subprocess.run(
        [sys.executable, "-m", "hutch", "run", "--json", "--", count],
        env=daemon.env | {"HUTCH_REUSE": "1"},
        cwd=other,
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(env_mode.stdout)["sandbox_id"] != one["sandbox_id"]  # one sandbox per directory

    # the sandbox dies while a command runs: the run is lost, never started again
    slow = subprocess.Popen(
        [sys.executable, "-m", "hutch", "run", "--reuse", "--json", "--", "echo started >> /workspace/log; sleep 60"],
        env=daemon.env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        text=True,
    )
    sbx = Sandbox.connect(one["sandbox_id"], settings=daemon.settings)
    deadline = time.monotonic() + 30
    while sbx.exec("cat log").exit_code != 0:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    killed = [s for s in sweep(daemon.home) if s == sbx.id]  # kills every sandbox of this home
    assert killed
    out, _ = slow.communicate(timeout=60)
    assert slow.returncode == 125, out
    runs = daemon.client().runs(sbx.id)
    started = [r for r in runs if "started" in json.dumps(r["command"])]
    assert [r["status"] for r in started] == ["lost"]
    fresh = cli_json(daemon, "run", "--reuse", "--", "cat /workspace/log 2>/dev/null | wc -l", cwd=tmp_path)
    assert fresh["sandbox_id"] != sbx.id and fresh["stdout"] == "0\n"  # recreated, and nothing re-run
    assert daemon.client().get(sbx.id)["state"] == "lost"


def test_tenant_workspace_survives_destroy(daemon: Daemon) -> None:
    count = "echo x >> /workspace/count; wc -l < /workspace/count"
    first = cli_json(daemon, "run", "--tenant", "alice", "--", count)
    assert first["stdout"] == "1\n"
    conflict = cli(daemon, "create", "--tenant", "alice", "--json", check=False)
    assert conflict.returncode == 1 and json.loads(conflict.stdout)["error"]["kind"] == "conflict"
    cli(daemon, "destroy", first["sandbox_id"])
    second = cli_json(daemon, "run", "--tenant", "alice", "--", count)
    assert second["sandbox_id"] != first["sandbox_id"] and second["stdout"] == "2\n"
    tenants = cli_json(daemon, "tenant", "list")
    assert [(t["name"], t["sandbox"]) for t in tenants] == [("alice", second["sandbox_id"])]
    deleted = cli_json(daemon, "tenant", "delete", "alice")
    assert deleted["destroyed"] == [second["sandbox_id"]]
    assert not (daemon.home / "tenants" / "alice").exists()
    third = cli_json(daemon, "run", "--tenant", "alice", "--", count)
    assert third["stdout"] == "1\n"
    cli(daemon, "tenant", "delete", "alice")


def test_session_id_is_an_alias_everywhere(daemon: Daemon) -> None:
    sbx = Sandbox.create(name="sess", settings=daemon.settings)
    assert cli(daemon, "exec", "--session-id", "sess", "--", "echo", "hi").stdout == "hi\n"
    assert cli_json(daemon, "get", "--session-id", sbx.id)["id"] == sbx.id
    cli(daemon, "write", "--session-id=sess", "f.txt", "--from", "/etc/hostname")
    assert cli_json(daemon, "ls", "--session-id", "sess")[0]["name"] == "f.txt"
    assert cli_json(daemon, "run", "--session-id", "sess", "--", "ls")["stdout"] == "f.txt\n"


def test_bad_input_is_clear_and_makes_nothing(daemon: Daemon, tmp_path: Path) -> None:
    sbx = Sandbox.create(settings=daemon.settings)
    before = {s["id"] for s in daemon.client().list()}
    missing = cli(daemon, "snapshot", "restore", "nope", "--json", check=False)
    assert missing.returncode == 1 and json.loads(missing.stdout)["error"]["kind"] == "not_found"
    gone = Sandbox.create(settings=daemon.settings)
    gone.destroy()
    forked = cli(daemon, "fork", gone.id, "--count", "2", "--json", check=False)
    assert forked.returncode == 1 and json.loads(forked.stdout)["error"]["kind"] == "not_found"
    bad_count = cli(daemon, "fork", sbx.id, "--count", "0", "--json", check=False)
    assert bad_count.returncode == 2
    assert {s["id"] for s in daemon.client().list()} == before
    assert not (daemon.home / "snapshots").exists() or not list((daemon.home / "snapshots").iterdir())

    sbx.exec("echo theirs > a.txt && echo same > b.txt")
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.txt").write_text("mine\n")
    (out / "b.txt").write_text("same\n")
    refused = cli(daemon, "pull", sbx.id, str(out), "--json", check=False)
    assert refused.returncode == 1
    err = json.loads(refused.stdout)["error"]
    assert err["kind"] == "conflict" and "a.txt" in err["message"] and "--force" in err["hint"]
    assert (out / "a.txt").read_text() == "mine\n"
    cli(daemon, "pull", sbx.id, str(out), "--force")
    assert (out / "a.txt").read_text() == "theirs\n"
    with pytest.raises(HutchError) as exc:
        sbx.push(str(tmp_path / "no-such-dir"))
    assert exc.value.kind == "invalid"
    assert not list((daemon.home / "tmp").glob("*"))  # no spooled push or pull left behind
