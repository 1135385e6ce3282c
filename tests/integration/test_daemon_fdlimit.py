"""The daemon raises its open-file limit at start: hundreds of idle sandboxes hold more
descriptors than the usual soft limit of 1024 (doctor says what it has)."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import hutch_env

from hutch.client import Client
from hutch.config import Settings
from hutch.server.home import socket_answers


def _soft_limit(pid: int) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError("no open-file limit in /proc/PID/limits")


def test_the_daemon_raises_its_soft_open_file_limit_to_the_hard_limit(hutch_home: Path) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    low = min(256, hard)

    def lower() -> None:  # started as a login shell would start it: a low soft limit
        resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))

    log = open(hutch_home / "test-daemon.log", "ab")  # noqa: SIM115 - owned by the child
    proc = subprocess.Popen(
        [sys.executable, "-m", "hutch", "serve"], env=hutch_env(hutch_home), stdout=log, stderr=log, preexec_fn=lower
    )
    log.close()
    settings = Settings.load(home=hutch_home)
    try:
        deadline = time.monotonic() + 60
        while not socket_answers(settings.socket_path):
            assert proc.poll() is None and time.monotonic() < deadline, (hutch_home / "test-daemon.log").read_text()[-2000:]
            time.sleep(0.05)
        expected = hard if hard != resource.RLIM_INFINITY else _soft_limit(proc.pid)
        assert _soft_limit(proc.pid) == expected
        with Client(settings, autostart=False) as c:
            checks = {ch["name"]: ch for ch in c.doctor()["checks"]}
        line = checks["open files"]
        assert line["ok"] is True
        assert f"soft limit {expected}" in line["detail"]
        if low != hard:
            assert f"raised from {low} at start" in line["detail"]
    finally:
        proc.terminate()
        proc.wait(30)
