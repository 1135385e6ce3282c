"""What a sandbox's launcher costs per start: the idle helper's ``--launch`` against the
sh + setpriv fallback (host.launcher), each joining a cgroup of its own and dropping to a
sandbox uid before it runs ``/bin/true``; plain ``/bin/true`` as the baseline. Root only
(it makes a cgroup and changes uid). Alternating order, medians of wall time, mean CPU.

    python bench/launcher.py [--rounds 300]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from hutch.providers.local import cgroups, hold
from hutch.providers.local.host import launcher

UID = 600998


def root_helper(script: str) -> str:
    """The idle helper, built for this run; ``script`` runs as root (it makes cgroups and drops to a sandbox uid)."""
    if os.geteuid() != 0:
        raise SystemExit(f"{script} runs as root (it makes cgroups and drops to a sandbox uid)")
    helper = hold.prepare(Path(tempfile.mkdtemp(prefix="hutch-launch-"))).path
    if helper is None:
        raise SystemExit("the idle helper could not be built here (no C compiler)")
    return helper


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=300)
    args = ap.parse_args()
    helper = root_helper("bench/launcher.py")
    group, _ = cgroups.create(cgroups.detect(), f"bench-launch-{uuid.uuid4().hex[:8]}", 256 << 20, 64, None)
    procs = group.procs_files()
    fallback = launcher(UID, procs, {})
    assert fallback is not None
    sides = {"/bin/true": [], "native --launch": launcher(UID, procs, {}, helper), "sh + setpriv": fallback}
    wall: dict[str, list[float]] = {k: [] for k in sides}
    cpu = dict.fromkeys(sides, 0.0)
    try:
        for i in range(args.rounds):
            order = list(sides.items()) if i % 2 else list(reversed(sides.items()))
            for name, prefix in order:
                r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
                subprocess.run([*(prefix or []), "/bin/true"], check=True)
                t1, r1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
                wall[name].append((t1 - t0) * 1000)
                cpu[name] += (r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime) * 1000
    finally:
        group.kill_all()
        group.remove()
    print(f"{args.rounds} rounds, load {os.getloadavg()[0]:.1f}\n")
    print("| launcher | wall p50 (ms) | CPU mean (ms) |\n|---|---:|---:|")
    for name in sides:
        print(f"| {name} | {statistics.median(wall[name]):.2f} | {cpu[name] / args.rounds:.2f} |")


if __name__ == "__main__":
    main()
