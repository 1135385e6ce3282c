"""Fork and its helper processes on real sandboxes: unreadable files, stuck copies, races.

A copy is made to hang on purpose by freezing the cgroup its helpers join. Helper
processes are found by their cgroup, never by name.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tests.conftest import Daemon

from hutch import HutchError, Sandbox
from hutch.providers.local import cgroups
from hutch.providers.local.helpers import Helpers

WAIT = 120.0


def cli(daemon: Daemon, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hutch", *args], env=daemon.env, capture_output=True, text=True, timeout=timeout)


def start_cli(daemon: Daemon, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "hutch", *args],
        env=daemon.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def helpers_of(daemon: Daemon) -> Helpers:
    return Helpers(daemon.home, cgroups.detect, lambda uid, procs: lambda: None)


def helper_pids(daemon: Daemon) -> set[int]:
    return {pid for group in helpers_of(daemon).groups() for pid in group.pids()}


def wait_for(what: str, cond: Callable[[], bool], timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


@contextlib.contextmanager
def stuck_copies(daemon: Daemon, sbx: Sandbox, forks: int) -> Iterator[list[subprocess.Popen[str]]]:
    """``forks`` ``hutch fork`` commands whose copies hang: the cgroups their helpers will
    join (named ``helper-<home>-<daemon pid>-<n>``, n counting from 1) are made and frozen
    first, so each helper stops as it joins its own, for as long as the test wants. The
    source gets a file: an empty workspace is copied without helpers."""
    assert sbx.exec("echo x > f").exit_code == 0
    pid = int((daemon.home / "hutchd.pid").read_text())
    tag, layout = helpers_of(daemon).tag, helpers_of(daemon).layout()
    assert "freezer" in layout.v1 or layout.v2 is not None, "freezing a helper needs a cgroup freezer"
    for n in range(1, forks + 1):
        group, _ = cgroups.create(layout, f"{tag}-{pid}-{n}", 1 << 30, 256, None)
        assert group.set_frozen(True)
    procs = [start_cli(daemon, "fork", sbx.id, "--json") for _ in range(forks)]
    try:
        wait_for(f"{forks} stuck copies", lambda: sum(1 for g in helpers_of(daemon).groups() if g.pids()) >= forks)
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(30)


def test_fork_copies_unreadable_files_and_reports_what_it_cannot(daemon: Daemon) -> None:
    # Regression: 1500 unreadable files made tar write >64 KiB of warnings to a pipe read
    # only after the copy ended; fork hung for 600 s, then left bwrap/tar processes behind.
    sbx = Sandbox.create(name="dl", settings=daemon.settings)
    made = sbx.exec(
        "for i in $(seq 1500); do echo x > file_with_a_longish_name_$i; chmod 000 file_with_a_longish_name_$i; done;"
        " mkdir locked && echo inside > locked/f && chmod 000 locked;"
        " python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('sock')\""
    )
    assert made.exit_code == 0, made.stderr
    out = cli(daemon, "fork", "dl", "--json", timeout=WAIT)
    assert out.returncode == 0, out.stderr + out.stdout
    child = json.loads(out.stdout)["children"][0]
    # every file is copied as it is, unreadable or not; the socket (tar cannot carry one) is reported
    assert child["sandbox"] and child["method"] == "tar"
    assert child["skipped"] == 1 and "socket ignored" in child["notes"][0], child
    kid = Sandbox.connect(child["sandbox"], settings=daemon.settings)
    modes = kid.exec("stat -c %a file_with_a_longish_name_7 locked; ls | grep -c ^file_with")
    assert modes.stdout.split() == ["0", "0", "1500"], modes.stdout + modes.stderr
    content = kid.exec("chmod -R u+rwX . && cat file_with_a_longish_name_1500 locked/f")
    assert content.stdout == "x\ninside\n", content.stderr
    assert "skipped 1" in cli(daemon, "fork", "dl").stderr  # a person is told too
    events = [e for e in daemon.client().events(kid.id, types=["sandbox_forked"]) if e["type"] == "sandbox_forked"]
    assert events and events[0]["data"]["skipped"] == 1
    assert helper_pids(daemon) == set() and helpers_of(daemon).groups() == []


def test_stuck_copies_do_not_block_create_exec_or_list(daemon: Daemon) -> None:
    # Regression: ~6 hung forks filled the daemon's default thread pool and every later create hung.
    src = Sandbox.create(settings=daemon.settings)
    with stuck_copies(daemon, src, 8) as forks:
        made = cli(daemon, "create", "--json", timeout=WAIT)
        assert made.returncode == 0, made.stderr
        assert all(p.poll() is None for p in forks), "the forks were meant to be stuck meanwhile"
        other = Sandbox.connect(json.loads(made.stdout)["id"], settings=daemon.settings)
        assert other.exec("echo ok").stdout == "ok\n"
        assert {s.id for s in Sandbox.list(settings=daemon.settings)} >= {src.id, other.id}
        pids = helper_pids(daemon)
        assert pids
        src.destroy()  # stops the copies from it: each fork fails cleanly
        results = [p.communicate(timeout=WAIT) for p in forks]
    for p, (stdout, stderr) in zip(forks, results, strict=True):
        assert p.returncode == 1, stdout + stderr
        assert json.loads(stdout)["error"]["kind"] == "conflict", stdout
    assert {s.id for s in Sandbox.list(settings=daemon.settings)} == {other.id}  # no child left
    assert not any(alive(pid) for pid in pids) and helpers_of(daemon).groups() == []


def test_destroy_all_leaves_no_helper_alive(daemon: Daemon) -> None:
    src = Sandbox.create(settings=daemon.settings)
    with stuck_copies(daemon, src, 2) as forks:
        pids = helper_pids(daemon)
        assert pids and all(alive(pid) for pid in pids)
        gone = cli(daemon, "destroy", "--all", "--json", timeout=WAIT)
        assert gone.returncode == 0, gone.stderr
        for p in forks:
            p.communicate(timeout=WAIT)
            assert p.returncode == 1
    assert not any(alive(pid) for pid in pids)
    assert helpers_of(daemon).groups() == []
    assert Sandbox.list(settings=daemon.settings) == []


def test_daemon_stop_leaves_no_helper_alive(daemon: Daemon) -> None:
    src = Sandbox.create(settings=daemon.settings)
    with stuck_copies(daemon, src, 2) as forks:
        pids = helper_pids(daemon)
        assert pids
        stopped = cli(daemon, "daemon", "stop", "--json", timeout=WAIT)
        assert stopped.returncode == 0, stopped.stderr
        for p in forks:
            p.communicate(timeout=WAIT)
            assert p.returncode != 0
    assert not any(alive(pid) for pid in pids)
    assert helpers_of(daemon).groups() == []
    daemon.start()  # the fork's half-made children were removed before the daemon ended
    assert [s.id for s in Sandbox.list(settings=daemon.settings)] == [src.id]


# Destroys spread evenly from before the fork to well after it (at 0, 1/7, ... 7/7 of 1.5 spans: the
# span is measured once, and a loaded machine's forks vary): evenly, not at random, so that a few
# rounds cover the fork's whole course. Enough files that the copy is most of that course (each file
# costs its creation in the fill and in the copy: ~2 ms on a slow disk).
ROUNDS = 8
FILES = 300


def test_fork_racing_a_destroy_of_its_source_completes_or_fails_cleanly(daemon: Daemon) -> None:
    outcomes: dict[str, int] = {}
    fill = f"mkdir d && i=1 && while [ $i -le {FILES} ]; do echo $i > d/f$i; i=$((i + 1)); done"
    calibrate = Sandbox.create(settings=daemon.settings)
    calibrate.exec(fill)
    started = time.monotonic()
    for kid in calibrate.fork(1):
        assert isinstance(kid, Sandbox)
        kid.destroy()
    span = time.monotonic() - started  # a destroy lands anywhere from before the fork to after it
    calibrate.destroy()
    for round_ in range(ROUNDS):
        src = Sandbox.create(settings=daemon.settings)
        src.exec(fill)
        result: dict[str, Any] = {}

        def fork(src: Sandbox = src, result: dict[str, Any] = result) -> None:
            try:
                result["ok"] = src.client.fork(src.id, 1, None)
            except HutchError as exc:
                result["error"] = exc

        t = threading.Thread(target=fork)
        t.start()
        time.sleep(span * 1.5 * round_ / (ROUNDS - 1))
        src.destroy()
        t.join(WAIT)
        assert not t.is_alive(), f"round {round_}: the fork hung"
        live = {s.id: s for s in Sandbox.list(settings=daemon.settings)}
        if "error" in result:
            assert result["error"].kind in ("conflict", "not_found"), result["error"]
            assert live == {}, f"round {round_}: a child was left: {live}"
            outcomes[result["error"].kind] = outcomes.get(result["error"].kind, 0) + 1
        else:
            child = result["ok"]["children"][0]
            if child["sandbox"] is None:  # the child alone failed (it never became one)
                assert live == {}, child
                outcomes["child failed"] = outcomes.get("child failed", 0) + 1
                continue
            assert set(live) == {child["sandbox"]}, f"round {round_}: {live}"
            kid = live[child["sandbox"]]
            assert kid.exec(f"cat d/f1 d/f{FILES}").stdout == f"1\n{FILES}\n"  # complete, not a partial copy
            kid.destroy()
            outcomes["completed"] = outcomes.get("completed", 0) + 1
        assert helpers_of(daemon).groups() == []
    print("fork vs destroy outcomes:", outcomes)
    assert sum(outcomes.values()) == ROUNDS
