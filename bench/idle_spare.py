"""Host memory of idle sandboxes with and without their spare supervisor (setting spare_idle).

    python bench/idle_spare.py [--count 20]

Two daemons of this install, each in its own HUTCH_HOME (pool off): one keeps every spare
(``spare_idle`` 0), one lets a spare leave after 1 s. Each gets ``--count`` sandboxes with
one exec of ``true`` (so every agent has served a run), then the harness waits until the
second daemon's sandboxes are down to their agent and measures the summed PSS of every
process in each daemon's sandboxes' cgroups (/proc/PID/smaps_rollup). Destroys everything.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def sandbox_pss(ids: set[str]) -> tuple[int, int]:
    """Summed PSS (KiB) and count of the processes whose cgroup names one of ``ids``."""
    total = count = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if not any(sid in Path(f"/proc/{name}/cgroup").read_text() for sid in ids):
                continue
            rollup = Path(f"/proc/{name}/smaps_rollup").read_text()
        except OSError:
            continue
        count += 1
        total += next(int(line.split()[1]) for line in rollup.splitlines() if line.startswith("Pss:"))
    return total, count


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=20)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="hutch-idle-spare-")
    os.chmod(tmp, 0o711)
    hutch = [sys.executable, "-m", "hutch"]
    envs = {
        name: dict(os.environ) | {"HUTCH_HOME": os.path.join(tmp, name), "HUTCH_POOL_SIZE": "0", "HUTCH_SPARE_IDLE": idle}
        for name, idle in (("kept", "0"), ("leaves", "1"))
    }
    made: dict[str, set[str]] = {name: set() for name in envs}
    try:
        for name, env in envs.items():
            for _ in range(args.count):
                sid = subprocess.run([*hutch, "create"], env=env, check=True, capture_output=True, text=True).stdout.strip()
                subprocess.run([*hutch, "exec", sid, "--", "true"], env=env, check=True, capture_output=True)
                made[name].add(sid)
        deadline = time.monotonic() + 120
        while sandbox_pss(made["leaves"])[1] > 3 * args.count and time.monotonic() < deadline:  # the two bwraps + the agent
            time.sleep(0.5)
        out = {}
        for name, ids in made.items():
            kib, procs = sandbox_pss(ids)
            out[name] = {"pss_mib_per_sandbox": round(kib / 1024 / len(ids), 2), "processes_per_sandbox": procs / len(ids)}
        print(json.dumps({"count": args.count, "result": out, "loadavg": os.getloadavg()}, indent=1))
    finally:
        for env in envs.values():
            subprocess.run([*hutch, "destroy", "--all"], env=env, capture_output=True, check=False)
            subprocess.run([*hutch, "daemon", "stop"], env=env, capture_output=True, check=False)
        subprocess.run(["rm", "-rf", tmp], check=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
