"""Waiting for processes to end on their pidfds (providers/local/pidwait.py), with real processes."""

from __future__ import annotations

import subprocess
import threading

import pytest

from hutch.providers.local import pidwait


def test_wakes_when_every_process_has_ended() -> None:
    procs = [subprocess.Popen(["sleep", "600"]) for _ in range(3)]
    try:
        assert not pidwait.wait_exit([p.pid for p in procs], 0.2)  # alive: the timeout says so
        killer = threading.Timer(0.3, lambda: [p.kill() for p in procs])
        killer.start()
        assert pidwait.wait_exit([p.pid for p in procs], 300)  # a zombie counts as ended
        killer.join()
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_gone_and_reused_pids_are_not_waited_for() -> None:
    done = subprocess.Popen(["true"])
    done.wait()
    assert pidwait.wait_exit([done.pid], 300)  # reaped already
    live = subprocess.Popen(["sleep", "600"])
    try:
        assert pidwait.wait_exit([live.pid], 300, same=lambda _: False)  # another process now holds the pid
        assert not pidwait.wait_exit([live.pid], 0.1, same=lambda _: True)
    finally:
        live.kill()
        live.wait()


def test_the_fallback_without_pidfds_waits_as_well(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_pidfd(pid: int) -> int:
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(pidwait.os, "pidfd_open", no_pidfd)
    proc = subprocess.Popen(["sleep", "600"])
    try:
        assert not pidwait.wait_exit([proc.pid], 0.1)
        threading.Timer(0.2, proc.kill).start()
        assert pidwait.wait_exit([proc.pid], 300)
    finally:
        proc.kill()
        proc.wait()
