"""The E2B-compatible API against hutch's own, in one run, on one gateway
(``hutch serve --listen 127.0.0.1:0``, plain HTTP, an API key):

    python bench/e2b.py [--rounds 5] [--execs 30] [--pool 0]

- create -> first command: E2B SDK ``Sandbox.create()`` then ``commands.run("true")``, vs
  the hutch SDK's ``create`` then ``exec`` of the same ``/bin/bash -l -c true`` the E2B SDK
  runs;
- a command round trip in a live sandbox: ``commands.run("true")`` vs ``exec``;
- the daemon's CPU time per command on each path (user+system of the daemon process, from
  /proc, over the timed commands).

``--pool`` is the daemon's pool size (default 0: every create is cold on both sides; with a
pool, which side finds a member ready is a matter of the refill's timing, not of the API).
The two sides alternate in batches (E2B, hutch, E2B, hutch...) so that both see the same
machine. The E2B SDK runs in its own venv (the tests' one, tests/integration/e2b_sdk.py) as
a subprocess; its own timing is taken inside it, so its start-up is not counted. Prints one
JSON document (medians, ratios E2B/hutch) and stops the daemon by pid. Not part of
bench/run.py.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the tests' SDK venv helper

from tests.integration.e2b_sdk import run_sdk, sdk_python

from hutch.client import Client
from hutch.config import Settings

BASH_TRUE = ["/bin/bash", "-l", "-c", "true"]
SDK_SCRIPT = """
from e2b import Sandbox
created, trips = [], []
for _ in range({rounds}):
    t = time.perf_counter()
    sbx = Sandbox.create(timeout=300)
    sbx.commands.run("true")
    created.append((time.perf_counter() - t) * 1000)
    for _ in range({execs}):
        t = time.perf_counter()
        sbx.commands.run("true")
        trips.append((time.perf_counter() - t) * 1000)
    sbx.kill()
out["created"], out["trips"] = created, trips
"""


def cpu_ms(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def hutch_batch(c: Client, rounds: int, execs: int) -> dict[str, list[float]]:
    created, trips = [], []
    for _ in range(rounds):
        t = time.perf_counter()
        sbx = c.create({})["id"]
        c.exec(sbx, {"command": BASH_TRUE})
        created.append((time.perf_counter() - t) * 1000)
        for _ in range(execs):
            t = time.perf_counter()
            c.exec(sbx, {"command": BASH_TRUE})
            trips.append((time.perf_counter() - t) * 1000)
        c.destroy(sbx)
    return {"created": created, "trips": trips}


def summary(samples: dict[str, list[float]], cpu: float, commands: int) -> dict[str, Any]:
    return {
        "create_first_median_ms": round(statistics.median(samples["created"]), 1),
        "round_trip_median_ms": round(statistics.median(samples["trips"]), 1),
        "daemon_cpu_ms_per_command": round(cpu / commands, 2),
        "samples": {k: len(v) for k, v in samples.items()},
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5, help="batches of each side (each: one create, then --execs commands)")
    ap.add_argument("--execs", type=int, default=30)
    ap.add_argument("--pool", type=int, default=0, help="the daemon's pool size (0: cold creates on both sides)")
    args = ap.parse_args()
    python = sdk_python()
    home = Path(tempfile.mkdtemp(prefix="hutch-bench-e2b-"))
    proc = None
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HUTCH_")}
        env |= {"HUTCH_HOME": str(home), "HUTCH_POOL_SIZE": str(args.pool)}
        cmd = [sys.executable, "-m", "hutch", "serve", "--json", "--listen", "127.0.0.1:0"]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert proc.stdout is not None
        url = json.loads(proc.stdout.readline())["listen"]
        key = Client(Settings.load(home=home), autostart=False).create_key({"name": "bench"})["key"]
        (home / "bench.key").write_text(key)
        hutch = Client(Settings.load(home=home / "client", host=url, token_file=str(home / "bench.key")))
        e2b_env = {"E2B_API_KEY": key, "E2B_API_URL": url + "/e2b/api", "E2B_SANDBOX_URL": url + "/e2b/envd"}
        sides: dict[str, dict[str, list[float]]] = {"e2b": {"created": [], "trips": []}, "hutch": {"created": [], "trips": []}}
        cpu = {"e2b": 0.0, "hutch": 0.0}
        hutch_batch(hutch, 1, 2)  # warm both paths (imports, pools) before anything counts
        run_sdk(python, e2b_env, SDK_SCRIPT.format(rounds=1, execs=2))
        for _ in range(args.rounds):
            before = cpu_ms(proc.pid)
            got = run_sdk(python, e2b_env, SDK_SCRIPT.format(rounds=1, execs=args.execs))
            cpu["e2b"] += cpu_ms(proc.pid) - before
            before = cpu_ms(proc.pid)
            mine = hutch_batch(hutch, 1, args.execs)
            cpu["hutch"] += cpu_ms(proc.pid) - before
            for k in ("created", "trips"):
                sides["e2b"][k] += got[k]
                sides["hutch"][k] += mine[k]
        commands = args.rounds * (args.execs + 1)
        result: dict[str, Any] = {k: summary(v, cpu[k], commands) for k, v in sides.items()}
        e, h = result["e2b"], result["hutch"]
        result["ratio_e2b_to_hutch"] = {
            "create_first": round(e["create_first_median_ms"] / h["create_first_median_ms"], 2),
            "round_trip": round(e["round_trip_median_ms"] / h["round_trip_median_ms"], 2),
            "daemon_cpu_per_command": round(e["daemon_cpu_ms_per_command"] / h["daemon_cpu_ms_per_command"], 2),
        }
        result |= {"pool_size": args.pool, "cpus": os.cpu_count(), "loadavg_1m": round(os.getloadavg()[0], 2)}
        result["command"] = BASH_TRUE
        print(json.dumps(result, indent=2))
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
