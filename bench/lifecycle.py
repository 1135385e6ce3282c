"""Pause/resume, sub-agent create and TTL expiry latency through the SDK and a real daemon.

    python bench/lifecycle.py [--iterations 20] [--procs 20] [--out bench/results/lifecycle/....json]

pause/resume: a sandbox running --procs busy processes, frozen and thawed (cgroup freezer
here); subagent: create of a child sharing the workspace, vs a plain create; expiry: from
the TTL deadline to the sandbox being destroyed (bounded below by the reaper interval).
Uses its own HUTCH_HOME and daemon, destroys everything it made.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_ms": round(statistics.median(ordered) * 1000, 2),
        "p95_ms": round(ordered[max(0, int(len(ordered) * 0.95 + 0.5) - 1)] * 1000, 2),
        "min_ms": round(ordered[0] * 1000, 2),
        "max_ms": round(ordered[-1] * 1000, 2),
        "n": len(ordered),
    }


def measure(iterations: int, procs: int) -> dict[str, object]:
    from hutch import Sandbox
    from hutch.client import Client

    pause, resume, child, plain, expiry = [], [], [], [], []
    parent = Sandbox.create()
    try:
        parent.exec(f"for i in $(seq {procs}); do (while :; do :; done) & done", timeout=30)
        method = ""
        for _ in range(iterations):
            t0 = time.perf_counter()
            method = parent.pause()["message"]
            pause.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            parent.resume()
            resume.append(time.perf_counter() - t0)
        for _ in range(iterations):
            t0 = time.perf_counter()
            kid = parent.subagent()
            child.append(time.perf_counter() - t0)
            kid.destroy()
            t0 = time.perf_counter()
            other = Sandbox.create()
            plain.append(time.perf_counter() - t0)
            other.destroy()
        c = Client(autostart=False)
        for _ in range(max(3, iterations // 4)):
            sbx = Sandbox.create(ttl=1)
            deadline = float(sbx.info["expires_at"])
            while c.get(sbx.id)["state"] != "destroyed":
                time.sleep(0.01)
            expiry.append(time.time() - deadline)
    finally:
        parent.destroy()
    return {
        "pause_method": method,
        "busy_processes": procs,
        "pause": stats(pause),
        "resume": stats(resume),
        "subagent_create": stats(child),
        "plain_create": stats(plain),
        "ttl_deadline_to_destroyed": stats(expiry),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--procs", type=int, default=20)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="hutch-lifecycle-bench-"))
    os.environ["HUTCH_HOME"] = str(home)
    try:
        report = measure(args.iterations, args.procs)
        report |= {
            "machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version()},
            "command": " ".join(sys.argv),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
        print(json.dumps(report, indent=2))
        if args.out:
            args.out.write_text(json.dumps(report, indent=2) + "\n")
        return 0
    finally:
        subprocess.run([sys.executable, "-m", "hutch", "daemon", "stop"], env=os.environ.copy(), capture_output=True)
        subprocess.run(["rm", "-rf", str(home)], check=False)


if __name__ == "__main__":
    raise SystemExit(main())
