"""What a sandbox changed (``hutch diff``, ``hutch ls --since``): the writable root of an image
sandbox and the workspace of any sandbox, judged by ctime, on real sandboxes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import Daemon, destroy_all, hutch_env, sweep
from tests.integration.image_roots import busybox_root, image_daemon, shared_dir

from hutch import Sandbox

pytestmark = pytest.mark.integration


@pytest.fixture(scope="session")
def busybox() -> Iterator[Path]:
    base = shared_dir("hutch-changes-")
    try:
        yield busybox_root(base / "busybox")
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def idaemon(hutch_home: Path, busybox: Path) -> Iterator[Daemon]:
    d = image_daemon(hutch_home, {"busybox": {"rootfs": str(busybox), "env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"]}})
    try:
        yield d
    finally:
        try:
            destroy_all(hutch_home)
        finally:
            d.stop()
            sweep(hutch_home)


def kinds(found: dict[str, object]) -> dict[str, str]:
    return {c["path"]: c["kind"] for c in found["changes"]}  # type: ignore[attr-defined]


def ok(sbx: Sandbox, command: str) -> None:
    r = sbx.exec(command)
    assert r.exit_code == 0, (command, r.stdout, r.stderr)


def cut_after_now(sbx: Sandbox) -> float:
    """A time every later change's ctime is at or after: now, once the kernel's clock for
    ctimes (coarse) has passed it (polled through a probe file, never slept)."""
    ok(sbx, "mkdir -p /workspace/.p")  # the probe's own directory: /workspace does not change after the cut
    since = time.time()
    deadline = time.monotonic() + 60
    while True:
        ok(sbx, "touch /workspace/.p/probe")
        probe = sbx.diff(path="/workspace/.p/probe")["changes"]
        if probe and probe[0]["ctime"] >= since:
            return since
        assert time.monotonic() < deadline


def cli(d: Daemon, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hutch", *args], env=hutch_env(d.home), capture_output=True, text=True, timeout=120
    )


def test_an_image_sandbox_diff_sees_adds_changes_and_deletes_in_its_root_and_workspace(idaemon: Daemon) -> None:
    with Sandbox.create(settings=idaemon.settings, image="busybox") as sbx:
        assert sbx.diff()["changes"] == []  # nothing of hutch's own (mount points, /tmp, /root) shows
        ok(
            sbx,
            "echo new > /usr/local/added && echo more >> /etc/marker && rm /bin/ls && mkdir -p /etc/app/conf"
            " && echo w > /workspace/w.txt && chmod 600 /etc/group",
        )
        got = kinds(sbx.diff())
        assert got["/usr/local/added"] == "added"
        assert got["/etc/marker"] == "modified"
        assert got["/etc/group"] == "modified"
        assert got["/bin/ls"] == "deleted"
        assert got["/etc/app"] == got["/etc/app/conf"] == "added"
        assert got["/workspace/w.txt"] == "added"
        # nothing else but the directories those changes are in
        assert set(got) - {"/usr", "/usr/local", "/etc", "/bin"} == {
            "/usr/local/added",
            "/etc/marker",
            "/etc/group",
            "/bin/ls",
            "/etc/app",
            "/etc/app/conf",
            "/workspace/w.txt",
        }, got
        deleted = next(c for c in sbx.diff()["changes"] if c["path"] == "/bin/ls")
        assert deleted["type"] == "symlink"  # what the image had there

        # --since: only what changed at or after it, even when the workload sets mtimes back
        since = cut_after_now(sbx)
        ok(sbx, "touch -d '2001-01-01 00:00' /etc/marker /workspace/w.txt && echo x > /workspace/late && rm /etc/passwd")
        later = kinds(sbx.diff(since=since))
        assert later["/etc/marker"] == "modified" and later["/workspace/w.txt"] == "added"  # mtime 2001, ctime now
        assert later["/workspace/late"] == "added" and later["/etc/passwd"] == "deleted"
        assert "/usr/local/added" not in later and "/bin/ls" not in later and "/etc/group" not in later
        marker = next(c for c in sbx.diff(since=since)["changes"] if c["path"] == "/etc/marker")
        assert marker["ctime"] >= since

        # ls --since: what changed under a directory since then, deletions left out
        r = cli(idaemon, "ls", sbx.id, "/etc", "--since", str(since), "--json")
        assert r.returncode == 0, r.stderr
        assert [c["path"] for c in json.loads(r.stdout)] == ["/etc/marker"]
        r = cli(idaemon, "diff", sbx.id)
        assert r.returncode == 0, r.stderr
        lines = set(r.stdout.splitlines())
        assert {"A /usr/local/added", "C /etc/marker", "D /bin/ls", "D /etc/passwd", "A /workspace/late"} <= lines


def test_an_opaque_directory_and_a_replaced_one_are_seen_whole(idaemon: Daemon) -> None:
    with Sandbox.create(settings=idaemon.settings, image="busybox") as sbx:
        ok(sbx, "rm -r /usr/local && mkdir /usr/local && echo fresh > /usr/local/only && rm /etc/marker && mkdir /etc/marker")
        got = kinds(sbx.diff())
        assert got["/usr/local"] == "modified" and got["/usr/local/only"] == "added"
        assert got["/etc/marker"] == "modified"  # a file the image had, now a directory


def tenant_sandbox(d: Daemon, name: str) -> Sandbox:
    r = cli(d, "create", "--tenant", name, "--json")
    assert r.returncode == 0, r.stderr
    return Sandbox.connect(json.loads(r.stdout)["id"], settings=d.settings)


def test_a_host_usr_sandbox_diffs_its_workspace_against_its_start(daemon: Daemon) -> None:
    first = tenant_sandbox(daemon, "diffs")
    ok(first, "echo a > a.txt && echo b > b.txt && mkdir d && echo c > d/c.txt && echo k > keep.txt")
    first.destroy()
    with tenant_sandbox(daemon, "diffs") as sbx:
        assert sbx.diff()["changes"] == []
        ok(sbx, "echo more >> a.txt && rm b.txt && echo n > n.txt")
        found = sbx.diff()
        assert any("host" in n for n in found["notes"]), found["notes"]
        got = kinds(found)
        assert got == {"/workspace/a.txt": "modified", "/workspace/b.txt": "deleted", "/workspace/n.txt": "added"}

        since = cut_after_now(sbx)
        ok(sbx, "rm d/c.txt && touch -d '2001-01-01 00:00' keep.txt")
        later = kinds(sbx.diff(since=since))
        assert later["/workspace/d/c.txt"] == "deleted"  # its directory changed since
        assert later["/workspace/keep.txt"] == "modified"  # an mtime set back still moves the ctime
        assert "/workspace/b.txt" not in later  # deleted before since, in a directory unchanged since
        assert "/workspace/a.txt" not in later and "/workspace/n.txt" not in later
        r = cli(daemon, "ls", sbx.id, "--since", str(since))
        assert r.returncode == 0, r.stderr
        assert "/workspace/keep.txt" in r.stdout.split() and "/workspace/d/c.txt" not in r.stdout


def test_bad_times_are_refused(daemon: Daemon) -> None:
    with Sandbox.create(settings=daemon.settings) as sbx:
        r = cli(daemon, "diff", sbx.id, "--since", "yesterday-ish", "--json")
        assert r.returncode == 2 and json.loads(r.stdout)["error"]["kind"] == "invalid"
        r = cli(daemon, "diff", sbx.id, "--since", "10m", "--json")
        assert r.returncode == 0 and json.loads(r.stdout)["changes"] == []
