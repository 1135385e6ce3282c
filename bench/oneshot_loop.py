"""``hutch run -- true`` back to back, as a script runs them, with the default pool (size 2).

    python bench/oneshot_loop.py --before OLD/src [--blocks 3] [--runs 20] [--pool-size N]

``--pool-size 0``: both daemons without a pool, every run cold.

Each tree (this one, and ``--before``: another checkout's ``src``) has a daemon of its own
(a temporary ``HUTCH_HOME`` each, the settings' defaults). Blocks of ``--runs`` whole
``hutch run -- true`` processes, one after another with nothing between them, alternate
between the two trees (the order swapped every block, 1 s of rest between blocks); three
warm-up runs each first. Prints the median, p10 and p90 wall time and how many of the runs
took a pooled sandbox (their ``sandbox_created`` events say so). Standard library and
hutch only; prints Markdown.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

POOL: dict[str, str] = {}  # HUTCH_POOL_SIZE, with --pool-size


def _env(src: Path, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HUTCH_")}
    return env | {"PYTHONPATH": str(src), "HUTCH_HOME": str(home)} | POOL


def _run(src: Path, home: Path) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "hutch", "run", "--", "true"], env=_env(src, home), capture_output=True)
    took = (time.perf_counter() - t0) * 1e3
    if proc.returncode != 0:
        raise SystemExit(f"{src}: hutch run failed: {proc.stderr.decode(errors='replace').strip()}")
    return took


def _pooled(src: Path, home: Path, since: float) -> tuple[int, int]:
    argv = [sys.executable, "-m", "hutch", "events", "--all", "--type", "sandbox_created", "--since", f"{since:.3f}"]
    proc = subprocess.run([*argv, "--limit", "100000"], env=_env(src, home), capture_output=True, text=True, check=True)
    made = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]  # NDJSON when not a terminal
    return sum(1 for e in made if e["data"].get("pool")), len(made)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=Path, required=True, help="another tree's src directory")
    ap.add_argument("--blocks", type=int, default=3)
    ap.add_argument("--runs", type=int, default=20, help="runs per block")
    ap.add_argument("--pool-size", type=int, help="the daemons' pool_size (default: the settings' default)")
    args = ap.parse_args()
    if args.pool_size is not None:
        POOL["HUTCH_POOL_SIZE"] = str(args.pool_size)
    here = Path(__file__).resolve().parents[1] / "src"
    tmp = Path(tempfile.mkdtemp(prefix="hutch-oneshot-loop-"))
    tmp.chmod(0o755)  # a root daemon's sandboxes run as their own uids: they pass through it
    sides = {"before": (args.before.resolve(), tmp / "before"), "this tree": (here, tmp / "after")}
    times: dict[str, list[float]] = {name: [] for name in sides}
    counts: dict[str, tuple[int, int]] = {}
    try:
        for src, home in sides.values():
            home.mkdir()
            for _ in range(3):
                _run(src, home)
        time.sleep(2.0)  # both pools full again
        since = time.time()
        for b in range(args.blocks):
            for name in list(sides) if b % 2 == 0 else list(sides)[::-1]:
                times[name] += [_run(*sides[name]) for _ in range(args.runs)]
                time.sleep(1.0)
        for name, (src, home) in sides.items():
            counts[name] = _pooled(src, home, since)
    finally:
        for src, home in sides.values():
            subprocess.run([sys.executable, "-m", "hutch", "daemon", "stop"], env=_env(src, home), capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    pool = f"pool_size {args.pool_size}" if args.pool_size is not None else "the default pool"
    print(f"{args.blocks} blocks of {args.runs} runs per tree, {pool}, load {os.getloadavg()[0]:.1f}; wall ms\n")
    print("| | median | p10 | p90 | from the pool |\n|---|---:|---:|---:|---:|")
    for name, values in times.items():
        q = statistics.quantiles(values, n=10)
        pooled, made = counts[name]
        print(f"| {name} | {statistics.median(values):.1f} | {q[0]:.1f} | {q[-1]:.1f} | {pooled} of {made} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
