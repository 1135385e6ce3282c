"""The machine-wide registry of sandbox host uids (providers/local/uids.py), on a temp dir.

Two daemons (two state directories) must never hand out the same uid; entries of dead
daemons whose sandboxes are gone are reclaimed; ranges are first-fit and never overlap.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import json
import multiprocessing
import os
import subprocess
import time
from collections.abc import Callable, Iterator
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


def _wait_for(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 120
    while not check():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.01)


@contextlib.contextmanager
def _registry_locked(tmp_path: Path) -> Iterator[None]:
    """The registry's lock held from outside, as another daemon's batch would hold it."""
    fd = os.open(tmp_path / "uids" / "registry.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@pytest.fixture
def squatter() -> Iterator[int]:
    """A process (of another registry, say) running as a uid of the pool that no entry holds."""
    if os.geteuid() != 0:
        pytest.skip("a process running as a uid of the pool needs root to start")
    uid = BASE + 3
    proc = subprocess.Popen(["setpriv", f"--reuid={uid}", "--clear-groups", "sleep", "600"])
    try:
        _wait_for(lambda: os.stat(f"/proc/{proc.pid}").st_uid == uid, "the squatter's setuid")
        yield uid
    finally:
        proc.kill()
        proc.wait()


def test_concurrent_creates_among_many_stale_entries_share_one_walk(tmp_path: Path, squatter: int) -> None:
    dead = _dead_pid()
    planted = []
    for i in range(1000):  # 400 held by another daemon's sandboxes, 600 left by dead daemons
        held = i % 5 < 2
        d = sdir(tmp_path, "other", f"sbx_{i}") if held else tmp_path / "gone" / f"sbx_{i}"
        planted.append({"start": BASE + 1 + i, "count": 1, "home": str(tmp_path / "other"), "sandbox": f"sbx_{i}",
                        "dir": str(d), "pid": dead, "pid_start": 7, "at": 0.0})  # fmt: skip
    (tmp_path / "uids").mkdir()
    (tmp_path / "uids" / "registry.json").write_text(json.dumps({"version": 1, "entries": planted}))
    held_uids = {int(str(e["start"])) for e in planted if Path(str(e["dir"])).is_dir()}
    assert squatter not in held_uids  # the squatter runs as a stale entry's uid

    reg = registry(tmp_path, "a")
    with concurrent.futures.ThreadPoolExecutor(60) as pool:
        with _registry_locked(tmp_path):  # every create queues behind it
            futures = [pool.submit(reg.allocate, f"sbx_{k}", sdir(tmp_path, "a", f"sbx_{k}")) for k in range(60)]
            _wait_for(lambda: reg.queued() == 60, "60 creates queued")
        uids = [f.result() for f in futures]
    assert len(set(uids)) == 60
    assert not set(uids) & held_uids and squatter not in uids  # nothing held, nothing a process runs as
    free = [u for u in range(BASE + 1, BASE + 2000) if u not in held_uids and u != squatter]
    assert sorted(uids) == free[:60]  # first fit, into the stale entries' reclaimed uids
    assert (reg.walks, reg.batches) == (1, 1)  # one walk of /proc and one pass for all 60
    entries = json.loads((tmp_path / "uids" / "registry.json").read_text())["entries"]
    assert len(entries) == 400 + 60  # the 600 stale entries are gone

    # destroys and creates at once: one batch, and a uid freed in it is not handed out in it
    with concurrent.futures.ThreadPoolExecutor(40) as pool:
        with _registry_locked(tmp_path):
            frees = [pool.submit(reg.release, f"sbx_{k}") for k in range(20)]
            _wait_for(lambda: reg.queued() == 20, "20 destroys queued")
            more = [pool.submit(reg.allocate, f"new_{k}", sdir(tmp_path, "a", f"new_{k}")) for k in range(20)]
            _wait_for(lambda: reg.queued() == 40, "20 creates queued")
        for f in frees:
            f.result()
        again = [f.result() for f in more]
    assert (reg.walks, reg.batches) == (2, 2)
    assert not set(again) & (set(uids) | held_uids | {squatter})
    assert len(set(again)) == 20

    # one at a time, each create is its own batch, with its own walk
    reg.allocate("solo", sdir(tmp_path, "a", "solo"))
    assert (reg.walks, reg.batches) == (3, 3)
