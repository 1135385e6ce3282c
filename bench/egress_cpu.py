"""The egress proxy's cost per request in the daemon's CPU, two source trees side by side.

    python bench/egress_cpu.py --before OLD/src --after NEW/src [--rounds 8] [--per 200]
    python bench/egress_cpu.py --before OLD/src --after NEW/src --profile after  # + cProfile of one daemon

Each tree gets its own daemon (``python -m hutch serve`` with that tree first on
``PYTHONPATH``, its own ``HUTCH_HOME``) and one sandbox allowed to reach an upstream HTTP
server on the host (bench/egress.py's server and client, the name known to the proxy's
hosts file only). Every round, for each tree in turn (the order swapped every round):
an exec of the client that makes no request (what the exec itself costs the daemon), one
of ``--per`` absolute-form requests and one of ``--per`` ``CONNECT`` + ``GET``; the
daemon's own CPU (``/proc/PID/stat`` utime + stime, its threads but not the sandbox's
processes) is read once it has been still for a moment after each. The cost of a request
is (the exec's CPU - the empty exec's median) / ``--per``. The wall time of every request
is kept too, with ``--per`` direct requests from the host (same client, same
interpreter) in each round, so the overhead over direct is measured in the same minutes.

With ``--profile NAME`` that tree's daemon runs under ``cProfile`` on a thread-CPU clock,
switched on after the first round; the top of the profile is printed to stderr at the end.

Prints one JSON document: medians, ratios after/before, every sample, the load average.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import pstats
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import egress
from cpu import TICK_MS

KINDS = ("proxy_http", "proxy_connect")

PROFILED = """
import cProfile, runpy, signal, sys, time
out = sys.argv.pop(1)
prof = cProfile.Profile(time.thread_time)
signal.signal(signal.SIGUSR1, lambda *a: prof.enable())
def dump(*a):
    prof.disable()
    prof.dump_stats(out)
signal.signal(signal.SIGUSR2, dump)
sys.argv = ["hutch", "serve"]
runpy.run_module("hutch", run_name="__main__")
"""


def own_cpu_ms(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_MS


def still_cpu_ms(pid: int, still: float = 0.25, timeout: float = 10.0) -> float:
    """The daemon's own CPU once it stopped moving (work left behind by a request counts)."""
    end = time.monotonic() + timeout
    last = own_cpu_ms(pid)
    while time.monotonic() < end:
        time.sleep(still)
        now = own_cpu_ms(pid)
        if now - last <= TICK_MS:
            return now
        last = now
    return last


