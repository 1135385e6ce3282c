"""Real sandboxes: bad input is refused before it reaches one, the smallest limits hutch
accepts start and run a command, and files made inside get the usual 0644/0755."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import Daemon, hutch_env

from hutch.checks import MIN_MEMORY, MIN_PIDS
from hutch.errors import InvalidError


def _cli(daemon: Daemon, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hutch", *args], env=hutch_env(daemon.home), capture_output=True, text=True, timeout=120
    )


def test_env_and_argv_that_cannot_run_are_refused_and_the_sandbox_stays_usable(daemon: Daemon) -> None:
    with daemon.client() as c:
        for env in ({"A=B": "1"}, {"A": "x\x00y"}):
            with pytest.raises(InvalidError):
                c.create({"provider": "local", "env": env})
        assert c.list(include_all=True) == []  # no record, not even a failed one
        sbx = c.create({"provider": "local", "env": {"GOOD": "yes"}})
        for req in (
            {"command": ["echo", "a\x00b"]},
            {"command": "echo a\x00b"},
            {"command": ["true"], "env": {"A=B": "1"}},
            {"command": ["true"], "env": {"A": "\x00"}},
        ):
            with pytest.raises(InvalidError):
                c.exec(sbx["id"], req)
        r = c.exec(sbx["id"], {"command": ["sh", "-c", 'echo "$GOOD"']})
        assert (r["exit_code"], r["stdout"]) == (0, "yes\n")
        assert c.get(sbx["id"])["state"] == "running"
        assert [run["status"] for run in c.runs(sbx["id"])] == ["completed"]  # nothing recorded `lost`


def test_nul_in_a_file_path_is_invalid_not_internal(daemon: Daemon) -> None:
    with daemon.client() as c:
        sbx = c.create({"provider": "local"})
        with pytest.raises(InvalidError, match="NUL"):
            c.write_file(sbx["id"], "a\x00b", b"x")
        with pytest.raises(InvalidError, match="NUL"):
            c.read_file(sbx["id"], "/etc/hostname\x00")
        with pytest.raises(InvalidError, match="NUL"):
            c.list_files(sbx["id"], "/tmp\x00")


def test_the_smallest_accepted_limits_start_and_run_a_pipeline(daemon: Daemon) -> None:
    with daemon.client() as c:
        sbx = c.create({"provider": "local", "limits": {"memory": MIN_MEMORY, "pids": MIN_PIDS}})
        r = c.exec(sbx["id"], {"command": ["sh", "-c", "echo small | cat | tr a-z A-Z"]})
        assert (r["exit_code"], r["stdout"]) == (0, "SMALL\n"), r


@pytest.mark.parametrize("memory", ["1K", "4M", "8M"])
def test_memory_too_small_to_start_is_a_usage_error_naming_the_minimum(daemon: Daemon, memory: str) -> None:
    r = _cli(daemon, "create", "--memory", memory)
    assert r.returncode == 2, r
    assert "32M" in r.stderr and "failed to start" not in r.stderr
    r = _cli(daemon, "create", "--memory", memory, "--json")
    assert r.returncode == 2
    assert json.loads(r.stdout)["error"]["kind"] == "invalid"
    with daemon.client() as c:
        assert c.list(include_all=True) == []


def test_files_made_inside_are_0644_and_dirs_0755(daemon: Daemon, tmp_path: Path) -> None:
    with daemon.client() as c:
        sbx = c.create({"provider": "local"})
        r = c.exec(sbx["id"], {"command": ["sh", "-c", "umask; echo hi > note.txt; mkdir d; stat -c '%a %n' note.txt d"]})
        assert r["stdout"].split("\n")[:3] == ["0022", "644 note.txt", "755 d"], r
        c.pull(sbx["id"], str(tmp_path / "out"))
    assert (tmp_path / "out" / "note.txt").stat().st_mode & 0o777 == 0o644
