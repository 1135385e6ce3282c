"""A sandbox that dies on its own (its init killed from outside, the OOM killer) is marked
``lost`` at once, with an event saying what is known, its runs ``lost`` and its cgroups
gone: nobody has to try an exec first. Also for a sandbox adopted after a daemon restart."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from tests.conftest import Daemon

from hutch.client import Client
from hutch.store import Store

DEADLINE = 60.0  # generous: the machine may be loaded


def _record(d: Daemon, sandbox_id: str) -> dict[str, Any]:
    """The local provider's record of the sandbox (its init's host pid, its cgroups)."""
    return Store(d.settings.db_path).sandboxes.get(sandbox_id).data


def _until_lost(c: Client, sandbox_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + DEADLINE
    while True:
        rec = c.get(sandbox_id)
        if rec["state"] != "running" or time.monotonic() > deadline:
            return rec
        time.sleep(0.1)


def _lost_event(c: Client, sandbox_id: str) -> dict[str, Any]:
    (event,) = c.events(sandbox_id, types=["sandbox_lost"])
    return dict(event["data"])


def _kill_init(data: dict[str, Any]) -> None:
    os.kill(int(data["init_pid"]), signal.SIGKILL)


def test_sandbox_whose_init_is_killed_is_lost_at_once(daemon: Daemon) -> None:
    with daemon.client() as c:
        sbx = c.create({})
        run = c.exec(sbx["id"], {"command": ["sleep", "600"], "background": True})
        data = _record(daemon, sbx["id"])
        assert all(Path(d).is_dir() for d in data["cgroups"])
        _kill_init(data)
        rec = _until_lost(c, sbx["id"])
        assert rec["state"] == "lost", rec
        assert "signal 9" in rec["error"] and "SIGKILL" in rec["error"], rec["error"]
        cause = _lost_event(c, sbx["id"])
        assert (cause["reason"], cause["signal"]) == ("signal", 9), cause
        assert "SIGKILL" in cause["message"]
        finished = c.run(run["id"])
        assert finished["status"] == "lost" and "SIGKILL" in finished["error"], finished
        assert [r["status"] for r in c.runs(sbx["id"])] == ["lost"]
        assert not any(Path(d).exists() for d in data["cgroups"])  # released at once, not at destroy
        assert [s["state"] for s in c.list() if s["id"] == sbx["id"]] == ["lost"]
        assert c.destroy(sbx["id"])["destroyed"]
        assert c.get(sbx["id"])["state"] == "destroyed"


def test_destroy_is_not_a_death(daemon: Daemon) -> None:
    with daemon.client() as c:
        sbx = c.create({})
        c.destroy(sbx["id"])
        time.sleep(0.5)  # give a wrong notice time to arrive (no timing is asserted)
        assert c.get(sbx["id"])["state"] == "destroyed"
        assert c.events(sbx["id"], types=["sandbox_lost"]) == []


def test_adopted_sandbox_whose_init_is_killed_is_lost_at_once(daemon: Daemon) -> None:
    with daemon.client() as c:
        sbx = c.create({})
        run = c.exec(sbx["id"], {"command": ["sleep", "600"], "background": True})
    daemon.kill9()
    daemon.start()  # the new daemon adopts the sandbox: not its child any more
    data = _record(daemon, sbx["id"])
    with daemon.client() as c:
        assert c.get(sbx["id"])["state"] == "running"
        _kill_init(data)
        rec = _until_lost(c, sbx["id"])
        assert rec["state"] == "lost", rec
        cause = _lost_event(c, sbx["id"])
        assert (cause["reason"], cause["signal"]) == ("signal", 9), cause
        assert c.run(run["id"])["status"] == "lost"
        assert not any(Path(d).exists() for d in data["cgroups"])


def test_sandbox_whose_agent_is_taken_by_the_oom_killer_is_lost_with_oom(daemon: Daemon) -> None:
    with daemon.client() as c:
        sbx = c.create({"limits": {"memory": "64M"}})
        if not sbx["enforcement"]["memory"].startswith("cgroup"):
            raise AssertionError("this machine enforces memory with cgroups (see hutch doctor)")
        # The agent's place (pid 2 inside: the idle helper, about 0.1 MiB) volunteers as the OOM
        # killer's first choice, then workloads go over the limit together, none of them larger
        # than the limit (a bigger one would be the kernel's pick): it kills pid 2. The sandbox
        # ends with its init, once the run (whose supervisor outlives pid 2) is over.
        one = "python3 -c 'import time; x = bytearray(12 << 20); time.sleep(2)'"
        hog = f"echo 1000 > /proc/2/oom_score_adj && for i in 1 2 3 4 5 6 7 8; do {one} & done; wait"
        c.exec(sbx["id"], {"command": ["sh", "-c", hog], "background": True})
        rec = _until_lost(c, sbx["id"])
        assert rec["state"] == "lost", rec
        cause = _lost_event(c, sbx["id"])
        assert cause["reason"] == "oom" and cause["oom_kills"] >= 1, cause
        assert "out of memory" in rec["error"], rec["error"]
