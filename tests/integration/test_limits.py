"""Limits are enforced by the kernel and reported: memory (OOM), pids, timeouts."""

from __future__ import annotations

import os
from pathlib import Path

from tests.conftest import Daemon

from hutch import Sandbox


def _cgroup_dirs(sandbox_id: str) -> list[Path]:
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        parts = line.split()
        if "cgroup" not in line.split(" - ")[1].split()[0]:
            continue
        mount = Path(parts[4])
        for hit in mount.rglob(sandbox_id):
            found.append(hit)
    return found


def test_oom_is_reported(daemon: Daemon) -> None:
    sbx = Sandbox.create(memory="64M", settings=daemon.settings)
    r = sbx.exec(["python3", "-c", "x = bytearray(200 * 1024 * 1024); print('survived', len(x))"])
    assert "survived" not in r.stdout
    if sbx.info["enforcement"]["memory"].startswith("cgroup"):
        assert r.status == "oom_killed", r
        assert r.exit_code == 137
    else:  # rlimit fallback: the allocation fails instead
        assert r.exit_code != 0
    # the sandbox survives its workload's OOM
    assert sbx.exec("echo ok").stdout == "ok\n"
    events = sbx.client.events(sbx.id)
    assert any(e["type"] == "limit_hit" for e in events) == (r.status == "oom_killed")


def test_fork_bomb_is_contained(daemon: Daemon) -> None:
    sbx = Sandbox.create(pids=32, settings=daemon.settings)
    before = len([p for p in os.listdir("/proc") if p.isdigit()])
    r = sbx.exec(["sh", "-c", "bomb() { bomb | bomb & }; bomb & exec sleep 30"], timeout=4)
    assert r.status == "timed_out"
    during = len([p for p in os.listdir("/proc") if p.isdigit()])
    assert during < before + 64
    if sbx.info["enforcement"]["pids"].startswith("cgroup"):
        for d in _cgroup_dirs(sbx.id):
            if (d / "pids.max").exists():
                assert int((d / "pids.max").read_text()) == 32
                assert int((d / "pids.current").read_text()) <= 32
    # the host is fine and, once the tree is gone, the sandbox works again
    ok = sbx.exec("echo alive", timeout=20)
    assert ok.stdout == "alive\n"


def test_timeout_kills_the_whole_tree_including_setsid(daemon: Daemon) -> None:
    sbx = Sandbox.create(settings=daemon.settings)
    script = "setsid sh -c 'sleep 301' & (sleep 302 &) ; sleep 303"
    r = sbx.exec(["sh", "-c", script], timeout=1)
    assert r.status == "timed_out"
    assert r.exit_code == 124
    left = sbx.exec(["ps", "-eo", "cmd"]).stdout
    for n in ("301", "302", "303"):
        assert f"sleep {n}" not in left, left


def test_limits_are_visible(daemon: Daemon) -> None:
    sbx = Sandbox.create(memory="256M", pids=100, cpus=0.5, settings=daemon.settings)
    info = sbx.refresh()
    assert info["spec"]["limits"] == {"memory": 256 << 20, "pids": 100, "cpus": 0.5, "disk": None}  # no --disk: no cap
    assert set(info["enforcement"]) >= {"memory", "pids"}
    default = Sandbox.create(settings=daemon.settings).refresh()
    assert default["spec"]["limits"]["memory"] == 1 << 30
    assert default["spec"]["limits"]["pids"] == 512
    if os.geteuid() == 0:
        dirs = _cgroup_dirs(sbx.id)
        assert dirs, "one cgroup per sandbox"
        values = {
            f.name: f.read_text().strip()
            for d in dirs
            for f in d.iterdir()
            if f.name in ("memory.limit_in_bytes", "memory.max", "pids.max", "cpu.cfs_quota_us", "cpu.max")
        }
        assert values.get("pids.max") == "100"
        assert values.get("memory.limit_in_bytes", values.get("memory.max")) == str(256 << 20)
