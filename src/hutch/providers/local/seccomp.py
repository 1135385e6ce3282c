"""The sandbox's seccomp filter, compiled to classic BPF in pure Python.

bwrap loads it (``--seccomp FD``: an array of ``struct sock_filter``) right before it
executes the sandbox's first process, after ``PR_SET_NO_NEW_PRIVS``, so it applies to
everything in the sandbox (the agent included) and cannot be removed from inside.

The program:

1. kills the process (``SECCOMP_RET_KILL_PROCESS``) when ``seccomp_data.arch`` is not
   the host's native 64-bit ABI (i386 via ``int 0x80`` on x86_64, arm32 on aarch64), and
   on x86_64 when the syscall number has the x32 bit (``0x40000000``) set;
2. denies ``ioctl`` whose request, compared on its low 32 bits as the kernel does, is
   ``TIOCSTI`` or ``TIOCLINUX``;
3. denies each syscall of :data:`DENIED` with its errno (``ENOSYS`` for io_uring so that
   programs fall back to plain reads and writes, ``EPERM`` for the rest);
4. allows everything else.

The reason for each entry is in docs/security.md ("Seccomp filter").
"""

from __future__ import annotations

import contextlib
import errno
import os
import platform
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache

from hutch.errors import UnavailableError
from hutch.provider import CheckResult
from hutch.providers.local.host import memfd

# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]
OFF_NR = 0
OFF_ARCH = 4


def off_arg_low(i: int) -> int:
    """Offset of the low 32 bits of ``args[i]`` (both supported ABIs are little-endian)."""
    return 16 + 8 * i


AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}
X32_SYSCALL_BIT = 0x40000000

RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000

# classic BPF opcodes
LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K (unsigned)
RET_K = 0x06  # BPF_RET | BPF_K

KERNEL_HINT = "this kernel cannot load seccomp filters: use a kernel built with CONFIG_SECCOMP_FILTER"
TIOCSTI = 0x5412
TIOCLINUX = 0x541C
DENIED_IOCTLS = {"TIOCSTI": TIOCSTI, "TIOCLINUX": TIOCLINUX}
IOCTL_NR = {"x86_64": 16, "aarch64": 29}


@dataclass(frozen=True)
class Rule:
    name: str
    x86_64: int
    aarch64: int
    errno: int = errno.EPERM

    def nr(self, arch: str) -> int:
        return int(getattr(self, arch))


E = errno.EPERM
DENIED: tuple[Rule, ...] = (
    # io_uring: its own async path around other filters; ENOSYS so runtimes fall back
    Rule("io_uring_setup", 425, 425, errno.ENOSYS),
    Rule("io_uring_enter", 426, 426, errno.ENOSYS),
    Rule("io_uring_register", 427, 427, errno.ENOSYS),
    # kernel attack surface with a long record of exploits
    Rule("bpf", 321, 280, E),
    Rule("perf_event_open", 298, 241, E),
    Rule("userfaultfd", 323, 282, E),
    Rule("keyctl", 250, 219, E),
    Rule("add_key", 248, 217, E),
    Rule("request_key", 249, 218, E),
    # reading and writing other processes' memory and descriptors
    Rule("ptrace", 101, 117, E),
    Rule("process_vm_readv", 310, 270, E),
    Rule("process_vm_writev", 311, 271, E),
    Rule("pidfd_getfd", 438, 438, E),
    # the kernel itself (also need capabilities the sandbox does not have)
    Rule("kexec_load", 246, 104, E),
    Rule("kexec_file_load", 320, 294, E),
    Rule("init_module", 175, 105, E),
    Rule("finit_module", 313, 273, E),
    Rule("delete_module", 176, 106, E),
    Rule("open_by_handle_at", 304, 265, E),
    Rule("acct", 163, 89, E),
    Rule("swapon", 167, 224, E),
    Rule("swapoff", 168, 225, E),
    Rule("reboot", 169, 142, E),
    Rule("syslog", 103, 116, E),
    # namespaces and mounts (already refused: --disable-userns, no capabilities)
    Rule("unshare", 272, 97, E),
    Rule("setns", 308, 268, E),
    Rule("mount", 165, 40, E),
    Rule("umount2", 166, 39, E),
    Rule("pivot_root", 155, 41, E),
    Rule("open_tree", 428, 428, E),
    Rule("move_mount", 429, 429, E),
    Rule("fsopen", 430, 430, E),
    Rule("fsconfig", 431, 431, E),
    Rule("fsmount", 432, 432, E),
    Rule("fspick", 433, 433, E),
    Rule("mount_setattr", 442, 442, E),
)


