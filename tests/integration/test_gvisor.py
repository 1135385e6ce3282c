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
