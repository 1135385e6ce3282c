"""The gvisor runtime (gVisor's runsc, real): its own kernel, no network of its own, and what it
cannot do refused before anything is made. The escape battery runs against it in
test_isolation.py, the egress cases in test_network.py, the provider contract in
tests/contract (local+gvisor)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import Daemon, destroy_all, hutch_env

from hutch import Sandbox
from hutch.errors import InvalidError, UnavailableError


@pytest.fixture
def sbx(daemon: Daemon) -> Sandbox:
    return Sandbox.create(settings=daemon.settings, runtime="gvisor")


def made(daemon: Daemon) -> list[str]:
    d = daemon.home / "sandboxes"
    return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


def test_the_workload_sees_gvisors_kernel_not_the_hosts(sbx: Sandbox) -> None:
    r = sbx.exec("uname -r; dmesg | head -3")
    release, _, log = r.stdout.partition("\n")
    assert release and release != os.uname().release, r.stdout
    assert "gVisor" in log, log
    assert sbx.refresh()["enforcement"]["runtime"].startswith("gvisor: runsc")


def test_direct_tcp_udp_and_dns_have_nowhere_to_go(sbx: Sandbox) -> None:
    tcp = socket.socket()
    tcp.bind(("0.0.0.0", 0))  # every host address, loopback included
    tcp.listen(1)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("0.0.0.0", 0))
    udp.settimeout(2)
    host_ip = socket.gethostbyname(socket.gethostname())
    try:
        code = f"""
import socket
for ip in ("127.0.0.1", {host_ip!r}, "10.0.0.1", "1.1.1.1"):
    s = socket.socket(); s.settimeout(3)
    try:
        s.connect((ip, {tcp.getsockname()[1]})); print("TCP CONNECTED", ip)
    except OSError as e:
        print("tcp refused", ip, e.errno)
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        u.sendto(b"escape", (ip, {udp.getsockname()[1]})); print("udp sent", ip)
    except OSError as e:
        print("udp refused", ip, e.errno)
try:
    print("DNS", socket.getaddrinfo("example.com", 443))
except OSError as e:
    print("dns failed", e)
