"""A destroy does not wait for its workspace's files: the sandbox's directory leaves
HUTCH_HOME/sandboxes when the destroy returns and is deleted behind it (the trash); its host
uid is free at once; what a killed daemon left in the trash goes at the next start."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import Daemon, serving


@pytest.fixture
def daemon(hutch_home: Path) -> Iterator[Daemon]:
    with serving(hutch_home, HUTCH_POOL_SIZE="0") as d:  # every sandbox cold: its directory is its id's
        yield d


def until(what: str, check: object, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"still not {what} after {seconds} s"
        time.sleep(0.05)


def test_a_destroyed_sandbox_leaves_at_once_and_its_files_are_deleted_behind(daemon: Daemon) -> None:
    trash = daemon.home / "trash"
    with daemon.client() as c:
        sid = c.create({"provider": "local"})["id"]
        made = c.exec(sid, {"command": ["sh", "-c", "mkdir -p a/b && for i in $(seq 300); do echo $i > a/b/f$i; done"]})
        assert made["exit_code"] == 0, made
        sdir = daemon.home / "sandboxes" / sid
        assert sdir.is_dir()
        c.destroy(sid)
        assert not sdir.exists()  # gone from the sandboxes when the destroy answered
        until("emptied", lambda: trash.is_dir() and list(trash.iterdir()) == [])
        again = c.create({"provider": "local"})["id"]  # the daemon goes on as before
        assert c.exec(again, {"command": ["true"]})["exit_code"] == 0
        c.destroy(again)


def test_what_a_killed_daemon_left_in_the_trash_goes_at_the_next_start(daemon: Daemon) -> None:
    trash = daemon.home / "trash"
    left = trash / "sbx_left_by_a_killed_daemon.0123abcd"
    (left / "workspace" / "deep").mkdir(parents=True)
    (left / "workspace" / "deep" / "f").write_text("x")
    daemon.kill9()
    daemon.start()
    with daemon.client() as c:
        sid = c.create({"provider": "local"})["id"]  # the local provider is loaded: it sweeps
        c.destroy(sid)
    until("swept", lambda: not left.exists())
