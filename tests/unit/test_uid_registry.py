"""The machine-wide registry of sandbox host uids (providers/local/uids.py), on a temp dir.

Two daemons (two state directories) must never hand out the same uid; entries of dead
daemons whose sandboxes are gone are reclaimed; ranges are first-fit and never overlap.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
from pathlib import Path

import pytest

from hutch.errors import UnavailableError
from hutch.providers.local.uids import UidRegistry, identity_check

BASE = 3_100_000  # far from the uids real sandboxes of this machine run as


def registry(tmp_path: Path, home: str, base: int = BASE) -> UidRegistry:
    return UidRegistry(tmp_path / "uids", tmp_path / home, base)


def sdir(tmp_path: Path, home: str, sandbox: str) -> Path:
    d = tmp_path / home / "sandboxes" / sandbox
    d.mkdir(parents=True, exist_ok=True)
    return d


def test_two_state_dirs_get_different_uids(tmp_path: Path) -> None:
    a, b = registry(tmp_path, "a"), registry(tmp_path, "b")
    ua = a.allocate("sbx_1", sdir(tmp_path, "a", "sbx_1"))
    ub = b.allocate("sbx_1", sdir(tmp_path, "b", "sbx_1"))  # the same sandbox id in another home
    assert ua == BASE + 1
    assert ub == BASE + 2
    raw = json.loads((tmp_path / "uids" / "registry.json").read_text())
    assert {(e["home"], e["start"], e["count"], e["pid"]) for e in raw["entries"]} == {
        (str(tmp_path / "a"), ua, 1, os.getpid()),
        (str(tmp_path / "b"), ub, 1, os.getpid()),
    }
    assert a.problems() == []


def test_allocate_is_idempotent_and_release_frees(tmp_path: Path) -> None:
    a = registry(tmp_path, "a")
    first = a.allocate("sbx_1", sdir(tmp_path, "a", "sbx_1"))
    assert a.allocate("sbx_1", sdir(tmp_path, "a", "sbx_1")) == first
    second = a.allocate("sbx_2", sdir(tmp_path, "a", "sbx_2"))
    a.release("sbx_1")
    assert a.allocate("sbx_3", sdir(tmp_path, "a", "sbx_3")) == first  # the lowest free uid again
    assert second == first + 1


def test_ranges_are_first_fit_and_never_overlap(tmp_path: Path) -> None:
    a, b = registry(tmp_path, "a"), registry(tmp_path, "b")
    one = a.allocate("sbx_1", sdir(tmp_path, "a", "sbx_1"))
    image = b.allocate("sbx_img", sdir(tmp_path, "b", "sbx_img"), count=65536)
    two = a.allocate("sbx_2", sdir(tmp_path, "a", "sbx_2"))
    assert (one, image, two) == (BASE + 1, BASE + 2, BASE + 2 + 65536)
    a.release("sbx_1")
    assert b.allocate("sbx_img2", sdir(tmp_path, "b", "sbx_img2"), count=2) == BASE + 2 + 65537  # no room at 1
    assert a.allocate("sbx_3", sdir(tmp_path, "a", "sbx_3")) == BASE + 1


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _plant(tmp_path: Path, **entry: object) -> None:
    base = {"start": BASE + 1, "count": 1, "home": "/gone", "sandbox": "sbx_old", "pid": 1, "pid_start": None, "at": 0.0}
    (tmp_path / "uids").mkdir(exist_ok=True)
    (tmp_path / "uids" / "registry.json").write_text(json.dumps({"version": 1, "entries": [base | entry]}))


def test_entries_of_a_dead_daemon_whose_sandbox_is_gone_are_reclaimed(tmp_path: Path) -> None:
    _plant(tmp_path, dir=str(tmp_path / "gone" / "sandboxes" / "sbx_old"), pid=_dead_pid(), pid_start=12345)
    assert registry(tmp_path, "a").allocate("sbx_1", sdir(tmp_path, "a", "sbx_1")) == BASE + 1
    raw = json.loads((tmp_path / "uids" / "registry.json").read_text())
    assert [e["sandbox"] for e in raw["entries"]] == ["sbx_1"]


def test_a_sandbox_that_outlives_its_daemon_keeps_its_uid(tmp_path: Path) -> None:
    # the daemon was killed, its sandbox's directory (and maybe its processes) remain
    _plant(tmp_path, home=str(tmp_path / "old"), dir=str(sdir(tmp_path, "old", "sbx_old")), pid=_dead_pid(), pid_start=1)
    assert registry(tmp_path, "a").allocate("sbx_1", sdir(tmp_path, "a", "sbx_1")) == BASE + 2


def test_overlaps_and_adopting_a_taken_uid_are_reported(tmp_path: Path) -> None:
    a, b = registry(tmp_path, "a"), registry(tmp_path, "b")
    uid = a.allocate("sbx_1", sdir(tmp_path, "a", "sbx_1"), count=10)
    problem = b.adopt("sbx_9", sdir(tmp_path, "b", "sbx_9"), uid + 5)  # an old sandbox that ran as uid+5
    assert problem is not None and "sbx_1" in problem and str(tmp_path / "a") in problem
    problems = a.problems()
    assert len(problems) == 1 and "held by both" in problems[0]
    check = identity_check(a)
    assert not check.ok and "held by both" in check.detail and check.fix
    assert b.adopt("sbx_9", sdir(tmp_path, "b", "sbx_9"), uid + 20) is None  # moved clear: recorded once
    assert a.problems() == []
    assert identity_check(a).ok
    assert "2 held, 1 by this state directory, 1 by 1 other(s)" in identity_check(a).detail


def test_a_corrupt_registry_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "uids").mkdir()
    (tmp_path / "uids" / "registry.json").write_text("{not json")
    with pytest.raises(UnavailableError, match="unreadable") as info:
        registry(tmp_path, "a").allocate("sbx_1", sdir(tmp_path, "a", "sbx_1"))
    assert info.value.hint
    assert not identity_check(registry(tmp_path, "a")).ok


def _allocate_many(args: tuple[str, str, int]) -> list[int]:
    directory, home, n = args
    reg = UidRegistry(Path(directory), Path(home), BASE)
    out = []
    for i in range(n):
        d = Path(home) / "sandboxes" / f"sbx_{i}"
        d.mkdir(parents=True, exist_ok=True)
        out.append(reg.allocate(f"sbx_{i}", d))
    return out


def test_concurrent_daemons_never_share_a_uid(tmp_path: Path) -> None:
    jobs = [(str(tmp_path / "uids"), str(tmp_path / f"home{k}"), 15) for k in range(4)]
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        results = pool.map(_allocate_many, jobs)
    uids = [u for r in results for u in r]
    assert len(uids) == 60 and len(set(uids)) == 60
    assert sorted(uids) == list(range(BASE + 1, BASE + 61))
    entries = json.loads((tmp_path / "uids" / "registry.json").read_text())["entries"]
    assert len(entries) == 60  # the dead workers' entries are held by their sandbox directories
