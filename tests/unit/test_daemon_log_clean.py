"""Normal use leaves the daemon's log clean: clients that go away in the middle of a
streamed or interactive exec leave no ``Task was destroyed but it is pending!`` and no
``Exception in ASGI application`` behind. A real daemon on the fake provider."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from test_cli import _daemon_env, _start_daemon, _stop


def hutch(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hutch", *args], env=_daemon_env(home), capture_output=True, text=True, timeout=120
    )


def running(home: Path, sandbox: str) -> list[str]:
    p = hutch(home, "runs", sandbox, "--status", "running", "--json")
    return [r["id"] for r in json.loads(p.stdout)]


def test_clients_that_leave_mid_run_leave_the_log_clean() -> None:
    home = Path(tempfile.mkdtemp(prefix="hutch-log-"))
    daemon = _start_daemon(home)
    try:
        sandbox = hutch(home, "create").stdout.strip()
        for flags in ([], ["-i"], ["-t"], [], ["-i"]):
            client = subprocess.Popen(
                [sys.executable, "-m", "hutch", "exec", *flags, sandbox, "--", "sleep", "2"],
                env=_daemon_env(home),
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            deadline = time.monotonic() + 60
            while not running(home, sandbox):  # the run has started: the client is waiting in it
                assert time.monotonic() < deadline and client.poll() is None
                time.sleep(0.05)
            client.kill()  # the client goes away mid-run
            client.wait(30)
            for run in running(home, sandbox):
                hutch(home, "wait", run, "--timeout", "60")
        for _ in range(10):  # more normal use, so that the daemon's garbage collector runs
            assert hutch(home, "exec", sandbox, "--", "true").returncode == 0
        assert hutch(home, "destroy", sandbox).returncode == 0
    finally:
        _stop(daemon)  # a clean stop: what was left pending is reported now at the latest
        log = (home / "test-daemon.log").read_text(errors="replace")
        shutil.rmtree(home, ignore_errors=True)
    assert "Task was destroyed but it is pending" not in log, log[-3000:]
    assert "Exception in ASGI application" not in log, log[-3000:]
