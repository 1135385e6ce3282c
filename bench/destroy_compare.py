"""Destroy of a sandbox, two installs of hutch side by side: wall and CPU, interleaved.

    python bench/destroy_compare.py --before OLD/.venv/bin --after NEW/.venv/bin [--rounds 6] [--per 5]
        [--before-src OLD/src --after-src NEW/src] [--files N]

``--before-src``/``--after-src``: a tree's ``src`` put first on PYTHONPATH (two trees, one
install). ``--files N``: each sandbox's workspace gets N files of 1 KiB (in 10 directories)
before its destroy, written by a command in it (not timed).

Each install gets its own HUTCH_HOME and daemon (pool off). Every round, per install:
``--per`` sandboxes are created (not timed), then destroyed one at a time through the SDK,
each timed (wall) and charged the CPU of the daemon process (all its threads: the kill,
the waits, the removal run there; not its children's, whose CPU leaves the tree with the
sandbox), read from /proc after the daemon's tree has been still. Prints medians and every
sample as JSON (and means: the CPU counters tick at 10 ms); stops its daemons and removes its homes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu import TICK_MS, _stat_fields, settle

LOOP = """
import json, sys, time
from hutch.client import Client
c = Client(autostart=False)
for sid in sys.argv[1:]:
    sys.stdin.readline()  # the harness has measured the still tree
    t = time.perf_counter_ns(); c.destroy(sid); took = (time.perf_counter_ns() - t) / 1e6
    print(json.dumps(took), flush=True)
"""


def own_cpu_ms(pid: int) -> float:
    f = _stat_fields(pid)
    return (int(f[11]) + int(f[12])) * TICK_MS


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="the bin directory of the first install")
    ap.add_argument("--after", required=True, help="the bin directory of the second install")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--per", type=int, default=5)
    ap.add_argument("--before-src", help="PYTHONPATH of the first install's daemon and clients")
    ap.add_argument("--after-src", help="PYTHONPATH of the second's")
    ap.add_argument("--files", type=int, default=0, help="files written in each workspace before its destroy")
    args = ap.parse_args()
    installs = {"before": args.before, "after": args.after}
    srcs = {"before": args.before_src, "after": args.after_src}
    tmp = tempfile.mkdtemp(prefix="hutch-destroy-")
    os.chmod(tmp, 0o711)  # as root, sandbox uids pass through to the state dirs
    envs: dict[str, dict[str, str]] = {}
    daemons: dict[str, int] = {}
    samples: dict[str, list[float]] = {f"{k}_{v}": [] for v in installs for k in ("wall", "cpu")}
    try:
        for v, bin_dir in installs.items():
            envs[v] = dict(os.environ) | {"HUTCH_HOME": os.path.join(tmp, v), "HUTCH_POOL_SIZE": "0"}
            if srcs[v]:
                envs[v]["PYTHONPATH"] = str(Path(srcs[v]).resolve())
            subprocess.run([f"{bin_dir}/hutch", "daemon", "start"], env=envs[v], check=True, capture_output=True)
            daemons[v] = int((Path(tmp) / v / "hutchd.pid").read_text().split()[0])
        for i in range(args.rounds):
            for v, bin_dir in installs.items():
                create = [f"{bin_dir}/hutch", "create"]
                made = [
                    subprocess.run(create, env=envs[v], check=True, capture_output=True, text=True).stdout.strip()
                    for _ in range(args.per)
                ]
                if args.files:
                    each = f"for f in $(seq {args.files // 10}); do head -c 1024 /dev/zero > t/$d/$f; done"
                    fill = f"for d in $(seq 10); do mkdir -p t/$d; {each}; done"
                    for sid in made:
                        fill_argv = [f"{bin_dir}/hutch", "exec", sid, "--", "sh", "-c", fill]
                        subprocess.run(fill_argv, env=envs[v], check=True, capture_output=True)
                argv = [f"{bin_dir}/python", "-c", LOOP, *made]
                loop = subprocess.Popen(argv, env=envs[v], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                assert loop.stdin is not None and loop.stdout is not None
                for _ in made:
                    settle(daemons[v])
                    c0 = own_cpu_ms(daemons[v])
                    loop.stdin.write("\n")
                    loop.stdin.flush()
                    samples[f"wall_{v}"].append(json.loads(loop.stdout.readline()))
                    settle(daemons[v])
                    samples[f"cpu_{v}"].append(own_cpu_ms(daemons[v]) - c0)
                loop.stdin.close()
                if loop.wait() != 0:
                    raise RuntimeError(f"the destroy loop of {v} failed")
            print(f"round {i + 1}/{args.rounds}, load {os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
    finally:
        for v, bin_dir in installs.items():
            if v in envs:
                subprocess.run([f"{bin_dir}/hutch", "destroy", "--all"], env=envs[v], capture_output=True, check=False)
                subprocess.run([f"{bin_dir}/hutch", "daemon", "stop"], env=envs[v], capture_output=True, check=False)
        subprocess.run(["rm", "-rf", tmp], check=False)
    med = {k: round(statistics.median(x), 2) for k, x in samples.items()}
    mean = {k: round(statistics.fmean(x), 2) for k, x in samples.items()}  # CPU ticks are 10 ms: the mean resolves them
    print(json.dumps({"medians_ms": med, "means_ms": mean, "loadavg_end": os.getloadavg(), "samples_ms": samples}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
