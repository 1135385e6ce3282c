"""Pause and resume a local sandbox: the cgroup freezer (v1 ``freezer.state`` or v2
``cgroup.freeze``) where the sandbox has one, else SIGSTOP/SIGCONT of its process tree.

The freezer stops every task atomically and a frozen task cannot notice it; the signal
fallback is racy against a fork in flight (it sweeps the tree until nothing new appears)
and visible to the workload (a stopped child's parent may see it with ``waitpid``).
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path
from typing import Any

from hutch.providers.local.cgroups import SandboxCgroup
from hutch.providers.local.host import start_time

SWEEPS = 5


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            data = (entry / "stat").read_bytes()
        except OSError:
            continue
        ppid = int(data[data.rindex(b")") + 2 :].split()[1])
        tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def tree(root: int) -> list[int]:
    """``root`` and all its descendants (host pids)."""
    children = _children()
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def _signal_tree(data: dict[str, Any], sig: int) -> None:
    root = data.get("bwrap_pid") or data.get("init_pid")
    if not root:
        return
    if start_time(int(data["init_pid"])) != data.get("init_start"):
        return  # gone (or the pid was reused): nothing of ours to signal
    seen: set[int] = set()
    for _ in range(SWEEPS):  # a process forked while we swept is caught by the next sweep
        new = [p for p in tree(int(root)) if p not in seen]
        if not new:
            return
        for pid in new:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        seen.update(new)


def pause(data: dict[str, Any]) -> str:
    cg = SandboxCgroup([Path(d) for d in data.get("cgroups", [])], v2=False)
    if cg.set_frozen(True):
        return "cgroup freezer"
    _signal_tree(data, signal.SIGSTOP)
    return "SIGSTOP"


def resume(data: dict[str, Any], method: str | None) -> None:
    cg = SandboxCgroup([Path(d) for d in data.get("cgroups", [])], v2=False)
    if method != "SIGSTOP" and cg.set_frozen(False):
        return
    _signal_tree(data, signal.SIGCONT)
