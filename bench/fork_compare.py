"""Fork of one child, two installs of hutch side by side: wall and daemon CPU, interleaved.

    python bench/fork_compare.py --before OLD/.venv/bin --after NEW/.venv/bin [--rounds 10] [--pool 2]

Each install gets its own HUTCH_HOME and daemon with a pool of ``--pool`` members (0: every
child is made cold) and two source sandboxes: one with an empty workspace, one with a small
one (10 files of 1 KiB). Every round, for each source, per install (the order alternating
round by round): wait until the pool is full and the daemon's process tree has been still,
then one ``fork`` through the client library, timed (wall, in the calling process) and
charged the CPU the daemon process burnt during the call (its own, and that of the helpers
it reaped meanwhile: the tar jails of the copy). Read at once when the call returns: the
pool's refill starts only after a quiet moment, so it is not in the sample. The child is
destroyed after the sample. Prints medians, means (the CPU counters tick at 10 ms: the mean
resolves them), the copy's own time (``copy_ms``), how each child was made (pool or cold;
the copy method) and every sample as JSON; stops its daemons and removes its homes.
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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu import TICK_MS, _stat_fields, settle

# One line in, one JSON line out: "wait" (until the pool is full), "fork SBX", "destroy SBX".
LOOP = """
import json, sys, time
from hutch.client import Client
c = Client(autostart=False)
for line in sys.stdin:
    op, *arg = line.split()
    if op == "wait":
        end = time.monotonic() + 120
        while time.monotonic() < end:
            pools = c.pool_status()["pools"]
            if all(p["ready"] >= p["target"] and p["starting"] == 0 for p in pools):
                break
            time.sleep(0.05)
        out = {}
    elif op == "fork":
        t = time.perf_counter_ns(); got = c.fork(arg[0], 1); took = (time.perf_counter_ns() - t) / 1e6
        child = got["children"][0]
        if not child["sandbox"]:
            raise SystemExit(json.dumps(child))
        out = {"wall_ms": took, "copy_ms": child["copy_ms"], "method": child["method"], "child": child["sandbox"]}
    else:
        created = [e for e in c.events(arg[0]) if e["type"] == "sandbox_created"]
        c.destroy(arg[0])
        out = {"pooled": bool(created and created[0]["data"].get("pool"))}
    print(json.dumps(out), flush=True)
"""
SMALL = "for i in 0 1 2 3 4 5 6 7 8 9; do head -c 1024 /dev/urandom > f$i; done"


def daemon_cpu_ms(pid: int) -> float:
    """The daemon process's own CPU and that of the children it has reaped."""
    f = _stat_fields(pid)
    return sum(int(x) for x in f[11:15]) * TICK_MS


class Install:
    def __init__(self, name: str, bin_dir: str, home: Path, pool: int) -> None:
        self.name, self.bin = name, bin_dir
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("HUTCH_")}
        self.env |= {"HUTCH_HOME": str(home), "HUTCH_POOL_SIZE": str(pool)}
        subprocess.run([f"{bin_dir}/hutch", "daemon", "start"], env=self.env, check=True, capture_output=True)
        self.daemon = int((home / "hutchd.pid").read_text().split()[0])
        self.sources = {"empty": self.hutch("create"), "small": self.hutch("create")}
        self.hutch("exec", self.sources["small"], "--", "sh", "-c", SMALL)
        argv = [f"{bin_dir}/python", "-c", LOOP]
        self.loop = subprocess.Popen(argv, env=self.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def hutch(self, *args: str) -> str:
        return subprocess.run(
            [f"{self.bin}/hutch", *args], env=self.env, check=True, capture_output=True, text=True
        ).stdout.strip()

    def ask(self, line: str) -> dict[str, Any]:
        assert self.loop.stdin is not None and self.loop.stdout is not None
        self.loop.stdin.write(line + "\n")
        self.loop.stdin.flush()
        answer = self.loop.stdout.readline()
        if not answer:
            raise RuntimeError(f"the fork loop of {self.name} ended (exit {self.loop.wait()})")
        out: dict[str, Any] = json.loads(answer)
        return out

    def sample(self, kind: str) -> dict[str, Any]:
        self.ask("wait")
        settle(self.daemon)
        c0 = daemon_cpu_ms(self.daemon)
        out = self.ask(f"fork {self.sources[kind]}")
        out["cpu_ms"] = daemon_cpu_ms(self.daemon) - c0
        out |= self.ask(f"destroy {out.pop('child')}")
        return out

    def stop(self) -> None:
        if self.loop.stdin is not None:
            self.loop.stdin.close()
        self.loop.wait(30)
        subprocess.run([f"{self.bin}/hutch", "destroy", "--all"], env=self.env, capture_output=True, check=False)
        subprocess.run([f"{self.bin}/hutch", "daemon", "stop"], env=self.env, capture_output=True, check=False)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="the bin directory of the first install")
    ap.add_argument("--after", required=True, help="the bin directory of the second install")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--pool", type=int, default=2, help="each daemon's pool size (0: every child is made cold)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="hutch-forkcmp-"))
    os.chmod(tmp, 0o711)  # as root, sandbox uids pass through to the state dirs
    installs: list[Install] = []
    samples: dict[str, list[dict[str, Any]]] = {}
    load0 = os.getloadavg()
    try:
        for name, bin_dir in (("before", args.before), ("after", args.after)):
            installs.append(Install(name, bin_dir, tmp / name, args.pool))
        for i in range(args.rounds):
            for kind in ("empty", "small"):
                for inst in installs if i % 2 == 0 else installs[::-1]:
                    samples.setdefault(f"{kind}_{inst.name}", []).append(inst.sample(kind))
            print(f"round {i + 1}/{args.rounds}, load {os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
    finally:
        for inst in installs:
            inst.stop()
        subprocess.run(["rm", "-rf", str(tmp)], check=False)
    summary: dict[str, Any] = {}
    for key, rows in samples.items():
        summary[key] = {
            "wall_median_ms": round(statistics.median(r["wall_ms"] for r in rows), 1),
            "cpu_median_ms": round(statistics.median(r["cpu_ms"] for r in rows), 1),
            "cpu_mean_ms": round(statistics.fmean(r["cpu_ms"] for r in rows), 1),
            "copy_median_ms": round(statistics.median(r["copy_ms"] for r in rows), 1),
            "pooled": sum(1 for r in rows if r["pooled"]),
            "methods": sorted({r["method"] for r in rows}),
            "n": len(rows),
        }
    out = {"summary": summary, "pool": args.pool, "cpus": os.cpu_count(), "loadavg_start": load0}
    print(json.dumps(out | {"loadavg_end": os.getloadavg(), "samples": samples}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