"""
        r = sbx.exec(["python3", "-c", code], timeout=60)
        assert "CONNECTED" not in r.stdout and "DNS" not in r.stdout, r.stdout
        assert r.stdout.count("tcp refused") == 4 and "dns failed" in r.stdout, r.stdout
        tcp.settimeout(0.5)
        with pytest.raises(OSError):
            tcp.accept()
        with pytest.raises(OSError):  # whatever the sandbox sent to 127.0.0.1 went to its own loopback
            udp.recvfrom(64)
    finally:
        tcp.close()
        udp.close()


def test_what_gvisor_cannot_do_is_refused_before_anything_is_made(daemon: Daemon) -> None:
    with pytest.raises(InvalidError) as err:
        Sandbox.create(settings=daemon.settings, runtime="gvisor", disk="1G")
    assert "the gvisor runtime cannot cap what a sandbox writes" in err.value.message, err.value.message
    with pytest.raises(InvalidError):
        Sandbox.create(settings=daemon.settings, runtime="kata")  # type: ignore[arg-type]
    assert made(daemon) == []


def test_exposing_a_port_of_a_gvisor_sandbox_is_refused(sbx: Sandbox) -> None:
    with pytest.raises(InvalidError) as err:
        sbx.expose(8000)
    assert "gvisor runtime cannot expose" in err.value.message


def test_a_missing_runsc_is_unavailable_with_the_install_command(hutch_home: Path) -> None:
    d = Daemon(hutch_home, HUTCH_RUNSC=str(hutch_home / "no-such-runsc")).start()
    try:
        with pytest.raises(UnavailableError) as err:
            Sandbox.create(settings=d.settings, runtime="gvisor")
        assert "runsc" in err.value.message and "apt-get install runsc" in (err.value.hint or "")
        assert made(d) == []
        assert Sandbox.create(settings=d.settings).exec("echo bwrap still works").stdout == "bwrap still works\n"
    finally:
        try:
            destroy_all(hutch_home)
        finally:
            d.stop()


def test_doctor_shows_runsc_and_its_platform_or_why_not(hutch_home: Path) -> None:
    def doctor(**extra: str) -> dict[str, Any]:
        env = hutch_env(hutch_home, **extra)
        done = subprocess.run([sys.executable, "-m", "hutch", "doctor", "--json"], env=env, capture_output=True, timeout=300)
        (check,) = [c for c in json.loads(done.stdout)["checks"] if c["name"] == "gvisor"]
        return check

    found = doctor()
    assert found["ok"] and "runsc" in found["detail"] and "platform" in found["detail"], found
    missing = doctor(HUTCH_RUNSC=str(hutch_home / "no-such-runsc"))  # optional while bwrap is the default
    assert missing["ok"] and "only --runtime gvisor needs it" in missing["detail"] and "apt-get install runsc" in missing["fix"]
    needed = doctor(HUTCH_RUNSC=str(hutch_home / "no-such-runsc"), HUTCH_RUNTIME="gvisor")
    assert not needed["ok"], needed


NEEDS_PIDFD = r"""
#define _GNU_SOURCE
#include <stdio.h>
#include <unistd.h>
#include <sys/syscall.h>
int main(void) {
    long fd = syscall(SYS_pidfd_open, getpid(), 0);  /* runsc 20221219 does not implement it */
    if (fd < 0) { perror("pidfd_open"); return 3; }
    puts("pidfd_open works");
    return 0;
}
"""


def test_a_program_needing_a_system_call_gvisor_lacks_fails_and_runscs_log_names_the_call(
    daemon: Daemon, sbx: Sandbox, tmp_path: Path
) -> None:
    src = tmp_path / "needs_pidfd.c"
    src.write_text(NEEDS_PIDFD)
    subprocess.run(["gcc", "-static", "-O", "-o", str(tmp_path / "needs_pidfd"), str(src)], check=True, timeout=300)
    binary = (tmp_path / "needs_pidfd").read_bytes()
    sbx.files.write("/workspace/needs_pidfd", binary, mode=0o755)
    r = sbx.exec("/workspace/needs_pidfd")
    assert r.exit_code == 3 and "pidfd_open: Function not implemented" in r.stderr, (r.exit_code, r.stdout, r.stderr)
    logs = daemon.home / "sandboxes" / sbx.id / "gvisor" / "log"  # where docs/security.md says to look
    deadline = time.monotonic() + 60
    while not any("Unsupported syscall pidfd_open(" in p.read_text(errors="replace") for p in logs.glob("*.boot.txt")):
        assert time.monotonic() < deadline, sorted(p.name for p in logs.iterdir())
        time.sleep(0.2)
    assert sbx.exec("echo the sandbox carries on").stdout == "the sandbox carries on\n"
    assert sbx.refresh()["state"] == "running"
    host = Sandbox.create(settings=daemon.settings)  # the daemon is fine, and the host's kernel has the call
    host.files.write("/workspace/needs_pidfd", binary, mode=0o755)
    assert host.exec("/workspace/needs_pidfd").stdout == "pidfd_open works\n"


def test_the_egress_relay_holds_no_socket_of_the_agent_but_the_proxys_port(daemon: Daemon) -> None:
    """The relay is forked from the agent: a spare's link it kept open would hide the agent's
    death from that spare (no EOF). Inside gVisor /proc shows every process's sockets."""
    box = Sandbox.create(settings=daemon.settings, runtime="gvisor", allow_hosts=["up.test"], allow_ports=[80])
    code = r"""
import json, os
port = [l.split() for l in open("/proc/net/tcp").read().splitlines()[1:] if l.split()[1] == "0100007F:0C38"]
listener = f"socket:[{port[0][9]}]"
procs = {}
for pid in (p for p in os.listdir("/proc") if p.isdigit()):
    fds = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            fds.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            pass
    ppid = open(f"/proc/{pid}/stat").read().rpartition(")")[2].split()[1]
    procs[pid] = {"ppid": ppid, "socks": sorted(f for f in fds if f.startswith("socket:"))}
print(json.dumps({"listener": listener, "procs": procs}))
"""
    seen = json.loads(box.exec(["python3", "-c", code]).stdout)
    procs, listener = seen["procs"], seen["listener"]
    holders = [p for p, v in procs.items() if listener in v["socks"]]
    (relay,) = [p for p in holders if procs[p]["ppid"] in holders]  # the agent's child holding the port
    assert procs[relay]["socks"] == [listener], seen
