"""Host uids are allocated machine-wide: sandboxes of two root daemons (two HUTCH_HOMEs)
never run as the same host uid, and `hutch doctor` checks it."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.conftest import Daemon, destroy_all, sweep

from hutch.providers.local import cgroups

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="host uids are allocated only when hutch runs as root")

MakeDaemon = Callable[..., Daemon]


@pytest.fixture
def base() -> int:
    # a pool of its own, so concurrent test runs on this machine do not see each other
    return 2_000_000 + random.randrange(2000) * 10_000


@pytest.fixture
def make_daemon() -> Iterator[MakeDaemon]:
    made: list[Daemon] = []

    def make(**env: str) -> Daemon:
        home = Path(tempfile.mkdtemp(prefix="hutch-uid-"))
        d = Daemon(home, **env).start()
        made.append(d)
        return d

    yield make
    for d in made:
        try:
            destroy_all(d.home)
        finally:
            d.stop()
            sweep(d.home)
            shutil.rmtree(d.home, ignore_errors=True)


def host_uids(sandbox_id: str) -> set[int]:
    """The real uids, as the host sees them, of every process in the sandbox's cgroups."""
    layout = cgroups.detect()
    pids: set[int] = set()
    for parent in [*layout.v1.values(), *([layout.v2 / cgroups.GROUP] if layout.v2 else [])]:
        procs = parent / sandbox_id / "cgroup.procs"
        if procs.exists():
            pids |= {int(p) for p in procs.read_text().split()}
    assert pids, f"no process found for {sandbox_id}"
    uids = set()
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Uid:"):
                uids.add(int(line.split()[1]))
    return uids


def sandbox(d: Daemon) -> str:
    with d.client() as c:
        sid = str(c.create({"provider": "local"})["id"])
        c.exec(sid, {"command": ["sleep", "300"], "background": True})  # a workload process too
    return sid


def doctor(d: Daemon) -> dict[str, str]:
    r = subprocess.run(
        [sys.executable, "-m", "hutch", "doctor", "--json"], env=d.env, capture_output=True, text=True, timeout=120
    )
    checks = {c["name"]: c for c in json.loads(r.stdout)["checks"]}
    return dict(checks["identity"])


def test_two_root_daemons_never_share_a_host_uid(make_daemon: MakeDaemon, base: int, tmp_path: Path) -> None:
    env = {"HUTCH_UID_REGISTRY": str(tmp_path / "uids"), "HUTCH_UID_BASE": str(base)}
    a, b = make_daemon(**env), make_daemon(**env)
    sa1, sb1, sa2, sb2 = sandbox(a), sandbox(b), sandbox(a), sandbox(b)
    seen = {sid: host_uids(sid) for sid in (sa1, sb1, sa2, sb2)}
    for sid, uids in seen.items():
        assert len(uids) == 1, (sid, uids)  # bwrap, init, agent and workload: one unprivileged uid
        assert base < next(iter(uids)) <= base + 4
    assert len(set().union(*seen.values())) == 4, seen  # four sandboxes, four host uids

    entries = json.loads((tmp_path / "uids" / "registry.json").read_text())["entries"]
    by_sandbox = {e["sandbox"]: e for e in entries}
    assert {by_sandbox[s]["home"] for s in (sa1, sa2)} == {str(a.home)}
    assert {by_sandbox[s]["home"] for s in (sb1, sb2)} == {str(b.home)}
    assert all(by_sandbox[s]["start"] in seen[s] for s in seen)

    check = doctor(a)
    assert check["ok"] is True, check
    assert "4 held, 2 by this state directory, 2 by 1 other(s)" in check["detail"]

    # a killed daemon's sandboxes keep their uids: nobody else gets them meanwhile
    a.kill9()
    sb3 = sandbox(b)
    assert host_uids(sb3).isdisjoint(seen[sa1] | seen[sa2])
    a.start()  # re-adopts them and records them under its new pid
    with a.client() as c:
        assert {r["id"] for r in c.list()} == {sa1, sa2}
    assert host_uids(sa1) == seen[sa1]
    entries = json.loads((tmp_path / "uids" / "registry.json").read_text())["entries"]
    assert {e["pid"] for e in entries if e["home"] == str(a.home)} == {a.proc.pid if a.proc else 0}

    # destroyed sandboxes give their uids back
    with a.client() as c:
        c.destroy(sa1)
    entries = json.loads((tmp_path / "uids" / "registry.json").read_text())["entries"]
    assert sa1 not in {e["sandbox"] for e in entries}
    sa3 = sandbox(a)
    live = seen[sa2] | seen[sb1] | seen[sb2] | host_uids(sb3)
    assert host_uids(sa3).isdisjoint(live)


def test_doctor_fails_when_a_uid_of_the_pool_runs_outside_the_registry(
    make_daemon: MakeDaemon, base: int, tmp_path: Path
) -> None:
    # two daemons pointed at different registries (as two versions of hutch would be)
    a = make_daemon(HUTCH_UID_REGISTRY=str(tmp_path / "one"), HUTCH_UID_BASE=str(base))
    b = make_daemon(HUTCH_UID_REGISTRY=str(tmp_path / "two"), HUTCH_UID_BASE=str(base))
    sa = sandbox(a)
    sb = sandbox(b)
    assert host_uids(sa).isdisjoint(host_uids(sb))  # b still skips the uid it sees in use
    check = doctor(b)
    assert check["ok"] is False, check
    assert f"host uid {next(iter(host_uids(sa)))} runs process" in check["detail"]
    assert check["fix"]
