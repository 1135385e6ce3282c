"""What an idle machine adds to one exec: the SDK round trip after a pause, beside bare baselines.

    python bench/idle_gap.py [--rounds 40] [--gaps 0,0.001,0.01,0.1] [--out FILE.json]

One daemon of this tree (its own ``HUTCH_HOME``, no pool) and one sandbox. Every round, for
each gap (the order turned every round), and for each of three operations (the order turned
too): six times, sleep for the gap, then time the operation, in this process (the first of
the six, which follows another kind of operation, is not kept):

- ``ping``: one byte to a child process over a unix socket pair and back (two wake-ups:
  the least any round trip through another process costs);
- ``bare``: ``subprocess.run(["true"])``, the harness's bare baseline;
- ``exec``: the SDK client's ``exec(["true"])`` in the live sandbox (client, daemon, the
  sandbox's helper and the command: six wake-ups).

Gap 0 is back to back, as the harness's ``sdk_exec_steady`` is. The full harness interleaves many kinds of work between two execs,
so its exec sees the machine as it is after a gap: on a virtual machine whose idle vCPUs
halt (cpuidle ``haltpoll``), every wake-up of a halted vCPU costs a round trip through the
hypervisor. Prints one JSON document: medians per gap and operation, ratios, the cpuidle
driver, every sample.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

BATCH = 5
ECHO = "import socket,sys\ns=socket.socket(fileno=int(sys.argv[1]))\nwhile b:=s.recv(1): s.sendall(b)\n"


def cpuidle() -> str:
    try:
        return Path("/sys/devices/system/cpu/cpuidle/current_driver").read_text().strip()
    except OSError:
        return "unknown"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--gaps", default="0,0.001,0.01,0.1", help="pauses in seconds, comma-separated")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    gaps = [float(g) for g in args.gaps.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="hutch-idle-gap-"))
    tmp.chmod(0o711)  # as root, the sandbox's uid passes through to the state dir
    env = {k: v for k, v in os.environ.items() if not k.startswith("HUTCH_") and k != "PYTHONDONTWRITEBYTECODE"}
    env |= {"HUTCH_HOME": str(tmp / "home"), "HUTCH_POOL_SIZE": "0"}
    os.environ.clear()
    os.environ.update(env)
    from hutch.client import Client

    hutch = [sys.executable, "-m", "hutch"]
    subprocess.run([*hutch, "daemon", "start"], check=True, capture_output=True)
    mine, theirs = socket.socketpair()
    echo = subprocess.Popen([sys.executable, "-I", "-c", ECHO, str(theirs.fileno())], pass_fds=[theirs.fileno()])
    theirs.close()
    samples: dict[str, list[float]] = {}
    sid = ""
    try:
        client = Client(autostart=False)
        sid = client.create({})["id"]

        def ping() -> None:
            mine.sendall(b"x")
            if mine.recv(1) != b"x":
                raise RuntimeError("the echo process went away")

        def bare() -> None:
            subprocess.run(["true"], check=True)

        def exec_true() -> None:
            if client.exec(sid, {"command": ["true"]})["exit_code"] != 0:
                raise RuntimeError("exec true failed")

        ops: dict[str, Callable[[], None]] = {"ping": ping, "bare": bare, "exec": exec_true}
        for op in ops.values():  # warm every path once
            op()
        for i in range(args.rounds):
            for gap in gaps[i % len(gaps) :] + gaps[: i % len(gaps)]:
                names = list(ops)
                for name in names[i % 3 :] + names[: i % 3]:
                    for k in range(BATCH + 1):  # the first follows another operation: not kept
                        time.sleep(gap)
                        t = time.perf_counter_ns()
                        ops[name]()
                        if k:
                            samples.setdefault(f"{name}@{gap}", []).append((time.perf_counter_ns() - t) / 1e6)
            if (i + 1) % 10 == 0:
                print(f"round {i + 1}/{args.rounds}, load {os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
    finally:
        mine.close()
        echo.wait(10)
        if sid:
            subprocess.run([*hutch, "destroy", sid], capture_output=True, check=False)
        subprocess.run([*hutch, "daemon", "stop"], capture_output=True, check=False)
        subprocess.run(["rm", "-rf", str(tmp)], check=False)
    med = {k: statistics.median(v) for k, v in samples.items()}
    by_gap = {
        str(g): {
            "median_ms": {op: round(med[f"{op}@{g}"], 3) for op in ("ping", "bare", "exec")},
            "exec/bare": round(med[f"exec@{g}"] / med[f"bare@{g}"], 2),
            "exec - gap 0 (ms)": round(med[f"exec@{g}"] - med[f"exec@{gaps[0]}"], 3),
            "ping - gap 0 (ms)": round(med[f"ping@{g}"] - med[f"ping@{gaps[0]}"], 3),
        }
        for g in gaps
    }
    result = {
        "command": "python bench/idle_gap.py " + " ".join(sys.argv[1:]),
        "cpuidle_driver": cpuidle(),
        "cpus": os.cpu_count(),
        "rounds": args.rounds,
        "by_gap_s": by_gap,
        "loadavg_end": os.getloadavg(),
        "samples_ms": {k: [round(x, 4) for x in v] for k, v in samples.items()},
    }
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "samples_ms"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
