"""A sandbox another version of hutch made (its agent speaks another protocol) after the
daemon restarts as this version: kept and listed with what happened, every call on it
refused with both protocol numbers and how to recover, and destroyable without a trace.
The old version is played by hutch.testing.agentprotocol (a daemon whose agents answer
``ping`` with another number); the new one is the real ``hutch serve``."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import Daemon, destroy_all, sweep

from hutch.errors import ConflictError
from hutch.providers.local.agent import wire
from hutch.providers.local.host import start_time
from hutch.store import Store

OLD = wire.PROTOCOL - 1


@pytest.fixture
def daemons(hutch_home: Path) -> Iterator[tuple[Daemon, Daemon]]:
    old = Daemon(hutch_home, argv=("hutch.testing.agentprotocol", str(OLD)))
    new = Daemon(hutch_home)
    try:
        yield old, new
    finally:
        try:
            destroy_all(hutch_home)
        finally:
            old.stop()
            new.stop()
            sweep(hutch_home)


def cli(d: Daemon, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hutch", *args], env=d.env, capture_output=True, text=True, timeout=300)


def processes(cgroups: list[str]) -> dict[int, str | None]:
    """Every process in the sandbox's cgroups, with its start time."""
    pids = {int(p) for d in cgroups for p in (Path(d) / "cgroup.procs").read_text().split()}
    return {pid: start_time(pid) for pid in pids}


def test_a_sandbox_of_another_protocol_is_kept_refused_with_why_and_destroyed_whole(daemons: tuple[Daemon, Daemon]) -> None:
    old, new = daemons
    old.start()
    with old.client() as c:
        sbx = c.create({"name": "old"})
        c.write_file("old", "/workspace/notes.txt", b"kept\n")
        run = c.start("old", {"command": ["sleep", "600"]})
    old.stop()  # an upgrade: the sandbox and its run go on, and this hutch's daemon starts
    new.start()
    data = Store(new.settings.db_path).sandboxes.get(sbx["id"]).data
    inside = processes(data["cgroups"])
    assert int(data["init_pid"]) in inside and len(inside) >= 3, inside  # its init, agent, the sleep
    both = (f"protocol {OLD}", f"protocol {wire.PROTOCOL}")
    with new.client() as c:
        rec = c.get("old")
        assert rec["state"] == "running" and all(p in rec["error"] for p in both), rec  # listed, with why
        assert [s["id"] for s in c.list()] == [sbx["id"]]
        with pytest.raises(ConflictError) as refused:
            c.read_file("old", "/workspace/notes.txt")
        assert all(p in refused.value.message for p in both)
        assert c.run(run["id"])["status"] == "lost"  # it cannot be followed: said so, not left 'running'
        assert len(c.events(sbx["id"], types=["sandbox_incompatible"])) == 1
    shown = cli(new, "get", "old")
    assert shown.returncode == 0 and f"protocol {OLD}" in shown.stdout, shown
    ran = cli(new, "exec", "old", "--json", "--", "true")
    assert ran.returncode == 125, ran
    error = json.loads(ran.stdout)["error"]
    assert error["kind"] == "conflict" and all(p in error["message"] for p in both), error
    assert "hutch destroy old" in error["hint"], error
    files = Path(data["dir"]) / "workspace"
    assert str(files) in error["hint"] and (files / "notes.txt").read_bytes() == b"kept\n"  # where its files are
    new.stop()
    new.start()  # a second restart finds it the same, and says so once
    with new.client() as c:
        assert c.get("old")["state"] == "running"
        assert len(c.events(sbx["id"], types=["sandbox_incompatible"])) == 1
    gone = cli(new, "destroy", "old", "--json")
    assert gone.returncode == 0 and [r["destroyed"] for r in json.loads(gone.stdout)] == [True], gone
    left = {pid for pid, start in inside.items() if start is not None and start_time(pid) == start}
    assert not left, f"processes of the destroyed sandbox are still there: {left}"
    assert not any(Path(d).exists() for d in data["cgroups"]) and not Path(data["dir"]).exists()
    with new.client() as c:
        assert c.get("old")["state"] == "destroyed"


def test_an_exec_sent_the_old_way_is_refused_naming_the_protocol(hutch_home: Path) -> None:
    """A daemon of protocol 1 sent exec to the agent's control socket; this agent takes runs on
    its exec socket only and says so, instead of running the command some other way."""
    d = Daemon(hutch_home).start()
    try:
        with d.client() as c:
            sbx = c.create({})
        sock_path = Store(d.settings.db_path).sandboxes.get(sbx["id"]).data["socket"]
        r, w = os.pipe()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(60)
            s.connect(sock_path)
            old_exec = {"type": "exec", "run_id": "run_old", "argv": ["touch", "/workspace/ran"]}
            socket.send_fds(s, [wire.message(old_exec)], [r])
            reader = wire.Reader()
            while (got := reader.next()) is None:
                chunk = s.recv(1 << 16)
                assert chunk, "the agent closed without an answer"
                reader.feed(chunk)
        os.close(r)
        os.close(w)
        answer = wire.decode(got[1])
        assert answer["type"] == "error" and answer["error"]["kind"] == "conflict", answer
        assert f"protocol {wire.PROTOCOL}" in answer["error"]["message"] and answer["error"]["hint"]
        with d.client() as c:
            assert c.exec(sbx["id"], {"command": ["ls", "/workspace"]})["stdout"] == ""  # nothing ran
            assert c.exec(sbx["id"], {"command": ["echo", "fine"]})["stdout"] == "fine\n"  # the agent lives on
    finally:
        try:
            destroy_all(hutch_home)
        finally:
            d.stop()
            sweep(hutch_home)


def test_an_idle_spare_leaves_and_the_next_exec_forks_one(hutch_home: Path) -> None:
    """With spare_idle 1 s, an idle sandbox is down to its agent alone; an exec then still runs
    with the sandbox's environment and secrets (kept by the agent), and its spare leaves again."""
    d = Daemon(hutch_home, HUTCH_SPARE_IDLE="1", HUTCH_POOL_SIZE="0").start()
    try:
        with d.client() as c:
            sbx = c.create({"env": {"FOO": "bar"}, "secrets": {"TOKEN": "s3cret-value"}})["id"]

            def agents() -> int:  # the agent, its spare, any run's supervisor (pid 1, bwrap, names it too)
                return sum(1 for p in c.ps(sbx) if p["pid"] != 1 and "/.hutch/agent" in p["command"])

            def settle_to(n: int) -> None:
                deadline = time.monotonic() + 120
                while agents() != n:
                    assert time.monotonic() < deadline, f"{agents()} agent processes, not {n}"
                    time.sleep(0.1)

            settle_to(1)
            for _ in range(2):
                out = c.exec(sbx, {"command": "echo $FOO $TOKEN"})
                assert out["exit_code"] == 0 and out["stdout"].startswith("bar ") and "s3cret" not in out["stdout"], out
                settle_to(1)
    finally:
        try:
            destroy_all(hutch_home)
        finally:
            d.stop()
            sweep(hutch_home)
