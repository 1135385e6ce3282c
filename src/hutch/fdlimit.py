"""The daemon's open-file limit: raised to the hard limit at start, and what doctor says of it.

Each live sandbox holds a few descriptors in the daemon (its bwrap's pidfd and pipes, the
egress proxy's listener when it has a network) and each request in flight a few more, so the
usual soft limit of 1024 would stop a daemon holding some hundreds of idle sandboxes. The
daemon raises its soft limit to the hard limit when it starts (no privilege needed); the
processes it starts, sandboxes included, inherit the raised limit.
"""

from __future__ import annotations

import os
import resource

PER_SANDBOX = 8  # descriptors the daemon may hold for one sandbox (measured: 2-4 idle), with room
WANT = 1000 * PER_SANDBOX  # enough for 1000 idle sandboxes
STARTED_WITH: list[int] = []  # the soft limit before raise() (for doctor)


def raise_soft() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit; (before, after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    STARTED_WITH[:] = [soft]
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft == resource.RLIM_INFINITY or (target != resource.RLIM_INFINITY and soft >= target):
        return soft, soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):  # a hard limit above the kernel's nr_open: keep what we have
        return soft, soft
    return soft, target


def in_use() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return -1


def report() -> str:
    """doctor's line: the daemon's soft limit, how many are open, and about how many idle sandboxes fit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    unlimited = soft == resource.RLIM_INFINITY
    detail = f"soft limit {'unlimited' if unlimited else soft} (hard {'unlimited' if hard == resource.RLIM_INFINITY else hard})"
    detail += f", {in_use()} open"
    if STARTED_WITH and STARTED_WITH[0] != soft:
        detail += f"; raised from {STARTED_WITH[0]} at start"
    if not unlimited and soft < WANT:
        detail += f"; room for about {soft // PER_SANDBOX} idle sandboxes; raise the hard limit for more (ulimit -Hn)"
    return detail
