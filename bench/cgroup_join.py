"""What joining a sandbox's cgroups costs the launcher, by how it joins (wall time of
``hold --launch ... -- /bin/true`` as root, dropping to a sandbox uid).

Writing a pid to ``cgroup.procs`` takes the kernel's global threadgroup lock, and taking it
waits out an RCU grace period unless another write took it moments ago. A loop of launches
back to back hides that (bench/launcher.py measures CPU that way); a create comes alone, so
here every launch waits ``--gap`` seconds first and gets cgroups of its own, as a create does.

- ``v1 cgroup.procs``: ``0`` written to each v1 cgroup's ``cgroup.procs`` (what launchers did
  before: the same lock as writing the pid)
- ``v1 tasks``: ``0`` written to each v1 ``tasks`` file (the writing thread: no global lock)
- ``v2 cgroup.procs`` and ``v2 clone3``: the same, on a cgroup of the v2 hierarchy (``--into``:
  bwrap's launcher starts it with ``clone3(CLONE_INTO_CGROUP)``)

The v1 rows need v1 controllers (memory, pids, cpu), the v2 rows a v2 hierarchy where root
may make a cgroup; a row this machine cannot measure is left out. Alternating order, medians.

    sudo python bench/cgroup_join.py [--rounds 30] [--gap 0.05]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from hutch.providers.local import cgroups

sys.path.insert(0, str(Path(__file__).resolve().parent))
from launcher import root_helper

UID = 600997
V1 = ("memory", "pids", "cpu")


def v1_dirs(name: str) -> list[Path] | None:
    mounts, _ = cgroups._parse_mounts(Path("/proc/self/mountinfo").read_text())
    own, _ = cgroups._parse_self(Path("/proc/self/cgroup").read_text())
    if not all(c in mounts for c in V1):
        return None
    return [mounts[c] / own.get(c, "/").lstrip("/") / name for c in V1]


def v2_dir(name: str) -> Path | None:
    _, mount = cgroups._parse_mounts(Path("/proc/self/mountinfo").read_text())
    _, own = cgroups._parse_self(Path("/proc/self/cgroup").read_text())
    return None if mount is None or own is None else mount / own.lstrip("/") / name


def timed(argv: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(argv, check=True)
    return (time.perf_counter() - t) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--gap", type=float, default=0.05, help="seconds of quiet before each launch (as between creates)")
    args = ap.parse_args()
    helper = root_helper("bench/cgroup_join.py")
    base = [helper, "--launch"]
    tail = [f"--user={UID}:{UID}", "--", "/bin/true"]

    sides: dict[str, Callable[[list[Path]], list[str]]] = {
        "/bin/true (no launcher)": lambda dirs: ["/bin/true"],
        "v1 cgroup.procs": lambda dirs: [*base, *(f"--procs={d / 'cgroup.procs'}" for d in dirs), *tail],
        "v1 tasks": lambda dirs: [*base, *(f"--procs={d / 'tasks'}" for d in dirs), *tail],
        "v2 cgroup.procs": lambda dirs: [*base, f"--procs={dirs[0] / 'cgroup.procs'}", *tail],
        "v2 clone3": lambda dirs: [*base, f"--into={dirs[0]}", *tail],
    }
    results: dict[str, list[float]] = {k: [] for k in sides}
    names = list(sides)
    for r in range(args.rounds):
        for side in names[r % len(names) :] + names[: r % len(names)]:
            name = f"bench-join-{uuid.uuid4().hex[:8]}"
            if side.startswith("v1"):
                dirs = v1_dirs(name)
            elif side.startswith("v2"):
                one = v2_dir(name)
                dirs = None if one is None else [one]
            else:
                dirs = []
            if dirs is None:
                continue
            try:
                for d in dirs:
                    d.mkdir()
            except OSError:
                continue
            try:
                time.sleep(args.gap)
                results[side].append(timed(sides[side](dirs)))
            finally:
                for d in dirs:
                    for _ in range(50):
                        try:
                            d.rmdir()
                            break
                        except OSError:
                            time.sleep(0.02)
    load = os.getloadavg()[0]
    print(f"{args.rounds} rounds, {args.gap * 1000:.0f} ms of quiet before each launch, load {load:.2f}; wall ms, medians")
    print()
    print("| how the launcher joins | median | p90 | n |")
    print("|---|---:|---:|---:|")
    for side, got in results.items():
        if got:
            got.sort()
            print(f"| {side} | {statistics.median(got):.2f} | {got[int(len(got) * 0.9) - 1]:.2f} | {len(got)} |")
        else:
            print(f"| {side} | not measured here | | 0 |")


if __name__ == "__main__":
    main()