class Tree:
    def __init__(self, name: str, src: str, tmp: Path, hosts: Path, port: int, profile: Path | None) -> None:
        self.name = name
        self.home = tmp / name
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("HUTCH_")}
        self.env |= {"HUTCH_HOME": str(self.home), "HUTCH_EGRESS_HOSTS": str(hosts), "PYTHONPATH": str(Path(src).resolve())}
        self.env |= {"HUTCH_POOL_SIZE": "0"}
        self.profile = profile
        self.home.mkdir(mode=0o711)
        argv = [sys.executable, "-c", PROFILED, str(profile)] if profile else [sys.executable, "-m", "hutch", "serve"]
        self.log = open(tmp / f"{name}.log", "ab")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(argv, env=self.env, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + 60
        while not (self.home / "hutchd.pid").exists() or not self._answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the {name} daemon did not start: see {tmp / f'{name}.log'}")
            time.sleep(0.2)
        policy = ["--allow-host", egress.NAME, "--allow-port", str(port), "--allow-cidr", "127.0.0.1/32"]
        made = self.hutch("create", "--network", "allowlist", *policy)
        self.sbx = made.strip().splitlines()[-1]

    def _answers(self) -> bool:
        r = subprocess.run([sys.executable, "-m", "hutch", "daemon", "status"], env=self.env, capture_output=True, check=False)
        return r.returncode == 0

    def hutch(self, *args: str) -> str:
        r = subprocess.run([sys.executable, "-m", "hutch", *args], env=self.env, capture_output=True, text=True, check=False)
        if r.returncode != 0:
            raise RuntimeError(f"{self.name}: hutch {' '.join(args)} exited {r.returncode}: {r.stderr.strip()[-800:]}")
        return r.stdout

    def client(self, cfg: str) -> tuple[float, dict[str, Any]]:
        """One exec of the client in the sandbox: the daemon's CPU (ms) for it, the client's samples."""
        before = still_cpu_ms(self.proc.pid)
        out = self.hutch("exec", self.sbx, "--", egress.PYTHON, "-I", "-S", "-c", egress.CLIENT, cfg)
        spent = still_cpu_ms(self.proc.pid) - before
        return spent, json.loads(out)

    def close(self) -> None:
        if self.profile is not None:
            self.proc.send_signal(signal.SIGUSR2)
            time.sleep(1)
        with contextlib.suppress(RuntimeError, AttributeError):
            self.hutch("destroy", self.sbx)
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.log.close()


def config(port: int, kinds: list[str], count: int) -> str:
    cfg = {"name": egress.NAME, "port": port, "upstream": "127.0.0.1", "kinds": kinds, "count": count, "warm": 0}
    return json.dumps(cfg | {"path": "/", "expect": len(egress.SMALL_BODY)})


def direct(port: int, count: int) -> list[float]:
    argv = [egress.PYTHON, "-I", "-S", "-c", egress.CLIENT, config(port, ["direct"], count)]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=600).stdout
    return [ns / 1e6 for ns in json.loads(out)["samples_ns"]["direct"]]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="the src directory of the first tree")
    ap.add_argument("--after", required=True, help="the src directory of the second tree")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--per", type=int, default=200, help="requests of each kind per exec")
    ap.add_argument("--profile", choices=["before", "after"], help="run this tree's daemon under cProfile")
    ap.add_argument("--top", type=int, default=45, help="lines of the profile to print")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="hutch-egress-cpu-"))
    tmp.chmod(0o711)  # as root, the sandboxes' uids pass through to the state dirs
    hosts = tmp / "hosts"
    hosts.write_text(egress.hosts_line())
    script = tmp / "upstream.py"
    script.write_text(egress.SERVER)
    server = subprocess.Popen([sys.executable, "-I", str(script), "0"], stdout=subprocess.PIPE)
    assert server.stdout is not None
    port = int(server.stdout.readline())
    prof_out = tmp / "daemon.prof"
    trees: dict[str, Tree] = {}
    cpu: dict[str, list[float]] = {}
    wall: dict[str, list[float]] = {"direct": []}
    load = [os.getloadavg()[0]]
    try:
        for name, src in (("before", args.before), ("after", args.after)):
            trees[name] = Tree(name, src, tmp, hosts, port, prof_out if args.profile == name else None)
            cpu |= {f"empty_exec_{name}": []} | {f"{k}_{name}": [] for k in KINDS}
            wall |= {f"{k}_{name}": [] for k in KINDS}
            for kind in KINDS:  # one checked request each way, and a warm daemon, before anything counts
                trees[name].client(config(port, [kind], 5))
        for i in range(args.rounds):
            if i == 1 and args.profile:
                trees[args.profile].proc.send_signal(signal.SIGUSR1)
            order = list(trees.items()) if i % 2 == 0 else list(trees.items())[::-1]
            for name, tree in order:
                spent, _ = tree.client(config(port, [], 0))
                cpu[f"empty_exec_{name}"].append(spent)
                for kind in KINDS if i % 2 == 0 else KINDS[::-1]:
                    spent, got = tree.client(config(port, [kind], args.per))
                    cpu[f"{kind}_{name}"].append(spent)
                    wall[f"{kind}_{name}"] += [ns / 1e6 for ns in got["samples_ns"][kind]]
                wall["direct"] += direct(port, args.per)
            load.append(os.getloadavg()[0])
            print(f"round {i + 1}/{args.rounds}, load {load[-1]:.1f}", file=sys.stderr, flush=True)
    finally:
        for tree in trees.values():
            tree.close()
        server.kill()
        server.wait(10)
    per_request: dict[str, float] = {}
    for name in trees:
        empty = statistics.median(cpu[f"empty_exec_{name}"])
        for kind in KINDS:
            per_request[f"{kind}_{name}"] = statistics.median((c - empty) / args.per for c in cpu[f"{kind}_{name}"])
    med = {k: statistics.median(v) for k, v in wall.items()}
    result = {
        "daemon_cpu_ms_per_request": {k: round(v, 4) for k, v in per_request.items()},
        "daemon_cpu_ms_empty_exec": {n: round(statistics.median(cpu[f"empty_exec_{n}"]), 2) for n in trees},
        "ratios_after_before": {k: round(per_request[f"{k}_after"] / per_request[f"{k}_before"], 3) for k in KINDS},
        "wall_median_ms": {k: round(v, 3) for k, v in med.items()},
        "wall_overhead_ms": {k: round(v - med["direct"], 3) for k, v in med.items() if k != "direct"},
        "requests_per_exec": args.per,
        "rounds": args.rounds,
        "loadavg_1min": {"start": load[0], "end": load[-1], "median": statistics.median(load)},
        "cpu_samples_ms": cpu,
        "wall_samples_ms": {k: [round(x, 4) for x in v] for k, v in wall.items()},
    }
    print(json.dumps(result, indent=1))
    if args.profile and prof_out.exists():
        text = io.StringIO()
        pstats.Stats(str(prof_out), stream=text).sort_stats("tottime").print_stats(args.top)
        pstats.Stats(str(prof_out), stream=text).sort_stats("cumulative").print_stats(args.top)
        print(text.getvalue(), file=sys.stderr)
    subprocess.run(["rm", "-rf", str(tmp)], check=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
