"""Exec round trip with 1 sandbox vs with N idle sandboxes held, the daemon's descriptors and memory.

    python bench/idle_exec.py [--idle 1000] [--per 40] [--out bench/results/idle-exec-....json]

Uses its own HUTCH_HOME and daemon (started on demand), creates N idle sandboxes (6 at a
time, one exec of true in each so every agent is up), measures the SDK's exec p50 in one
sandbox before and while they are held, next to bare fork/exec of true in the same phases,
and destroys every sandbox it made (also after an error). Stops creating when the host has
under 4 GiB available. Each idle sandbox is about 10 MiB of host memory: check free first.
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HOME = Path(tempfile.mkdtemp(prefix="hutch-idle-bench-"))
os.chmod(HOME, 0o711)  # as root, sandbox uids pass through to the state dir
os.environ["HUTCH_HOME"] = str(HOME / "home")

import hutch  # noqa: E402
from hutch.client import Client  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--idle", type=int, default=1000)
    ap.add_argument("--per", type=int, default=40, help="execs per batch (5 batches per phase)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    try:
        res = measure(args.idle, args.per)
    finally:
        subprocess.run([sys.executable, "-m", "hutch", "daemon", "stop"], capture_output=True, check=False)
        subprocess.run(["rm", "-rf", str(HOME)], check=False)
    text = json.dumps(res, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0 if res.get("left") == 0 else 1


def _avail_mib() -> int:
    line = next(x for x in Path("/proc/meminfo").read_text().splitlines() if x.startswith("MemAvailable"))
    return int(line.split()[1]) // 1024


def _bare(n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter_ns()
        subprocess.run(["true"], check=True)
        out.append((time.perf_counter_ns() - t) / 1e6)
    return out


def measure(n: int, per: int) -> dict[str, object]:
    c = Client()
    c.health()  # starts the daemon
    home = Path(os.environ["HUTCH_HOME"])
    dpid = int((home / "hutchd.pid").read_text())

    def fds() -> int:
        return len(os.listdir(f"/proc/{dpid}/fd"))

    def execs(sid: str, count: int) -> list[float]:
        out = []
        for _ in range(count):
            t = time.perf_counter_ns()
            c.exec(sid, {"command": ["true"]})
            out.append((time.perf_counter_ns() - t) / 1e6)
        return out

    def phase(sid: str) -> tuple[list[float], list[float]]:
        ours: list[float] = []
        bare: list[float] = []
        for _ in range(5):
            ours += execs(sid, per)
            bare += _bare(per)
        return ours, bare

    def make(_: int) -> str:
        sid = c.create({"provider": "local"})["id"]
        c.exec(sid, {"command": ["true"]})
        return sid

    made: list[str] = []
    res: dict[str, object] = {"idle": n, "execs_per_phase": 5 * per, "loadavg_start": os.getloadavg()}
    try:
        live = make(0)
        made.append(live)
        execs(live, 20)
        fds_1, avail_1 = fds(), _avail_mib()
        one, bare_1 = phase(live)
        t0 = time.monotonic()
        with ThreadPoolExecutor(6) as pool:
            for i, sid in enumerate(pool.map(make, range(n))):
                made.append(sid)
                if (i + 1) % 100 == 0:
                    print(f"{i + 1} created, {_avail_mib()} MiB available, daemon fds {fds()}", file=sys.stderr, flush=True)
                    if _avail_mib() < 4096:
                        raise SystemExit("stopping: under 4 GiB available")
        res["create_s"] = round(time.monotonic() - t0, 1)
        time.sleep(5)
        fds_n, avail_n = fds(), _avail_mib()
        many, bare_n = phase(live)
        p1, pn = statistics.median(one), statistics.median(many)
        b1, bn = statistics.median(bare_1), statistics.median(bare_n)
        res |= {
            "daemon_fds_with_1": fds_1,
            "daemon_fds_with_n": fds_n,
            "daemon_fds_per_idle_sandbox": round((fds_n - fds_1) / n, 2),
            "host_mib_per_idle_sandbox": round((avail_1 - avail_n) / n, 2),
            "exec_p50_with_1_ms": round(p1, 3),
            "exec_p50_with_n_ms": round(pn, 3),
            "bare_true_p50_with_1_ms": round(b1, 3),
            "bare_true_p50_with_n_ms": round(bn, 3),
            "exec_p50_ratio_n_over_1": round(pn / p1, 3),
            "exec_over_bare_with_1": round(p1 / b1, 2),
            "exec_over_bare_with_n": round(pn / bn, 2),
            "samples_with_1_ms": [round(x, 3) for x in one],
            "samples_with_n_ms": [round(x, 3) for x in many],
        }
    finally:
        t0 = time.monotonic()

        def destroy(sid: str) -> None:
            try:
                c.destroy(sid)
            except hutch.HutchError as exc:
                print(f"destroy {sid}: {exc}", file=sys.stderr)

        with ThreadPoolExecutor(6) as pool:
            list(pool.map(destroy, made))
        res["destroy_s"] = round(time.monotonic() - t0, 1)
        res["left"] = sum(1 for s in c.list() if s["state"] != "destroyed")
        res["loadavg_end"] = os.getloadavg()
    return res


if __name__ == "__main__":
    raise SystemExit(main())