def native_arch(arch: str | None = None) -> str:
    """The filter's architecture name for ``arch`` (default: this machine's); raises when unsupported."""
    name = (arch or platform.machine()).lower()
    name = ALIASES.get(name, name)
    if name not in AUDIT_ARCH:
        raise UnavailableError(
            f"no seccomp filter for the {name} architecture (supported: {', '.join(AUDIT_ARCH)})",
            hint="sandboxes run without the seccomp layer here; namespaces, capabilities and limits still apply",
        )
    return name


class _Asm:
    """A tiny classic-BPF assembler with forward labels."""

    def __init__(self) -> None:
        self.code: list[tuple[int, int | str, int | str, int]] = []
        self.labels: dict[str, int] = {}

    def load(self, offset: int) -> None:
        self.code.append((LD_W_ABS, 0, 0, offset))

    def jump(self, op: int, k: int, jt: int | str = 0, jf: int | str = 0) -> None:
        self.code.append((op, jt, jf, k))

    def ret(self, value: int) -> None:
        self.code.append((RET_K, 0, 0, value))

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def assemble(self) -> bytes:
        out = bytearray()
        for i, (op, jt, jf, k) in enumerate(self.code):
            offsets = [t if isinstance(t, int) else self.labels[t] - i - 1 for t in (jt, jf)]
            if not all(0 <= o <= 255 for o in offsets):
                raise ValueError(f"jump out of range at instruction {i}: {offsets}")
            out += struct.pack("=HBBI", op, offsets[0], offsets[1], k)
        return bytes(out)


def build_filter(arch: str | None = None) -> bytes:
    """The program bytes (``struct sock_filter[]``) for bwrap's ``--seccomp FD``."""
    return _build(native_arch(arch))


@cache
def _build(arch: str) -> bytes:
    a = _Asm()
    a.load(OFF_ARCH)
    a.jump(JEQ_K, AUDIT_ARCH[arch], 0, "kill")
    a.load(OFF_NR)
    if arch == "x86_64":
        a.jump(JGE_K, X32_SYSCALL_BIT, "kill", 0)
    a.jump(JEQ_K, IOCTL_NR[arch], "ioctl", 0)  # first: its outcome depends on an argument
    for rule in DENIED:
        a.jump(JEQ_K, rule.nr(arch), f"errno{rule.errno}", 0)
    a.ret(RET_ALLOW)
    a.label("ioctl")
    a.load(off_arg_low(1))
    for request in DENIED_IOCTLS.values():
        a.jump(JEQ_K, request, f"errno{errno.EPERM}", 0)
    a.ret(RET_ALLOW)
    a.label("kill")
    a.ret(RET_KILL_PROCESS)
    for code in sorted({r.errno for r in DENIED} | {errno.EPERM}):
        a.label(f"errno{code}")
        a.ret(RET_ERRNO | code)
    return a.assemble()


def summary(arch: str | None = None) -> str:
    """What ``hutch get`` shows as the sandbox's ``seccomp`` enforcement."""
    return f"on ({len(DENIED)} syscalls, {len(DENIED_IOCTLS)} ioctls and non-native ABIs denied; {native_arch(arch)})"


def bwrap_args(fds: list[int]) -> tuple[list[str], str]:
    """bwrap's ``--seccomp FD`` (the fd is appended to ``fds``), and the enforcement summary.

    On an architecture without a filter the sandbox runs without this layer (``[]`` and
    ``off (...)``), which ``hutch doctor`` reports as a failed check.
    """
    try:
        program = build_filter()
    except UnavailableError as exc:
        return [], f"off ({exc.message})"
    fd = memfd("seccomp", program)
    fds.append(fd)
    return ["--seccomp", str(fd)], summary()


@contextlib.contextmanager
def fds() -> Iterator[list[int]]:
    """A list for :func:`bwrap_args` to fill; its descriptors are closed on exit."""
    opened: list[int] = []
    try:
        yield opened
    finally:
        for fd in opened:
            os.close(fd)


def check() -> CheckResult:
    try:
        return CheckResult("seccomp", True, summary())
    except UnavailableError as exc:
        return CheckResult("seccomp", False, exc.message, exc.hint)
