"""The seccomp program, loaded for real into forked children with prctl."""

from __future__ import annotations

import ctypes
import errno
import json
import mmap
import os
import platform
import re
import signal
import struct
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hutch.errors import UnavailableError
from hutch.providers.local import seccomp

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
ARCH = platform.machine()
native = pytest.mark.skipif(ARCH not in ("x86_64", "aarch64"), reason=f"no filter for {ARCH}")
x86_only = pytest.mark.skipif(ARCH != "x86_64", reason="x86_64 ABIs")


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def libc() -> ctypes.CDLL:
    lib = ctypes.CDLL(None, use_errno=True)
    lib.syscall.restype = ctypes.c_long
    return lib


def load(program: bytes) -> None:
    """Install ``program`` on the calling thread (and its future children), as bwrap does."""
    lib = libc()
    buf = ctypes.create_string_buffer(program, len(program))
    prog = SockFprog(len(program) // 8, ctypes.addressof(buf))
    zero = ctypes.c_ulong(0)
    if lib.prctl(PR_SET_NO_NEW_PRIVS, ctypes.c_ulong(1), zero, zero, zero) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
    if lib.prctl(PR_SET_SECCOMP, ctypes.c_ulong(SECCOMP_MODE_FILTER), ctypes.byref(prog), zero, zero) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_SECCOMP")


def in_child(fn: Callable[[], Any], filtered: bool = True) -> tuple[int | None, Any]:
    """Run ``fn`` in a forked child (under the filter); return (signal that killed it or None, fn's result)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        code = 0
        try:
            os.close(r)
            if filtered:
                load(seccomp.build_filter())
            out = json.dumps({"ok": fn()}).encode()
        except BaseException as exc:  # reported to the parent
            out = json.dumps({"error": repr(exc)}).encode()
            code = 1
        os.write(w, out)
        os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return os.WTERMSIG(status), None
    doc = json.loads(data)
    assert "error" not in doc, doc["error"]
    return None, doc["ok"]


def call(nr: int, *args: int) -> int:
    """errno of the raw syscall, 0 when it succeeded."""
    lib = libc()
    ctypes.set_errno(0)
    res = lib.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    return ctypes.get_errno() if res == -1 else 0


# -- the program itself ------------------------------------------------------------------


def test_numbers_match_the_kernel_headers() -> None:
    headers = {
        "x86_64": Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
        "aarch64": Path("/usr/include/asm-generic/unistd.h"),
    }
    checked = 0
    for arch, header in headers.items():
        if not header.exists():
            continue
        table = dict(re.findall(r"#define __NR(?:3264)?_(\w+)\s+(\d+)", header.read_text()))
        for rule in seccomp.DENIED:
            assert int(table[rule.name]) == rule.nr(arch), (arch, rule.name)
        assert int(table["ioctl"]) == seccomp.IOCTL_NR[arch]
        checked += 1
    if not checked:
        pytest.skip("no kernel headers installed")


@pytest.mark.parametrize("arch", ["x86_64", "aarch64", "amd64", "arm64"])
def test_program_shape(arch: str) -> None:
    prog = seccomp.build_filter(arch)
    assert len(prog) % 8 == 0 and 0 < len(prog) // 8 < 4096
    insns = [struct.unpack("=HBBI", prog[i : i + 8]) for i in range(0, len(prog), 8)]
    assert insns[0] == (seccomp.LD_W_ABS, 0, 0, seccomp.OFF_ARCH)  # the ABI is checked first
    assert insns[1][3] == seccomp.AUDIT_ARCH[seccomp.ALIASES.get(arch, arch)]
    assert insns[-1][0] == seccomp.RET_K
    assert "syscalls" in seccomp.summary(arch)


def test_unknown_arch_is_a_clear_error() -> None:
    with pytest.raises(UnavailableError) as err:
        seccomp.build_filter("riscv64")
    assert "riscv64" in err.value.message and "x86_64" in err.value.message
    assert err.value.hint


def test_unsupported_arch_runs_without_the_layer_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(seccomp.platform, "machine", lambda: "riscv64")
    with seccomp.fds() as fds:
        args, shown = seccomp.bwrap_args(fds)
        assert (args, fds) == ([], [])
    assert shown.startswith("off (") and "riscv64" in shown
    check = seccomp.check()
    assert not check.ok and check.fix


@native
def test_bwrap_args_hand_over_the_program() -> None:
    with seccomp.fds() as fds:
        args, shown = seccomp.bwrap_args(fds)
        assert args == ["--seccomp", str(fds[0])]
        assert os.pread(fds[0], 1 << 16, 0) == seccomp.build_filter()
    assert shown == seccomp.summary() and shown.startswith("on (")
    with pytest.raises(OSError):
        os.fstat(fds[0])  # closed by the context manager


# -- loaded into a real process ----------------------------------------------------------


@native
def test_status_shows_the_filter() -> None:
    _, status = in_child(lambda: Path("/proc/self/status").read_text())
    assert re.search(r"^Seccomp:\s+2$", status, re.M), status
    _, status = in_child(lambda: Path("/proc/self/status").read_text(), filtered=False)
    assert not re.search(r"^Seccomp:\s+2$", status, re.M)


@native
def test_every_denied_syscall_fails_with_its_errno() -> None:
    # all arguments -1: harmless (EFAULT/EINVAL/EBADF) should a rule not match
    rules = [(r.name, r.nr(ARCH)) for r in seccomp.DENIED]
    sig, got = in_child(lambda: {name: call(nr, -1, -1, -1, -1, -1, -1) for name, nr in rules})
    assert sig is None
    assert got == {r.name: r.errno for r in seccomp.DENIED}
    assert got["io_uring_setup"] == errno.ENOSYS and got["bpf"] == errno.EPERM


@native
def test_denied_calls_succeed_without_the_filter() -> None:
    """Control: what the filter turns into EPERM works for an unfiltered process."""

    def probe() -> dict[str, int]:
        me = os.getpid()
        nr = {r.name: r.nr(ARCH) for r in seccomp.DENIED}
        return {"process_vm_readv": call(nr["process_vm_readv"], me, 0, 0, 0, 0, 0), "unshare": call(nr["unshare"], 0)}

    assert in_child(probe, filtered=False) == (None, {"process_vm_readv": 0, "unshare": 0})
    assert in_child(probe) == (None, {"process_vm_readv": errno.EPERM, "unshare": errno.EPERM})


def _ioctls() -> dict[str, int]:
    import fcntl
    import termios

    lib = libc()
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCGWINSZ, b"\0" * 8)  # an ordinary ioctl still works
    out = {}
    for name, request in [
        ("TIOCSTI", seccomp.TIOCSTI),
        ("TIOCSTI_high_bits", (0xDEAD << 32) | seccomp.TIOCSTI),  # the kernel only reads the low 32 bits
        ("TIOCLINUX", seccomp.TIOCLINUX),
        ("TIOCGWINSZ", termios.TIOCGWINSZ),
    ]:
        ch = ctypes.c_char(b"x")
        ctypes.set_errno(0)
        res = lib.syscall(ctypes.c_long(seccomp.IOCTL_NR[ARCH]), ctypes.c_long(slave), ctypes.c_ulong(request), ctypes.byref(ch))
        out[name] = ctypes.get_errno() if res == -1 else 0
    os.close(master)
    os.close(slave)
    return out


@native
def test_terminal_injection_ioctls_are_denied() -> None:
    sig, got = in_child(_ioctls)
    assert sig is None
    assert got["TIOCSTI"] == got["TIOCSTI_high_bits"] == got["TIOCLINUX"] == errno.EPERM
    assert got["TIOCGWINSZ"] == 0


@native
def test_normal_programs_keep_working() -> None:
    def work() -> list[Any]:
        box: list[int] = []
        t = threading.Thread(target=lambda: box.append(os.getpid()))
        t.start()
        t.join()
        a, b = os.pipe()
        os.write(b, b"ok")
        m = mmap.mmap(-1, 4096)
        m.write(b"mapped")
        sh = subprocess.run(["/bin/sh", "-c", "echo $((6*7)) | cat"], capture_output=True, text=True, check=True)
        py = subprocess.run(["python3", "-c", "import os; print(os.uname().sysname)"], capture_output=True, text=True)
        return [box == [os.getpid()], os.read(a, 2).decode(), m[:6].decode(), sh.stdout, py.stdout]

    assert in_child(work) == (None, [True, "ok", "mapped", "42\n", "Linux\n"])


@x86_only
def test_x32_syscalls_kill_the_process() -> None:
    getpid = 39
    assert in_child(lambda: call(getpid), filtered=False) == (None, 0)
    assert in_child(lambda: call(seccomp.X32_SYSCALL_BIT | getpid)) == (signal.SIGSYS, None)


def _int80_getpid() -> int:
    """getpid through the i386 ABI (``mov eax, 20; int 0x80; ret``), from an executable mapping."""
    code = bytes([0xB8, 20, 0, 0, 0, 0xCD, 0x80, 0xC3])
    m = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    m.write(code)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
    return int(ctypes.CFUNCTYPE(ctypes.c_int)(addr)())


@x86_only
def test_i386_syscalls_kill_the_process() -> None:
    sig, pid = in_child(_int80_getpid, filtered=False)
    if sig is not None:
        pytest.skip(f"this kernel has no i386 emulation (int 0x80 gives signal {sig})")
    assert pid > 0
    assert in_child(_int80_getpid) == (signal.SIGSYS, None)
