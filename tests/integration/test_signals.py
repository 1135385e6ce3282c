"""Runs start with every signal at its default, however the daemon was started."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import Daemon, destroy_all, sweep

from hutch import Sandbox

IGNORED = (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT)  # nohup; a non-interactive shell's background job


@contextlib.contextmanager
def _ignoring(*sigs: signal.Signals) -> Iterator[None]:
    old = {sig: signal.getsignal(sig) for sig in sigs}
    for sig in sigs:
        signal.signal(sig, signal.SIG_IGN)
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


@pytest.fixture
def nohup_daemon(hutch_home: Path) -> Iterator[Daemon]:
    with _ignoring(*IGNORED):  # what the daemon's process starts with; it outlives the block
        d = Daemon(hutch_home).start()
    try:
        yield d
    finally:
        try:
            destroy_all(hutch_home)
        finally:
            d.stop()
            sweep(hutch_home)


def test_runs_of_a_daemon_started_ignoring_signals_ignore_none(nohup_daemon: Daemon) -> None:
    assert nohup_daemon.proc is not None
    status = Path(f"/proc/{nohup_daemon.proc.pid}/status").read_text()
    ignored = int(next(line for line in status.splitlines() if line.startswith("SigIgn:")).split()[1], 16)
    assert ignored & (1 << (signal.SIGHUP - 1))  # the premise: the daemon itself still ignores a hangup
    sbx = Sandbox.create(settings=nohup_daemon.settings)
    out = sbx.exec(["sh", "-c", "grep SigIgn: /proc/self/status"]).stdout
    assert out.split() == ["SigIgn:", "0000000000000000"], out
    c = nohup_daemon.client()
    for sig in IGNORED:  # and each of them reaches a run
        run_id = c.start(sbx.id, {"command": ["sleep", "300"]})["id"]
        deadline = time.monotonic() + 120
        while not any(p["command"] == "sleep 300" for p in c.ps(sbx.id)):
            assert time.monotonic() < deadline, "the run did not start"
            time.sleep(0.1)
        c.kill(run_id, int(sig))
        run = c.wait(run_id, timeout=120)
        assert run["status"] == "killed" and run["signal"] == sig, run
