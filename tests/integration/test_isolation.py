"""The local sandbox holds: each test tries to get out and must fail, under both runtimes
(bwrap, and gvisor: gVisor's runsc, its own kernel in user space)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from tests.conftest import Daemon

from hutch import Sandbox


@pytest.fixture(params=["bwrap", "gvisor"])
def sbx(daemon: Daemon, request: pytest.FixtureRequest) -> Sandbox:
    return Sandbox.create(settings=daemon.settings, runtime=request.param)


def test_cannot_read_root_home_or_shadow(sbx: Sandbox) -> None:
    assert Path("/etc/shadow").exists()  # the host has it; the sandbox must not
    r = sbx.exec("cat /etc/shadow; echo rc=$?; ls /root; echo rc=$?")
    assert "rc=1" in r.stdout and "rc=2" in r.stdout
    assert "root:" not in r.stdout


def test_host_paths_are_not_visible(sbx: Sandbox, tmp_path: Path) -> None:
    marker = Path("/tmp") / f"hutch-marker-{os.getpid()}"
    marker.write_text("host secret")
    try:
        # (test -e, not ls: coreutils' statx gets EINVAL from Debian's runsc, see docs/security.md)
        r = sbx.exec(["sh", "-c", f"for p in /run /home/root /var; do test -e $p && echo $p is there; done; cat {marker} 2>&1"])
        assert "host secret" not in r.stdout and "is there" not in r.stdout, r.stdout
        assert r.stdout.count("No such file") == 1, r.stdout
        assert marker.name not in sbx.exec(["ls", "-a", "/tmp"]).stdout
    finally:
        marker.unlink()


def test_cannot_see_host_processes(sbx: Sandbox) -> None:
    r = sbx.exec(["sh", "-c", "ls /proc | grep -E '^[0-9]+$'"])
    pids = {int(p) for p in r.stdout.split()}
    assert os.getpid() not in pids or os.getpid() < 10
    assert len(pids) < 20, pids  # the sandbox's own few processes only
    r = sbx.exec(["cat", "/proc/1/cmdline"])
    assert b"pytest" not in r.stdout_raw


def test_no_network_but_loopback(sbx: Sandbox) -> None:
    host = socket.socket()
    host.bind(("127.0.0.1", 0))
    host.listen(1)
    port = host.getsockname()[1]
    try:
        code = (
            "import socket\n"
            f"s=socket.socket(); s.settimeout(2)\n"
            f"try:\n s.connect(('127.0.0.1', {port})); print('CONNECTED')\n"
            "except OSError as e: print('refused', e.errno)\n"
        )
        r = sbx.exec(["python3", "-c", code])
        assert "CONNECTED" not in r.stdout
        assert "refused" in r.stdout
        devices = sbx.exec(["cat", "/proc/net/dev"]).stdout.strip().splitlines()[2:]
        assert [d.split(":")[0].strip() for d in devices] == ["lo"]
        routes = sbx.exec(["cat", "/proc/net/route"]).stdout.strip().splitlines()
        assert len(routes) == 1  # the header only: no route anywhere
    finally:
        host.close()


def test_cannot_write_usr_or_etc(sbx: Sandbox) -> None:
    r = sbx.exec("touch /usr/evil; echo $?; touch /etc/passwd 2>&1; echo $?")
    codes = [line for line in r.stdout.splitlines() if line.isdigit()]
    assert codes == ["1", "1"], r.stdout
    assert not Path("/usr/evil").exists()


def test_not_host_root(sbx: Sandbox, daemon: Daemon) -> None:
    r = sbx.exec("id -u; touch /workspace/owned")
    assert r.stdout.strip() == "1000"
    host_file = daemon.home / "sandboxes" / sbx.id / "workspace" / "owned"
    assert host_file.stat().st_uid != 0
    if os.geteuid() == 0:
        assert host_file.stat().st_uid >= daemon.settings.uid_base


def test_cannot_create_user_namespace_or_gain_caps(sbx: Sandbox) -> None:
    r = sbx.exec("unshare -U true; echo rc=$?; unshare -r true; echo rc=$?; grep CapEff /proc/self/status")
    if sbx.refresh()["spec"].get("runtime") != "gvisor":
        assert r.stdout.count("rc=1") == 2, r.stdout
    # under gvisor a user namespace is the Sentry's, made by gVisor's kernel: the host's never sees it
    assert "CapEff:\t0000000000000000" in r.stdout


def test_cannot_reach_host_daemon_socket(sbx: Sandbox, daemon: Daemon) -> None:
    r = sbx.exec(["sh", "-c", f"ls -la {daemon.home} 2>&1; find / -xdev -type s 2>/dev/null"])
    assert "hutchd.sock" not in r.stdout
    sockets = [line for line in r.stdout.splitlines() if line.startswith("/") and line.endswith(".sock")]
    assert sorted(sockets) in (["/.hutch/ctl/agent.sock", "/.hutch/ctl/exec.sock"], []), sockets


def test_sandboxes_cannot_see_each_other(daemon: Daemon) -> None:
    a = Sandbox.create(settings=daemon.settings)
    b = Sandbox.create(settings=daemon.settings)
    a.files.write("secret.txt", "only a")
    r = b.exec("cat /workspace/secret.txt; ls /workspace")
    assert "only a" not in r.stdout
    assert "secret.txt" not in r.stdout
    pid_a = a.exec(["sh", "-c", "sleep 30 & echo $!"]).stdout.strip()
    r = b.exec(["sh", "-c", "ps -eo cmd"])
    assert "sleep 30" not in r.stdout
    assert pid_a
