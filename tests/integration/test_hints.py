"""Hints that suggest the right fix, against the real thing: a mount of /root (as root) is
not answered with "chmod o+rx /root"; on Unikraft, --allow-host and hutch shell point at
what works there (the test server's instances are real local sandboxes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import Daemon, hutch_env
from tests.integration.test_unikraft import hutch, js, ukc, ukd  # noqa: F401 - fixtures and helpers
from tests.integration.ukc_support import TestServer

from hutch import Sandbox
from hutch.errors import InvalidError

pytestmark = pytest.mark.integration


def test_mounting_a_private_home_suggests_copying_not_opening_it(daemon: Daemon, tmp_path: Path) -> None:
    private = Path("/root") if os.geteuid() == 0 else tmp_path / "private"
    private.mkdir(exist_ok=True)
    if os.geteuid() != 0:  # without root the sandbox has your uid and your own 0700 directory mounts
        private.chmod(0o700)
        assert Sandbox.create(mounts=[f"{private}:/r:ro"], settings=daemon.settings).exec(["true"]).exit_code == 0
        return
    with pytest.raises(InvalidError) as err:
        Sandbox.create(mounts=["/root:/r:ro"], settings=daemon.settings)
    hint = err.value.hint or ""
    assert "hutch push SANDBOX DIR" in hint and "--sync DIR" in hint
    assert not hint.startswith("allow others in")  # was: "allow others in (chmod o+rx /root) ..."
    assert "would open it to every user" in hint


def test_unikraft_allow_host_names_the_option_given(ukd: Daemon, ukc: TestServer) -> None:  # noqa: F811
    before = ukc.state()["creates"]
    p = hutch(ukd.home, ukc, "create", "--provider", "unikraft", "--allow-host", "example.com", "--json")
    assert p.returncode == 2
    err = js(p)["error"]
    assert "platform's own network" in err["message"]
    assert err["hint"].startswith("drop --allow-host,") and "--network" not in err["hint"]
    assert ukc.state()["creates"] == before  # refused before anything was made


def test_unikraft_shell_points_at_exec_and_ssh_and_records_no_run(ukd: Daemon, ukc: TestServer) -> None:  # noqa: F811
    rec = js(hutch(ukd.home, ukc, "create", "--provider", "unikraft", "--name", "noterm", "--json"))
    p = subprocess.run(
        [sys.executable, "-m", "hutch", "shell", "noterm", "--json"],
        env=hutch_env(ukd.home) | {"HUTCH_UNIKRAFT_TOKEN": "unused"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    err = json.loads(p.stdout.splitlines()[-1])["error"]  # the error document is the last line
    assert p.returncode == 2 and err["kind"] == "invalid"
    assert "hutch exec noterm -- CMD" in err["hint"] and "--ssh" in err["hint"] and "hutch ssh" in err["hint"]
    assert "drop -i/-t" not in err["hint"]  # hutch shell has no -i/-t to drop
    assert js(hutch(ukd.home, ukc, "runs", rec["id"], "--json")) == []  # refused before a run was recorded


def _exec_cli(daemon: Daemon, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hutch", "exec", *args],
        env=hutch_env(daemon.home),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_script_without_its_interpreter_line_is_not_told_to_chmod(daemon: Daemon) -> None:
    sbx = Sandbox.create(settings=daemon.settings)
    sbx.exec("printf 'echo hi\\n' > /tmp/noshebang.sh && chmod 755 /tmp/noshebang.sh")
    p = _exec_cli(daemon, sbx.id, "--", "/tmp/noshebang.sh")
    assert p.returncode == 126 and "exec format error" in p.stderr, p.stderr
    assert "#! line" in p.stderr and "chmod" not in p.stderr
    p = _exec_cli(daemon, sbx.id, "--", "/tmp")  # a directory: not executable as a program
    assert p.returncode == 126 and "chmod +x" in p.stderr, p.stderr
    sbx.destroy()


def test_a_sandbox_at_its_process_limit_is_told_so(daemon: Daemon) -> None:
    sbx = Sandbox.create(pids=16, settings=daemon.settings)
    filler = sbx.exec("i=0; while [ $i -lt 40 ]; do sleep 300 & i=$((i+1)); done; wait", background=True)
    try:
        for _ in range(100):  # until the limit is reached (the filler's sleeps are its processes)
            p = _exec_cli(daemon, sbx.id, "--", "echo", "room")
            if p.returncode != 0:
                break
        assert p.returncode == 126, p.stderr
        assert "process or memory limit" in p.stderr and f"hutch ps {sbx.id}" in p.stderr and "chmod" not in p.stderr, p.stderr
    finally:
        filler.kill("KILL")
        sbx.destroy()
