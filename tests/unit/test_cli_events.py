"""``hutch events``: a readable table on a terminal, NDJSON with --json or when piped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from test_cli import _daemon_env, cli, daemon_home, sbx  # noqa: F401 - fixtures and helpers


def hutch(home: Path, *args: str, tty: bool) -> str:
    """Run the real ``hutch`` with stdout on a pseudo-terminal (``tty``) or a pipe."""
    cmd = [sys.executable, "-m", "hutch", *args]
    if not tty:
        return subprocess.run(cmd, env=_daemon_env(home), capture_output=True, text=True, timeout=120, check=True).stdout
    leader, follower = os.openpty()
    try:
        proc = subprocess.Popen(cmd, env=_daemon_env(home), stdout=follower, stderr=subprocess.DEVNULL)
        os.close(follower)
        chunks = []
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:  # EIO: the terminal's other side closed
                break
            if not data:
                break
            chunks.append(data)
        assert proc.wait(120) == 0
    finally:
        os.close(leader)
    return b"".join(chunks).decode().replace("\r\n", "\n")


def test_events_on_a_terminal_is_a_table(daemon_home: Path, cli: Any, sbx: str) -> None:  # noqa: F811
    assert cli("exec", sbx, "--", "echo", "hi")[0] == 0
    out = hutch(daemon_home, "events", sbx, tty=True)
    lines = out.splitlines()
    assert lines[0].split() == ["TIME", "SANDBOX", "RUN", "TYPE", "DETAILS"]
    assert not any(line.startswith("{") for line in lines)  # no JSON on a terminal
    finished = next(line for line in lines if " run_finished " in line)
    assert sbx in finished and "run_" in finished and "exit_code=0" in finished and "status=completed" in finished
    started = next(line for line in lines if " run_started " in line)
    assert "command=echo hi" in started
    date, clock = finished.split()[:2]  # a local time, not epoch floats
    assert len(date) == 10 and date[4] == "-" and len(clock) == 8 and clock[2] == ":"


def test_events_is_ndjson_with_json_or_when_piped(daemon_home: Path, cli: Any, sbx: str) -> None:  # noqa: F811
    assert cli("exec", sbx, "--", "echo", "hi")[0] == 0
    for out in (hutch(daemon_home, "events", sbx, tty=False), hutch(daemon_home, "events", sbx, "--json", tty=True)):
        docs = [json.loads(line) for line in out.splitlines()]
        assert [d["type"] for d in docs][:3] == ["sandbox_created", "run_started", "run_finished"]
        assert all(isinstance(d["time"], float) and d["sandbox_id"] == sbx for d in docs)
