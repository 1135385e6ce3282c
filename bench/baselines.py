"""Baselines that need a little machinery: the memory of an idle bare bwrap.

Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def children_map() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            ppid = int(Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        out.setdefault(ppid, []).append(int(name))
    return out


def tree(root: int, kids: dict[int, list[int]]) -> list[int]:
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += kids.get(pid, [])
    return out


def pss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def idle_bwrap_pss(argv: list[str], count: int, preexec: Callable[[], None] | None) -> dict[str, Any]:
    """PSS of ``count`` idle hardened bwraps, each holding one ``sleep``: bwrap's own processes, and with the sleep.

    ``argv`` is the bare bwrap baseline's, ending in ``-- /usr/bin/true``; the command is
    swapped for ``sleep``. Every process is ended by its pid at the end.
    """
    if argv[-2:] != ["--", "/usr/bin/true"]:
        raise ValueError(f"unexpected baseline argv: {argv[-2:]}")
    cmd = [*argv[:-2], "--die-with-parent", "--", "/usr/bin/sleep", "3600"]
    procs: list[subprocess.Popen[bytes]] = []
    trees: list[list[int]] = []
    try:
        for _ in range(count):
            procs.append(subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, preexec_fn=preexec))
        deadline = time.monotonic() + 60
        while True:  # until each has its sleep (bwrap, its init in the new pid namespace, sleep)
            kids = children_map()
            trees = [tree(p.pid, kids) for p in procs]
            if all(len(t) >= 3 for t in trees) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        time.sleep(0.3)
        sleeps = {pid for t in trees for pid in t if Path(f"/proc/{pid}/comm").read_text().strip() == "sleep"}
        total = sum(pss_kib(pid) for t in trees for pid in t)
        bwrap_only = sum(pss_kib(pid) for t in trees for pid in t if pid not in sleeps)
        return {
            "count": count,
            "processes_each": sum(len(t) for t in trees) / count,
            "bwrap_pss_per_sandbox_mib": round(bwrap_only / count / 1024, 3),
            "with_sleep_pss_per_sandbox_mib": round(total / count / 1024, 3),
            "argv": cmd,
        }
    finally:
        for t in trees:
            for pid in reversed(t):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                p.kill()
            p.wait()
