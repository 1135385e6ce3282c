"""Attempts to get around the rules: mounts, secrets, the sandbox's own root."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import Daemon, hutch_env

from hutch import HutchError, Sandbox


def _refused(daemon: Daemon, mount: str) -> HutchError:
    with pytest.raises(HutchError) as err:
        Sandbox.create(mounts=[mount], settings=daemon.settings)
    assert err.value.kind == "invalid", mount
    assert err.value.hint
    return err.value


def test_mounts_that_would_expose_the_daemon_or_sockets(daemon: Daemon) -> None:
    _refused(daemon, f"{daemon.home}:/h")
    _refused(daemon, f"{daemon.home.parent}:/up")  # a directory above the state dir
    _refused(daemon, "/run:/r")
    _refused(daemon, "/proc/self:/p")
    base = Path(tempfile.mkdtemp(prefix="hutch-sock-"))
    os.chmod(base, 0o755)
    (base / "a" / "b").mkdir(parents=True)
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(base / "a" / "b" / "agent.sock"))
    try:
        err = _refused(daemon, f"{base}:/data")
        assert "agent.sock" in err.message
    finally:
        s.close()
        subprocess.run(["rm", "-rf", str(base)], check=False)


def test_mount_targets_are_normalised(daemon: Daemon, tmp_path: Path) -> None:
    base = Path(tempfile.mkdtemp(prefix="hutch-tgt-"))
    os.chmod(base, 0o755)
    try:
        for target in ("//etc", "/workspace/../.hutch", "/usr/./lib", "relative", "/"):
            _refused(daemon, f"{base}:{target}")
    finally:
        base.rmdir()


def test_relative_mount_source_resolves_where_the_user_is(daemon: Daemon) -> None:
    base = Path(tempfile.mkdtemp(prefix="hutch-rel-"))
    os.chmod(base, 0o755)
    (base / "proj").mkdir()
    (base / "proj" / "f.txt").write_text("mine")
    os.chmod(base / "proj", 0o755)
    os.chmod(base / "proj" / "f.txt", 0o644)
    try:
        r = subprocess.run(
            [sys.executable, "-m", "hutch", "run", "--mount", "proj:/src:ro", "--", "cat", "/src/f.txt"],
            env=hutch_env(daemon.home),
            cwd=base,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0, r.stderr
        assert r.stdout == "mine"
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False)


def test_env_values_never_reach_the_store_or_output(daemon: Daemon) -> None:
    secret = "s3cr3t-value-7731"
    sbx = Sandbox.create(env={"API_TOKEN": secret}, settings=daemon.settings)
    assert sbx.exec("echo $API_TOKEN").stdout == secret + "\n"  # the sandbox gets it
    assert secret not in json.dumps(sbx.refresh())
    assert sbx.info["spec"]["env"] == {"API_TOKEN": "***"}
    for f in daemon.home.glob("hutch.db*"):
        assert secret.encode() not in f.read_bytes(), f
    with sqlite3.connect(daemon.home / "hutch.db") as db:
        assert secret not in json.dumps(db.execute("SELECT * FROM sandboxes").fetchall())
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert secret not in out  # never on a command line
    daemon.kill9()  # and it survives a daemon restart, held only by the sandbox itself
    d2 = Daemon(daemon.home).start()
    daemon.proc = d2.proc
    assert Sandbox.connect(sbx.id, settings=daemon.settings).exec("echo $API_TOKEN").stdout == secret + "\n"


def test_state_files_are_private(daemon: Daemon) -> None:
    Sandbox.create(settings=daemon.settings)
    for name in ("hutch.db", "hutchd.sock"):
        mode = (daemon.home / name).stat().st_mode & 0o777
        assert mode & 0o077 == 0, (name, oct(mode))
    sbx = Sandbox.create(settings=daemon.settings)
    ws = daemon.home / "sandboxes" / sbx.id / "workspace"
    assert ws.stat().st_mode & 0o077 == 0


@pytest.mark.parametrize("runtime", ["bwrap", "gvisor"])
def test_sandbox_root_is_read_only_and_shm_is_capped(daemon: Daemon, runtime: str) -> None:
    sbx = Sandbox.create(settings=daemon.settings, runtime=runtime)  # type: ignore[arg-type]
    r = sbx.exec("touch /newfile; echo $?; mkdir /.hutch/x; echo $?; touch /etc/x; echo $?")
    assert r.stdout.split() == ["1", "1", "1"], r.stdout + r.stderr
    r = sbx.exec("df -k /dev/shm /tmp | tail -2")
    sizes = [int(line.split()[1]) for line in r.stdout.strip().splitlines()]
    assert sizes == [64 << 10, 256 << 10], r.stdout
    ok = sbx.exec("echo hi > /tmp/a && echo hi > /workspace/a && echo hi > ~/a && cat /tmp/a /workspace/a ~/a")
    assert ok.stdout == "hi\nhi\nhi\n"


@pytest.mark.parametrize("runtime", ["bwrap", "gvisor"])
def test_workload_cannot_hijack_its_control_socket(daemon: Daemon, runtime: str) -> None:
    # gvisor: also the egress proxy's unix socket its relay connects to (there with a network)
    net: dict[str, Any] = {"allow_hosts": ["example.com"]} if runtime == "gvisor" else {}
    sbx = Sandbox.create(settings=daemon.settings, runtime=runtime, **net)  # type: ignore[arg-type]
    egress = "; rm -f /.hutch/net/egress.sock; echo rc=$?; touch /.hutch/net/x; echo rc=$?" if runtime == "gvisor" else ""
    r = sbx.exec(
        "rm -f /.hutch/ctl/agent.sock; echo rc=$?; rm -f /.hutch/ctl/exec.sock; echo rc=$?;"
        " touch /.hutch/ctl/x; echo rc=$?; touch /dev/x; echo rc=$?" + egress
    )
    if os.geteuid() == 0:
        assert r.stdout.split() == ["rc=1"] * (6 if egress else 4), r.stdout + r.stderr
    if egress:
        assert (daemon.home / "sandboxes" / sbx.id / "gvisor" / "net" / "egress.sock").is_socket()
    assert sbx.exec("echo fine").stdout == "fine\n"  # the agent still answers


def test_reading_a_directory_is_invalid(daemon: Daemon) -> None:
    sbx = Sandbox.create(settings=daemon.settings)
    sbx.exec("mkdir -p d")
    with pytest.raises(HutchError) as err:
        sbx.files.read("d")
    assert err.value.kind == "invalid" and "hutch ls" in (err.value.hint or "")


def test_doctor_first_leaves_a_private_store(hutch_home: Path) -> None:
    env = hutch_env(hutch_home)
    subprocess.run([sys.executable, "-m", "hutch", "doctor", "--json"], env=env, capture_output=True, timeout=120)
    assert (hutch_home / "hutch.db").stat().st_mode & 0o077 == 0


def test_serve_json_announces_once_listening(hutch_home: Path) -> None:
    env = hutch_env(hutch_home)
    proc = subprocess.Popen([sys.executable, "-m", "hutch", "serve", "--json"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        doc = json.loads(proc.stdout.readline())
        assert doc["serving"] is True and doc["pid"] == proc.pid
        assert socket.socket(socket.AF_UNIX).connect_ex(doc["socket"]) == 0
    finally:
        proc.terminate()
        assert proc.wait(20) == 0
    assert not (hutch_home / "hutchd.sock").exists()  # SIGTERM cleans up
