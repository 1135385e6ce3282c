"""The seccomp layer inside real sandboxes: what attackers use fails, normal programs work."""

from __future__ import annotations

import errno
import json
import platform
import signal
import subprocess
import sys

import pytest
from tests.conftest import Daemon, hutch_env

from hutch import Sandbox
from hutch.providers.local import seccomp

ARCH = platform.machine()
pytestmark = pytest.mark.skipif(ARCH not in ("x86_64", "aarch64"), reason=f"no filter for {ARCH}")
NR = {r.name: r.nr(ARCH) for r in seccomp.DENIED} if ARCH in ("x86_64", "aarch64") else {}

# Each call is made so that, without the filter, it would succeed or fail differently.
PROBE = """
import ctypes, json, os, re, sys
nr = json.loads(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(n, *args):
    ctypes.set_errno(0)
    res = libc.syscall(ctypes.c_long(n), *[ctypes.c_long(a) for a in args])
    return ctypes.get_errno() if res == -1 else 0
me = os.getpid()
params = ctypes.create_string_buffer(120)
attr = ctypes.create_string_buffer(128)
out = {
    "io_uring_setup": call(nr["io_uring_setup"], 8, ctypes.addressof(params)),
    "bpf": call(nr["bpf"], 0, ctypes.addressof(attr), 128),
    "perf_event_open": call(nr["perf_event_open"], ctypes.addressof(attr), 0, -1, -1, 0),
    "userfaultfd": call(nr["userfaultfd"], 0),
    "keyctl": call(nr["keyctl"], 0, -3, 1),
    "add_key": call(nr["add_key"], 0, 0, 0, 0, -3),
    "ptrace": call(nr["ptrace"], 0),
    "process_vm_readv": call(nr["process_vm_readv"], me, 0, 0, 0, 0, 0),
    "pidfd_getfd": call(nr["pidfd_getfd"], -1, 0, 0),
    "unshare": call(nr["unshare"], 0),
}
master, slave = os.openpty()
ch = ctypes.c_char(b"x")
for name, req in (("TIOCSTI", 0x5412), ("TIOCLINUX", 0x541C), ("TIOCSTI_high_bits", (0xDEAD << 32) | 0x5412)):
    ctypes.set_errno(0)
    res = libc.syscall(ctypes.c_long(nr["ioctl"]), ctypes.c_long(slave), ctypes.c_ulong(req), ctypes.byref(ch))
    out[name] = ctypes.get_errno() if res == -1 else 0
out["seccomp_mode"] = re.search(r"^Seccomp:\\s+(\\d+)", open("/proc/self/status").read(), re.M).group(1)
print(json.dumps(out))
"""

X32 = "import ctypes; ctypes.CDLL(None).syscall(0x40000000 | 39); print('survived')"
INT80 = """
import ctypes, mmap
m = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
m.write(bytes([0xB8, 20, 0, 0, 0, 0xCD, 0x80, 0xC3]))  # mov eax, 20 (getpid); int 0x80; ret
print(ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(m)))())
"""


@pytest.fixture
def sbx(daemon: Daemon) -> Sandbox:
    return Sandbox.create(settings=daemon.settings)


def test_attack_surface_syscalls_fail(sbx: Sandbox) -> None:
    r = sbx.exec(["python3", "-c", PROBE, json.dumps(NR | {"ioctl": seccomp.IOCTL_NR[ARCH]})])
    assert r.exit_code == 0, r.stderr
    got = json.loads(r.stdout)
    assert got.pop("seccomp_mode") == "2"  # filter mode: the agent's children inherit it
    assert got.pop("io_uring_setup") == errno.ENOSYS
    assert got == dict.fromkeys(got, errno.EPERM), got


@pytest.mark.skipif(ARCH != "x86_64", reason="x86_64 ABIs")
def test_other_abis_kill_the_process(sbx: Sandbox) -> None:
    for program in (X32, INT80):
        r = sbx.exec(["python3", "-c", program])
        assert r.signal == signal.SIGSYS, (r.exit_code, r.signal, r.stdout, r.stderr)
        assert r.stdout == ""
    assert sbx.exec("echo still here").stdout == "still here\n"  # only that process died


def test_normal_programs_keep_working(sbx: Sandbox) -> None:
    program = (
        "import subprocess, threading, os, pty\n"
        "out = []\n"
        "ts = [threading.Thread(target=lambda: out.append(1)) for _ in range(4)]\n"
        "[t.start() for t in ts]; [t.join() for t in ts]\n"
        "sh = subprocess.run(['sh', '-c', 'echo $((6*7)) | cat'], capture_output=True, text=True).stdout\n"
        "pid, fd = pty.fork()\n"
        "if pid == 0: os.execv('/bin/echo', ['echo', 'via-pty'])\n"
        "data = os.read(fd, 100); os.waitpid(pid, 0)\n"
        "print(len(out), sh.strip(), data.decode().strip())\n"
    )
    r = sbx.exec(["python3", "-c", program])
    assert (r.exit_code, r.stdout) == (0, "4 42 via-pty\n"), r.stderr


def test_get_and_doctor_report_the_layer(daemon: Daemon, sbx: Sandbox) -> None:
    assert sbx.info["enforcement"]["seccomp"] == seccomp.summary()
    env = hutch_env(daemon.home)
    shown = subprocess.run([sys.executable, "-m", "hutch", "get", sbx.id], env=env, capture_output=True, text=True)
    assert f"seccomp:   {seccomp.summary()}" in shown.stdout, shown.stdout + shown.stderr
    doctor = subprocess.run([sys.executable, "-m", "hutch", "doctor", "--json"], env=env, capture_output=True, text=True)
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert checks["seccomp"]["ok"] is True, doctor.stdout
