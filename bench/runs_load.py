"""500 concurrent background runs on one machine: completion, lost output, daemon memory.

    python bench/runs_load.py [--runs 500] [--sandboxes 10] [--out bench/results/runs-load-....json]

Uses its own HUTCH_HOME and daemon, destroys everything it made (also on Ctrl-C).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def load(runs: int, boxes: int, settings: object) -> dict[str, object]:
    from hutch import AsyncSandbox

    sandboxes = await asyncio.gather(*(AsyncSandbox.create(settings=settings) for _ in range(boxes)))  # type: ignore[arg-type]
    try:
        t0 = time.perf_counter()
        started = await asyncio.gather(
            *(
                sandboxes[i % boxes].exec(["sh", "-c", f"echo run-{i}; sleep 0.5; echo done-{i} >&2"], background=True)
                for i in range(runs)
            )
        )
        t_started = time.perf_counter() - t0
        results = await asyncio.gather(*(r.wait(timeout=600) for r in started))
        t_done = time.perf_counter() - t0
        wrong = [i for i, r in enumerate(results) if (r.stdout, r.stderr, r.status) != (f"run-{i}\n", f"done-{i}\n", "completed")]
        lost = [i for i, r in enumerate(results) if r.status == "lost"]
        return {
            "runs": runs,
            "sandboxes": boxes,
            "start_all_s": round(t_started, 3),
            "all_done_s": round(t_done, 3),
            "wrong_output": len(wrong),
            "lost": len(lost),
            "statuses": sorted({r.status for r in results}),
        }
    finally:
        await asyncio.gather(*(s.destroy() for s in sandboxes), return_exceptions=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=500)
    ap.add_argument("--sandboxes", type=int, default=10)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="hutch-runs-load-"))
    os.environ["HUTCH_HOME"] = str(home)
    os.environ["HUTCH_MAX_BACKGROUND_RUNS"] = str(args.runs)
    from hutch.client import Client
    from hutch.config import Settings

    settings = Settings.load()
    client = Client(settings)
    try:
        pid = int(client.health()["pid"])  # starts the daemon
        before = rss_kib(pid)
        report = asyncio.run(load(args.runs, args.sandboxes, settings))
        after = rss_kib(pid)
        report |= {
            "daemon_rss_before_kib": before,
            "daemon_rss_after_kib": after,
            "machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version()},
            "command": " ".join(sys.argv),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
        print(json.dumps(report, indent=2))
        if args.out:
            args.out.write_text(json.dumps(report, indent=2) + "\n")
        return 0 if report["lost"] == 0 and report["wrong_output"] == 0 else 1
    finally:
        try:
            for rec in client.list():
                client.destroy(rec["id"])
        finally:
            subprocess.run([sys.executable, "-m", "hutch", "daemon", "stop"], env=os.environ.copy(), capture_output=True)
            subprocess.run(["rm", "-rf", str(home)], check=False)


if __name__ == "__main__":
    raise SystemExit(main())
