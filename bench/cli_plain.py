"""Whole-process CPU of `hutch exec SBX -- true`: this tree's plain path (no click) against the
same command through the command tree (`--session-id SBX`, click) and against another tree's
CLI (``--before SRC``: put first on PYTHONPATH, same interpreter), with `python -c pass` as the
baseline. Rounds interleave the commands (order rotated each round); CPU is user + system of
the child from wait4, far less sensitive to a busy machine than wall time.

usage: python bench/cli_plain.py [--before OLD/src] [--rounds 25]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", help="another tree's src directory, for its CLI")
    ap.add_argument("--rounds", type=int, default=25)
    a = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HUTCH_") and k != "PYTHONDONTWRITEBYTECODE"}
    home = Path(tempfile.mkdtemp(prefix="cliplain-"))
    env |= {"HUTCH_HOME": str(home), "HUTCH_POOL_SIZE": "0"}
    hutch = [sys.executable, "-m", "hutch"]
    sbx = json.loads(subprocess.run([*hutch, "create", "--json"], env=env, capture_output=True, check=True).stdout)["id"]
    cmds: dict[str, tuple[list[str], dict[str, str]]] = {
        "python -c pass": ([sys.executable, "-c", "pass"], env),
        "exec (plain)": ([*hutch, "exec", sbx, "--", "true"], env),
        "exec (tree)": ([*hutch, "exec", "--session-id", sbx, "--", "true"], env),
    }
    if a.before:
        cmds["exec (before)"] = ([*hutch, "exec", sbx, "--", "true"], env | {"PYTHONPATH": a.before})
    cpu: dict[str, list[float]] = {k: [] for k in cmds}
    wall: dict[str, list[float]] = {k: [] for k in cmds}
    names = list(cmds)
    devnull = os.open(os.devnull, os.O_RDWR)
    try:
        for r in range(a.rounds + 2):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                argv, e = cmds[name]
                t = time.perf_counter()
                pid = os.posix_spawn(argv[0], argv, e, file_actions=[(os.POSIX_SPAWN_DUP2, devnull, fd) for fd in (0, 1, 2)])
                _, status, ru = os.wait4(pid, 0)
                if status != 0:
                    raise SystemExit(f"{name} failed: {status}")
                if r >= 2:  # two warm-up rounds
                    cpu[name].append((ru.ru_utime + ru.ru_stime) * 1000)
                    wall[name].append((time.perf_counter() - t) * 1000)
    finally:
        subprocess.run([*hutch, "destroy", sbx], env=env, capture_output=True)
        subprocess.run([*hutch, "daemon", "stop"], env=env, capture_output=True)
        subprocess.run(["rm", "-rf", str(home)], check=False)
    base = statistics.median(cpu["python -c pass"])
    print(f"load {os.getloadavg()[0]:.1f}, {a.rounds} rounds")
    print("| command | CPU ms (median) | / python -c pass | wall ms (median) |\n|---|---|---|---|")
    for name in names:
        c = statistics.median(cpu[name])
        print(f"| {name} | {c:.1f} | {c / base:.2f}x | {statistics.median(wall[name]):.1f} |")


if __name__ == "__main__":
    main()
