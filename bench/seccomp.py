"""What the seccomp filter costs: sandbox start and a cheap syscall, with and without it.

    .venv/bin/python bench/seccomp.py [--starts 40] [--calls 200000]

1. ``bwrap`` with hutch's hardening flags running ``true``, with and without
   ``--seccomp FD`` (interleaved; the probe's argument list, as the sandbox's uid when root).
2. ``getppid`` (allowed: it passes the whole filter) and ``ioctl(TIOCGWINSZ)`` (allowed,
   but the filter looks at its argument) in a forked child, with and without the filter
   loaded via prctl: nanoseconds per call.

Prints one JSON document. Standard library and hutch only.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hutch.config import Settings
from hutch.providers.local import LocalProvider, seccomp
from hutch.providers.local import bwrap as bw
from hutch.providers.local.host import memfd

PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def starts(n: int) -> dict[str, float]:
    home = Path(tempfile.mkdtemp(prefix="hutch-bench-seccomp-"))
    settings = Settings.load(home=home)
    found = bw.find_bwrap(home)
    drop = LocalProvider._drop(settings.uid_base if os.geteuid() == 0 else None, [])
    base = [found.path, *bw.HARDENING, "--ro-bind", "/usr", "/usr", *bw.root_links(), "--proc", "/proc", "--dev", "/dev"]
    samples: dict[str, list[float]] = {"without": [], "with": []}
    for _ in range(n):
        for side in samples:
            fds = [memfd("seccomp", seccomp.build_filter())] if side == "with" else []
            extra = ["--seccomp", str(fds[0])] if fds else []
            t = time.perf_counter()
            subprocess.run([*base, *extra, "--", "/usr/bin/true"], check=True, pass_fds=fds, preexec_fn=drop)
            samples[side].append((time.perf_counter() - t) * 1000)
            for fd in fds:
                os.close(fd)
    subprocess.run(["rm", "-rf", str(home)], check=False)
    return {f"bwrap_true_{side}_ms": round(statistics.median(v), 3) for side, v in samples.items()}


def per_call(calls: int, filtered: bool) -> dict[str, float]:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        libc = ctypes.CDLL(None, use_errno=True)
        if filtered:
            prog = seccomp.build_filter()
            buf = ctypes.create_string_buffer(prog, len(prog))
            fprog = SockFprog(len(prog) // 8, ctypes.addressof(buf))
            libc.prctl(PR_SET_NO_NEW_PRIVS, ctypes.c_ulong(1), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))
            libc.prctl(PR_SET_SECCOMP, ctypes.c_ulong(SECCOMP_MODE_FILTER), ctypes.byref(fprog), ctypes.c_ulong(0), 0)
        _master, slave = os.openpty()
        winsz = ctypes.create_string_buffer(8)
        getppid, ioctl = libc.getppid, libc.ioctl
        out = {}
        t = time.perf_counter_ns()
        for _ in range(calls):
            getppid()
        out["getppid_ns"] = (time.perf_counter_ns() - t) / calls
        t = time.perf_counter_ns()
        for _ in range(calls):
            ioctl(slave, 0x5413, winsz)  # TIOCGWINSZ
        out["ioctl_ns"] = (time.perf_counter_ns() - t) / calls
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        data = json.loads(f.read())
    os.waitpid(pid, 0)
    return {f"{k[:-3]}_{'with' if filtered else 'without'}_ns": round(v, 1) for k, v in data.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--starts", type=int, default=40)
    ap.add_argument("--calls", type=int, default=200_000)
    args = ap.parse_args()
    out: dict[str, object] = {"filter_instructions": len(seccomp.build_filter()) // 8, "summary": seccomp.summary()}
    out |= starts(args.starts)
    for filtered in (False, True, False, True):
        for k, v in per_call(args.calls, filtered).items():
            out[k] = min(v, float(out.get(k, v)))  # type: ignore[arg-type]
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
