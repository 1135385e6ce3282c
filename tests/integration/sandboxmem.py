"""What a sandbox's processes hold in memory, read from the host as root: the tests that a
secret's value never reaches a sandbox scan every process of its cgroup for it."""

from __future__ import annotations

import contextlib
from pathlib import Path


def sandbox_pids(home: Path, sandbox_id: str) -> list[int]:
    from hutch.providers.local import cgroups

    layout = cgroups.detect()
    parents = [*layout.v1.values(), *([layout.v2 / cgroups.GROUP] if layout.v2 else [])]
    pids: set[int] = set()
    for parent in parents:
        procs = parent / sandbox_id / "cgroup.procs"
        if procs.exists():
            pids |= {int(p) for p in procs.read_text().split()}
    return sorted(pids)


def memory_holds(pid: int, needle: bytes) -> bool:
    """Does any readable mapping of ``pid`` hold ``needle``? (read as root, from the host)"""
    found = False
    with contextlib.suppress(FileNotFoundError, ProcessLookupError):
        maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
        with open(f"/proc/{pid}/mem", "rb", 0) as mem:
            for line in maps:
                span, perms = line.split()[:2]
                if "r" not in perms:
                    continue
                start, end = (int(x, 16) for x in span.split("-"))
                if end - start > 1 << 30:
                    continue
                try:
                    mem.seek(start)
                    if needle in mem.read(end - start):
                        found = True
                except (OSError, ValueError, OverflowError):
                    continue
    return found


def command_name(pid: int) -> str:
    """The process's name, or "" once it has ended (a process of the sandbox may end while it is looked at)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except (FileNotFoundError, ProcessLookupError):
        return ""
