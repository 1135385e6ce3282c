"""The warm pool on a real daemon with the local provider: the default shape's members are
handed out as sandboxes like any other, are not listed, are counted with their memory,
never outlive the daemon, are adopted again or destroyed after a kill -9, and a member
killed while idle is replaced instead of handed out."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import Daemon, destroy_all, sweep
from tests.integration.image_roots import busybox_root, image_daemon, shared_dir
from tests.integration.test_workspaces import tree_of

from hutch import Sandbox
from hutch.client import Client
from hutch.providers.local import cgroups
from hutch.store import Store

pytestmark = pytest.mark.integration
DEADLINE = 180.0  # generous: members start at the lowest cpu priority on a loaded machine


def until(check: Callable[[], Any], what: str) -> Any:
    end = time.monotonic() + DEADLINE
    while not (value := check()):
        assert time.monotonic() < end, f"gave up waiting for {what}"
        time.sleep(0.1)
    return value


def hutch(d: Daemon, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hutch", *args], env=d.env, capture_output=True, text=True, timeout=120)


def full(c: Client, size: int) -> list[str]:
    """Wait for the host pool to have ``size`` ready members; their ids, oldest first."""

    def ready() -> bool:
        (pool,) = c.pool_status()["pools"]
        return pool["ready"] == size and pool["starting"] == 0

    until(ready, f"{size} ready pool members")
    return members(c)


def members(c: Client) -> list[str]:
    return [m.id for m in Store(c.settings.db_path).pool.members()]


def leftovers(home: Path, ids: list[str]) -> list[str]:
    """Whatever of these members still exists: directories, cgroups, processes, mounts."""
    layout = cgroups.detect()
    parents = [*layout.v1.values(), *([layout.v2 / cgroups.GROUP] if layout.v2 else [])]
    found = [f"directory {home / 'sandboxes' / i}" for i in ids if (home / "sandboxes" / i).exists()]
    found += [f"cgroup {p / i}" for p in parents for i in ids if (p / i).exists()]
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            text = Path(f"/proc/{pid}/cgroup").read_text() + Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        found += [f"process {pid} of {i}" for i in ids if i in text]
    mounts = Path("/proc/self/mountinfo").read_text()
    found += [f"a mount of {i}" for i in ids if i in mounts]
    return found


@pytest.fixture
def pooled(hutch_home: Path) -> Iterator[Callable[..., Daemon]]:
    """Start daemons of ``hutch_home`` with a pool (the last one is stopped after the test)."""
    started: list[Daemon] = []

    def start(size: str = "") -> Daemon:
        d = Daemon(hutch_home, HUTCH_POOL_SIZE=size).start()
        started.append(d)
        return d

    yield start
    try:
        destroy_all(hutch_home)
    finally:
        for d in started:
            d.stop()
        sweep(hutch_home)


def test_the_default_pool_hands_out_members_like_cold_sandboxes(pooled: Callable[..., Daemon]) -> None:
    d = pooled()  # HUTCH_POOL_SIZE unset: the default size
    with d.client() as c:
        status = c.pool_status()
        assert [(p["shape"], p["size"], p["source"]) for p in status["pools"]] == [("host", 2, "the pool_size setting")]
        ready = full(c, 2)
        assert c.list() == []  # members are not sandboxes
        doctor = json.loads(hutch(d, "doctor", "--json").stdout)
        (check,) = [ch for ch in doctor["checks"] if ch["name"] == "pool"]
        assert check["ok"] and check["detail"].startswith("2 members: host 2/2 ready (") and "MiB" in check["detail"]
        assert c.pool_status()["memory"] > 0

        sbx = Sandbox.create(
            name="warm", env={"GREETING": "hi"}, memory="256M", pids=64, cpus=0.5, labels={"k": "v"}, settings=d.settings
        )
        assert sbx.id in ready
        r = sbx.exec(["sh", "-c", "echo $GREETING; id -u; ls /workspace | wc -l"])
        assert r.stdout.split() == ["hi", "1000", "0"]
        info = c.get(sbx.id)
        assert info["name"] == "warm" and info["spec"]["labels"] == {"k": "v"}
        assert {k: info["enforcement"][k] for k in ("memory", "pids", "cpus")} == dict.fromkeys(
            ("memory", "pids", "cpus"), "cgroup v1"
        )
        layout = cgroups.detect()
        if "memory" in layout.v1:
            assert (layout.v1["memory"] / sbx.id / "memory.limit_in_bytes").read_text().strip() == str(256 << 20)
            assert (layout.v1["pids"] / sbx.id / "pids.max").read_text().strip() == "64"
            assert (layout.v1["cpu"] / sbx.id / "cpu.cfs_quota_us").read_text().strip() == "50000"
            if (layout.v1["cpu"] / sbx.id / "cpu.idle").exists():  # handed out: the normal cpu priority again
                assert (layout.v1["cpu"] / sbx.id / "cpu.idle").read_text().strip() == "0"
        assert [r["id"] for r in c.list()] == [sbx.id]
        created = [e for e in c.events(sbx.id) if e["type"] == "sandbox_created"]
        assert created[0]["data"]["pool"] is True
        sbx.destroy()
        assert leftovers(d.home, [sbx.id]) == []
        after = full(c, 2)  # refilled
        assert sbx.id not in after


def test_a_fork_takes_a_ready_member_and_its_child_is_made_like_a_cold_fork(pooled: Callable[..., Daemon]) -> None:
    d = pooled("2")
    with d.client() as c:
        src = Sandbox.create(
            name="src", env={"K": "v"}, memory="256M", pids=64, cpus=0.5, labels={"team": "a"}, settings=d.settings
        )
        made = src.exec("echo hello > f && chmod 600 f && mkdir d && echo x > d/x && ln -s /etc escape")
        assert made.exit_code == 0, made.stderr
        ready = full(c, 2)
        warm = c.fork(src.id, 1, "warm-")["children"][0]
        assert warm["sandbox"] in ready and warm["sandbox"] not in members(c)  # taken: a member no more, never again
        drained = hutch(d, "pool", "drain")
        assert drained.returncode == 0, drained.stderr
        cold = c.fork(src.id, 1, "cold-")["children"][0]
        assert cold["sandbox"] and cold["sandbox"] not in ready
        created = {
            k: next(e for e in c.events(k) if e["type"] == "sandbox_created")["data"] for k in (warm["sandbox"], cold["sandbox"])
        }
        assert created[warm["sandbox"]].get("pool") is True and not created[cold["sandbox"]].get("pool")

        source = tree_of(src)
        kids = {}
        for child, name in ((warm, "warm-1"), (cold, "cold-1")):
            assert child["method"] == "tar" and child["name"] == name, child
            kid = Sandbox.connect(child["sandbox"], settings=d.settings)
            assert tree_of(kid) == source  # content, modes, the symlink as a symlink
            assert kid.exec("echo ${K-unset}; id -u").stdout.split() == ["unset", "1000"]  # env values are not copied
            forked = c.events(kid.id, types=["sandbox_forked"])
            assert [e["data"]["source"] for e in forked if e["type"] == "sandbox_forked"] == [src.id]
            kids[name] = c.get(kid.id)
        warm_rec, cold_rec = kids["warm-1"], kids["cold-1"]
        for rec in (warm_rec, cold_rec):
            assert rec["spec"]["labels"] == {"team": "a"} and rec["spec"]["parent"] is None
        assert {k: v for k, v in warm_rec["spec"].items() if k != "name"} == {
            k: v for k, v in cold_rec["spec"].items() if k != "name"
        }
        assert warm_rec["enforcement"] == cold_rec["enforcement"]
        assert warm_rec["expires_at"] is None and cold_rec["expires_at"] is None
        layout = cgroups.detect()
        if "memory" in layout.v1:
            for kid_id in (warm["sandbox"], cold["sandbox"]):
                assert (layout.v1["memory"] / kid_id / "memory.limit_in_bytes").read_text().strip() == str(256 << 20)
                assert (layout.v1["pids"] / kid_id / "pids.max").read_text().strip() == "64"
                assert (layout.v1["cpu"] / kid_id / "cpu.cfs_quota_us").read_text().strip() == "50000"
        owners = {(d.home / "sandboxes" / i / "workspace").stat().st_uid for i in (src.id, warm["sandbox"], cold["sandbox"])}
        assert len(owners) == 3  # each child runs as a host uid of its own

        # a sub-agent shares its parent's workspace from its start: its fork is made cold, still a sub-agent
        hutch(d, "pool", "set", "--size", "1")
        ready = full(c, 1)
        sub = src.subagent()
        ready = full(c, 1)
        sub_kid = c.fork(sub.id, 1)["children"][0]
        assert sub_kid["sandbox"] not in ready and members(c) == ready
        assert c.get(sub_kid["sandbox"])["spec"]["parent"] == src.id


def test_a_sandbox_with_placeholder_secrets_is_made_cold_with_a_ca_of_its_own(pooled: Callable[..., Daemon]) -> None:
    d = pooled("1")
    with d.client() as c:
        ready = full(c, 1)
        sbx = Sandbox.create(
            allow_hosts=["api.example.com"],
            secrets={"TOKEN": "a-value-never-inside"},
            secret_hosts={"TOKEN": ["api.example.com"]},
            settings=d.settings,
        )
        assert sbx.id not in ready and members(c) == ready  # the member stays a member
        created = [e for e in c.events(sbx.id) if e["type"] == "sandbox_created"]
        assert not created[0]["data"].get("pool")
        script = 'grep -c "BEGIN CERTIFICATE" /.hutch/sandbox-ca.crt; printf %s "$TOKEN" | cut -c1-19'
        r = sbx.exec(["sh", "-c", script], redact=False)
        assert int(r.stdout.split()[0]) >= 1 and r.stdout.split()[1] == "hutch-secret-TOKEN-"
        sbx.destroy()


def test_kill9_with_the_pool_full_leaves_nothing_after_the_restart(pooled: Callable[..., Daemon]) -> None:
    d = pooled("3")
    with d.client() as c:
        ids = full(c, 3)
    d.kill9()
    assert all(f"directory {d.home / 'sandboxes' / i}" in leftovers(d.home, ids) for i in ids)  # they outlived it
    d = pooled("3")
    with d.client() as c:
        assert sorted(full(c, 3)) == sorted(ids)  # the same members, adopted again
        sbx = Sandbox.create(settings=d.settings)
        assert sbx.id in ids and sbx.exec("echo adopted").stdout == "adopted\n"
        sbx.destroy()
        ids = full(c, 3)
    d.kill9()
    d = pooled("0")  # restarted without a pool: the members left behind are destroyed
    with d.client() as c:
        until(lambda: members(c) == [], "the members to be destroyed")
    assert leftovers(d.home, ids) == []


def test_drain_and_a_daemon_stop_destroy_the_members(pooled: Callable[..., Daemon]) -> None:
    d = pooled("2")
    with d.client() as c:
        ids = full(c, 2)
    out = hutch(d, "pool", "drain", "--json")
    assert out.returncode == 0, out.stderr
    drained = json.loads(out.stdout)
    assert drained["drained"] == {"host": 2} and drained["members"] == 0 and drained["pools"][0]["size"] == 0
    assert leftovers(d.home, ids) == []
    out = hutch(d, "pool", "set", "--size", "2")
    assert out.returncode == 0, out.stderr
    assert "host" in out.stdout and "members" in out.stdout
    with d.client() as c:
        ids = full(c, 2)
    d.stop()  # SIGTERM: a clean stop
    assert leftovers(d.home, ids) == []


def test_a_member_killed_while_idle_is_replaced_never_handed_out(pooled: Callable[..., Daemon]) -> None:
    d = pooled("2")
    with d.client() as c:
        ids = full(c, 2)
        (victim,) = [m for m in Store(d.settings.db_path).pool.members() if m.id == ids[0]]
        os.kill(int(victim.data["init_pid"]), signal.SIGKILL)
        until(lambda: victim.id not in members(c), "the dead member to go")
        now = full(c, 2)
        assert victim.id not in now
        assert Sandbox.create(settings=d.settings).id in set(now) - {victim.id}
        destroyed = [e for e in c.events() if e["type"] == "pool_member_destroyed"]
        assert destroyed[0]["data"]["member"] == victim.id and "died while idle" in destroyed[0]["data"]["why"]
    assert leftovers(d.home, [victim.id]) == []


def test_parallel_creates_never_share_a_member(pooled: Callable[..., Daemon]) -> None:
    d = pooled("4")
    with d.client() as c:
        ids = set(full(c, 4))
    got: list[str] = []
    errors: list[BaseException] = []

    def make() -> None:
        try:
            got.append(Sandbox.create(settings=d.settings).id)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=make) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE)
    assert errors == [] and len(got) == 8 and len(set(got)) == 8
    assert len(ids & set(got)) == 4  # each member went to exactly one create; the others were cold


def test_bad_pool_input_is_refused_with_a_hint(pooled: Callable[..., Daemon]) -> None:
    d = pooled("0")
    too_big = hutch(d, "pool", "set", "--size", "1001")
    assert too_big.returncode == 2 and "1001" in too_big.stderr
    image = hutch(d, "pool", "set", "alpine:3", "--size", "1", "--json")  # not in the image store: refused at once
    assert image.returncode == 1
    error = json.loads(image.stdout)["error"]
    assert error["kind"] == "not_found" and "alpine:3" in error["message"] and "hutch image pull" in error["hint"]
    pools = json.loads(hutch(d, "pool", "status", "--json").stdout)["pools"]
    assert [p["shape"] for p in pools] == ["host"]  # nothing was kept of the refused image's pool
    both = hutch(d, "pool", "drain", "alpine:3", "--all")
    assert both.returncode == 2


@pytest.fixture(scope="module")
def busybox() -> Iterator[Path]:
    base = shared_dir("hutch-pool-images-")
    try:
        yield busybox_root(base / "busybox")
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_an_image_pool_hands_out_sandboxes_of_that_image(hutch_home: Path, busybox: Path) -> None:
    """``hutch pool set IMAGE``: members of that image's shape, handed out to creates of it,
    with the image's own environment and working directory under the request's. (The daemon
    of hutch.testing.images resolves images from a table: the local provider's image source.)"""
    env = ["PATH=/usr/sbin:/usr/bin:/sbin:/bin", "FROM_IMAGE=yes"]
    d = image_daemon(hutch_home, {"busybox": {"rootfs": str(busybox), "env": env, "workdir": "/etc"}})
    try:
        out = hutch(d, "pool", "set", "busybox", "--size", "1", "--json")
        assert out.returncode == 0, out.stderr
        shapes = {p["shape"]: p for p in json.loads(out.stdout)["pools"]}
        assert shapes["busybox"]["size"] == 1 and shapes["busybox"]["image"] == "busybox"

        def ready() -> list[str]:
            return [m.id for m in Store(d.settings.db_path).pool.members() if m.image == "busybox" and m.state == "ready"]

        with d.client() as c:
            (member,) = until(ready, "a member of the image")
            assert Sandbox.create(settings=d.settings).id != member  # no image: the host shape, with no pool here
            sbx = Sandbox.create(image="busybox", env={"MINE": "1"}, settings=d.settings)
            assert sbx.id == member
            r = sbx.exec("echo $FROM_IMAGE $MINE; pwd")
            assert r.stdout == "yes 1\n/etc\n", r.stdout + r.stderr
            assert c.get(sbx.id)["spec"]["workdir"] == "/etc"
            (refilled,) = until(ready, "the image's pool refilled")
            # its fork is made cold (the writable root goes in before the child starts), with the root's change
            assert sbx.exec("echo changed > /etc/marker").exit_code == 0
            (child,) = c.fork(sbx.id)["children"]
            assert child["sandbox"] and child["sandbox"] != refilled and ready() == [refilled]
            kid = Sandbox.connect(child["sandbox"], settings=d.settings)
            assert kid.exec("cat /etc/marker; echo $FROM_IMAGE").stdout == "changed\nyes\n"
    finally:
        try:
            destroy_all(hutch_home)
        finally:
            d.stop()
            sweep(hutch_home)
    assert leftovers(hutch_home, [member, refilled]) == []
