"""What the in-sandbox agent's start costs a user: a cold create's first run and a wake.

    python bench/agent_start.py --before OLD/src [--rounds 10]

Each round runs, for this tree and for ``--before`` (another checkout's ``src``), one fresh
SDK process on a daemon of its own (after one warm-up round; a temporary ``HUTCH_HOME`` each; the pool off and
``spare_idle = 1``, so the agent goes back to the native helper within a second): it times
``Sandbox.create()``, the first ``exec(["true"])`` (the agent's start; with a helper that
supervises plain runs itself, none), a warm exec (the median of three), and an exec after
2.2 s idle (a wake: the helper hands over to the agent again, where it does not run it).
The two sides alternate, the order swapped every round; medians are printed. A
second part times 300 warm execs in each of 3 processes per side (p50 of each). Standard
library and hutch's SDK only; prints Markdown.
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
from pathlib import Path

FIRST = r"""
import json, time
from hutch import Sandbox
out = {}
t0 = time.perf_counter(); sb = Sandbox.create(); t1 = time.perf_counter(); sb.exec(["true"]); t2 = time.perf_counter()
out["create"], out["first exec"], out["create -> first result"] = (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t2 - t0) * 1e3
warm = []
for _ in range(3):
    t = time.perf_counter(); sb.exec(["true"]); warm.append((time.perf_counter() - t) * 1e3)
out["warm exec"] = sorted(warm)[1]
time.sleep(2.2)
t = time.perf_counter(); sb.exec(["true"]); out["wake"] = (time.perf_counter() - t) * 1e3
sb.destroy()
print(json.dumps(out))
"""

WARM = r"""
import json, time
from hutch import Sandbox
sb = Sandbox.create()
for _ in range(30): sb.exec(["true"])
times = []
for _ in range(300):
    t = time.perf_counter(); sb.exec(["true"]); times.append((time.perf_counter() - t) * 1e3)
sb.destroy()
print(json.dumps(sorted(times)[150]))
"""


def _run(code: str, src: Path, home: Path) -> object:
    env = dict(os.environ, PYTHONPATH=str(src), HUTCH_HOME=str(home))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{src}: {proc.stderr.strip()}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=Path, required=True, help="another tree's src directory")
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()
    here = Path(__file__).resolve().parents[1] / "src"
    tmp = Path(tempfile.mkdtemp(prefix="hutch-agent-start-"))
    tmp.chmod(0o755)  # (a root daemon's sandboxes run as their own uids: they pass through it to the agent's files)
    sides = {"before": (args.before.resolve(), tmp / "before"), "this tree": (here, tmp / "after")}
    for _, home in sides.values():
        home.mkdir()
        (home / "config.toml").write_text("pool_size = 0\nspare_idle = 1\n")
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
    warm: dict[str, list[float]] = {name: [] for name in sides}
    try:
        for name in sides:  # a warm-up: the daemon's start, its first create's preparations
            _run(FIRST, *sides[name])
        for r in range(args.rounds):
            for name in list(sides) if r % 2 == 0 else list(sides)[::-1]:
                rows[name].append(_run(FIRST, *sides[name]))  # type: ignore[arg-type]
        for r in range(3):
            for name in list(sides) if r % 2 == 0 else list(sides)[::-1]:
                warm[name].append(float(_run(WARM, *sides[name])))  # type: ignore[arg-type]
    finally:
        for src, home in sides.values():
            env = dict(os.environ, PYTHONPATH=str(src), HUTCH_HOME=str(home))
            subprocess.run([sys.executable, "-m", "hutch", "daemon", "stop"], env=env, capture_output=True, check=False)
        shutil.rmtree(tmp, ignore_errors=True)
    keys = list(rows["this tree"][0])
    print(f"{args.rounds} rounds, load {os.getloadavg()[0]:.1f}; medians in ms\n")
    print("| | " + " | ".join(keys) + " | warm exec p50 (3 x 300) |")
    print("|---|" + "---:|" * (len(keys) + 1))
    for name in sides:
        cells = [f"{statistics.median(row[k] for row in rows[name]):.1f}" for k in keys]
        print(f"| {name} | " + " | ".join(cells) + f" | {statistics.median(warm[name]):.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
