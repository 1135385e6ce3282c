"""CPU of host uid allocation on a crowded machine (root only; providers/local/uids.py).

    python bench/uid_registry.py [--procs 2000] [--entries 1000] [--concurrent 50]

Plants a registry of ``--entries`` entries in a temp dir (half held by another state
directory's sandbox directories, half stale: a dead daemon, no directory), starts
``--procs`` sleeping processes (half of them as uids of the pool, like another daemon's
sandboxes), then measures one allocation at a time (CPU and wall of this process) and
``--concurrent`` allocations from as many threads at once (one daemon's concurrent
creates), with the number of walks of /proc and of batches they took. Everything it starts
is killed, and the temp dir removed, also after an error.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from hutch.providers.local.uids import UidRegistry

BASE = 3_300_000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--procs", type=int, default=2000)
    ap.add_argument("--entries", type=int, default=1000)
    ap.add_argument("--concurrent", type=int, default=50)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="hutch-uid-bench-"))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for i in range(args.procs):
            cmd = ["sleep", "600"]
            if i % 2 == 0:
                cmd = ["setpriv", f"--reuid={BASE + 1 + i // 2 % args.entries}", "--clear-groups", *cmd]
            procs.append(subprocess.Popen(cmd))
        entries = []
        for i in range(args.entries):
            d = tmp / "other" / f"sbx_{i}"
            if i % 2 == 0:
                d.mkdir(parents=True)
            entries.append({"start": BASE + 1 + i, "count": 1, "home": str(tmp / "other"), "sandbox": f"sbx_{i}",
                            "dir": str(d), "pid": 1 << 22, "pid_start": 5, "at": 0.0})  # fmt: skip
        (tmp / "uids").mkdir()
        (tmp / "uids" / "registry.json").write_text(json.dumps({"version": 1, "entries": entries}))
        reg = UidRegistry(tmp / "uids", tmp / "a", BASE)
        time.sleep(1)  # the setprivs have become their uids

        def one(name: str) -> None:
            d = tmp / "a" / name
            d.mkdir(parents=True)
            reg.allocate(name, d)

        cpu, wall = [], []
        for k in range(7):
            c, w = time.process_time(), time.monotonic()
            one(f"solo_{k}")
            cpu.append(1000 * (time.process_time() - c))
            wall.append(1000 * (time.monotonic() - w))
        walks = reg.walks if hasattr(reg, "walks") else None
        c, w = time.process_time(), time.monotonic()
        with ThreadPoolExecutor(args.concurrent) as pool:
            list(pool.map(one, [f"many_{k}" for k in range(args.concurrent)]))
        ccpu, cwall = 1000 * (time.process_time() - c), 1000 * (time.monotonic() - w)
        nproc = sum(1 for p in Path("/proc").iterdir() if p.name.isdigit())
        print(f"processes on the machine: {nproc}; registry entries planted: {args.entries}")
        print(f"one allocation: median CPU {statistics.median(cpu):.1f} ms, wall {statistics.median(wall):.1f} ms")
        print(f"{args.concurrent} concurrent allocations: CPU {ccpu:.0f} ms, wall {cwall:.0f} ms", end="")
        if walks is not None:
            print(f", {reg.walks - walks} walks of /proc in {reg.batches - 7} batches")
        print()
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
