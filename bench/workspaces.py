"""Workspace benchmarks: snapshot of a 100 MB workspace (1k and 10k files), fork of one
child, push of a 10k-file git repo (first and repeated), pull of 100 MB.

    python bench/workspaces.py [--rounds 5] [--fork-only] [--out bench/results/workspaces-....json]

Goals (issue 5): snapshot <= 200 ms, fork of one child <= 10 ms (from the pool). Uses its
own HUTCH_HOME and daemon (the default pool), destroys everything it made (also on Ctrl-C).
Each timed fork and create first waits until the pool is full again (the refill after the
previous one), so a child is taken from it; each fork row says how many were
(``pooled``). ``--fork-only``: only the rows of the empty workspace's fork and of create.
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
from typing import Any

MB = 1 << 20


def make_tree(root: Path, files: int, total: int, git: bool = False) -> Path:
    root.mkdir(parents=True)
    size = total // files
    for i in range(files):
        d = root / f"d{i // 100:03d}"
        d.mkdir(exist_ok=True)
        (d / f"f{i:05d}.bin").write_bytes(os.urandom(size))
    if git:
        git_cmd = ["git", "-C", str(root), "-c", "user.email=b@b", "-c", "user.name=b"]
        subprocess.run([*git_cmd, "init", "-q"], check=True)
        subprocess.run([*git_cmd, "add", "."], check=True)
        subprocess.run([*git_cmd, "commit", "-qm", "bench"], check=True)
    return root


def ms(samples: list[float]) -> dict[str, float]:
    return {"median_ms": round(statistics.median(samples), 1), "min_ms": round(min(samples), 1), "max_ms": round(max(samples), 1)}


def timed(fn: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return (time.perf_counter() - t0) * 1000, out


def pool_full(client: Any, wait: float = 120.0) -> None:
    """Until every pool is full again (bounded: a loaded machine refills slowly)."""
    end = time.monotonic() + wait
    while time.monotonic() < end:
        if all(p["ready"] >= p["target"] and p["starting"] == 0 for p in client.pool_status()["pools"]):
            return
        time.sleep(0.05)


def forks(client: Any, source: str, rounds: int) -> dict[str, Any]:
    """``rounds`` forks of one child from ``source``, each with the pool full first."""
    total, copy, pooled = [], [], 0
    for _ in range(rounds):
        pool_full(client)
        t, kids = timed(lambda: client.fork(source, 1))
        child = kids["children"][0]
        total.append(t)
        copy.append(float(child["copy_ms"]))
        created = [e for e in client.events(child["sandbox"]) if e["type"] == "sandbox_created"]
        pooled += bool(created and created[0]["data"].get("pool"))
        client.destroy(child["sandbox"])
    return {"client": ms(total), "copy": ms(copy), "pooled": pooled, "method": child["method"], "goal_ms": 10}


def run(rounds: int, work: Path, settings: Any, fork_only: bool = False) -> dict[str, Any]:
    from hutch import Sandbox
    from hutch.client import Client

    client = Client(settings)
    report: dict[str, Any] = {}
    for files in () if fork_only else (1000, 10000):
        tree = make_tree(work / f"t{files}", files, 100 * MB, git=files == 10000)
        sbx = Sandbox.create(settings=settings)
        first_ms, first = timed(lambda: sbx.push(str(tree)))  # noqa: B023
        again_ms, again = timed(lambda: sbx.push(str(tree)))  # noqa: B023
        if files == 10000:
            report["push_10k_files_100MB_git"] = {
                "first_ms": round(first_ms, 1),
                "first_files_sent": first["files_sent"],
                "repeat_ms": round(again_ms, 1),
                "repeat_files_sent": again["files_sent"],
            }
        total, server = [], []
        for i in range(rounds):
            t, snap = timed(lambda: sbx.snapshot(f"s{files}-{i}"))  # noqa: B023
            total.append(t)
            ev = client.events(sbx.id, types=["snapshot_saved"])[-1]["data"]
            server.append(float(ev["duration_ms"]))
            client.snapshot_delete(snap["name"])
        report[f"snapshot_100MB_{files}_files"] = {"client": ms(total), "service": ms(server), "goal_ms": 200}
        if files == 1000:
            pulls = []
            for i in range(rounds):
                t, _ = timed(lambda: sbx.pull(str(work / f"pull{i}")))  # noqa: B023
                pulls.append(t)
            report["pull_100MB_1k_files"] = ms(pulls)
        report[f"fork_1_child_100MB_{files}_files"] = forks(client, sbx.id, rounds)
        sbx.destroy()
    empty = Sandbox.create(settings=settings)
    report["fork_1_child_empty_workspace"] = forks(client, empty.id, rounds)
    create = []
    for _ in range(rounds):
        pool_full(client)
        t, rec = timed(lambda: client.create({"provider": "local"}))
        create.append(t)
        client.destroy(rec["id"])
    report["create_for_comparison"] = ms(create)
    empty.destroy()
    return report


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--fork-only", action="store_true", help="only the empty workspace's fork and create")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="hutch-bench-ws-"))
    work = Path(tempfile.mkdtemp(prefix="hutch-bench-ws-trees-"))
    os.environ["HUTCH_HOME"] = str(home)
    from hutch.client import Client
    from hutch.config import Settings

    settings = Settings.load()
    client = Client(settings)
    try:
        client.health()  # starts the daemon
        report = run(args.rounds, work, settings, args.fork_only) | {
            "machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version()},
            "command": " ".join(sys.argv),
            "loadavg": os.getloadavg(),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
        print(json.dumps(report, indent=2))
        if args.out:
            args.out.write_text(json.dumps(report, indent=2) + "\n")
        return 0
    finally:
        try:
            for rec in client.list():
                client.destroy(rec["id"])
        finally:
            subprocess.run([sys.executable, "-m", "hutch", "daemon", "stop"], env=os.environ.copy(), capture_output=True)
            subprocess.run(["rm", "-rf", str(home), str(work)], check=False)


if __name__ == "__main__":
    raise SystemExit(main())
