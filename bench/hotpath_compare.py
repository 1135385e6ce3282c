"""Two installs of hutch side by side: SDK exec round trip, CLI exec and CLI run, interleaved.

    python bench/hotpath_compare.py --before OLD/.venv/bin --after NEW/.venv/bin [--rounds 12] [--per 25] [--sdk-only]

Each install gets its own HUTCH_HOME, daemon and live sandbox. Every round times ``--per``
SDK execs of ``true`` in a process of each install (its start not timed), then three times:
bare ``true``, ``python3 -c pass``, and ``hutch exec SBX -- true`` and ``hutch run -- true``
of each install as whole processes. Prints one JSON document: medians, ratios to the
baselines of the same run, every sample. Destroys its sandboxes and stops its daemons.
With ``--sdk-only``: SDK execs and bare ``true`` only, and the CPU per exec of each daemon's
whole process tree (its sandboxes included; bench/cpu.py), of the daemon process alone
(``cpu_daemon_own``: the hot path's own work, the sandboxes' processes left out) and of the
SDK loop's process. Both daemons run in the same rounds, so their ratio holds on a loaded machine.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu import TICK_MS, settle

SDK_LOOP = """
import sys, time, json
from hutch.client import Client
sid, n = sys.argv[1], int(sys.argv[2])
c = Client(autostart=False)
out = []
for _ in range(n + 2):
    t = time.perf_counter_ns(); r = c.exec(sid, {"command": ["true"]}); out.append((time.perf_counter_ns() - t) / 1e6)
    assert r["exit_code"] == 0
u = __import__("os").times()
print(json.dumps(out[2:] + [(u.user + u.system) * 1000]))
"""


def own_cpu_ms(pid: int) -> float:
    """utime + stime of the process ``pid`` itself (its threads, not its children)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_MS


def timed(argv: list[str], env: dict[str, str] | None = None) -> float:
    t = time.perf_counter_ns()
    r = subprocess.run(argv, env=env, capture_output=True, check=False)
    took = (time.perf_counter_ns() - t) / 1e6
    if r.returncode != 0:
        raise RuntimeError(f"{argv} exited {r.returncode}: {r.stderr[-500:]!r}")
    return took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="the bin directory of the first install")
    ap.add_argument("--after", required=True, help="the bin directory of the second install")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--per", type=int, default=25)
    ap.add_argument("--sdk-only", action="store_true", help="SDK execs only, with the CPU per exec")
    args = ap.parse_args()
    installs = {"before": args.before, "after": args.after}
    tmp = tempfile.mkdtemp(prefix="hutch-hotpath-")
    os.chmod(tmp, 0o711)  # as root, sandbox uids pass through to the state dirs
    envs: dict[str, dict[str, str]] = {}
    sbx: dict[str, str] = {}
    samples: dict[str, list[float]] = {"bare_true": [], "python_pass": []}
    for v in installs:
        samples |= {f"sdk_exec_{v}": [], f"cli_exec_{v}": [], f"cli_run_{v}": []}
        samples |= {f"cpu_daemon_{v}": [], f"cpu_daemon_own_{v}": [], f"cpu_sdk_{v}": []} if args.sdk_only else {}
    daemons: dict[str, int] = {}
    try:
        for v, bin_dir in installs.items():
            env = {k: x for k, x in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
            envs[v] = env | {"HUTCH_HOME": os.path.join(tmp, v)}
            subprocess.run([f"{bin_dir}/hutch", "daemon", "start"], env=envs[v], check=True, capture_output=True)
            made = subprocess.run([f"{bin_dir}/hutch", "create"], env=envs[v], check=True, capture_output=True, text=True)
            sbx[v] = made.stdout.strip()
            daemons[v] = int((Path(tmp) / v / "hutchd.pid").read_text().split()[0])
        for i in range(args.rounds):
            for v, bin_dir in installs.items():
                loop = [f"{bin_dir}/python", "-c", SDK_LOOP, sbx[v], str(args.per)]
                d0 = settle(daemons[v]) if args.sdk_only else 0.0
                o0 = own_cpu_ms(daemons[v])
                out = subprocess.run(loop, env=envs[v], capture_output=True, check=True, text=True).stdout
                times = json.loads(out)
                samples[f"sdk_exec_{v}"] += times[:-1]
                if args.sdk_only:
                    samples[f"cpu_daemon_{v}"].append((settle(daemons[v]) - d0) / (args.per + 2))
                    samples[f"cpu_daemon_own_{v}"].append((own_cpu_ms(daemons[v]) - o0) / (args.per + 2))
                    samples[f"cpu_sdk_{v}"].append(times[-1] / (args.per + 2))
                    samples["bare_true"] += [timed(["true"]) for _ in range(3)]
            for _ in range(0 if args.sdk_only else 3):
                samples["bare_true"].append(timed(["true"]))
                samples["python_pass"].append(timed(["python3", "-c", "pass"]))
                for v, bin_dir in installs.items():
                    samples[f"cli_exec_{v}"].append(timed([f"{bin_dir}/hutch", "exec", sbx[v], "--", "true"], envs[v]))
                    samples[f"cli_run_{v}"].append(timed([f"{bin_dir}/hutch", "run", "--", "true"], envs[v]))
            print(f"round {i + 1}/{args.rounds}, load {os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
    finally:
        for v, bin_dir in installs.items():
            if v in sbx:
                subprocess.run([f"{bin_dir}/hutch", "destroy", sbx[v]], env=envs[v], capture_output=True, check=False)
            if v in envs:
                subprocess.run([f"{bin_dir}/hutch", "daemon", "stop"], env=envs[v], capture_output=True, check=False)
        subprocess.run(["rm", "-rf", tmp], check=False)
    ratios = {}
    samples = {k: x for k, x in samples.items() if x}
    med = {k: statistics.median(x) for k, x in samples.items()}
    for v in installs:
        ratios[f"sdk_exec_{v}/bare_true"] = round(med[f"sdk_exec_{v}"] / med["bare_true"], 2)
        if not args.sdk_only:
            ratios[f"cli_exec_{v}/python_pass"] = round(med[f"cli_exec_{v}"] / med["python_pass"], 2)
            ratios[f"cli_run_{v}/python_pass"] = round(med[f"cli_run_{v}"] / med["python_pass"], 2)
    for what in ("sdk_exec", "cpu_daemon", "cpu_daemon_own", "cpu_sdk") if args.sdk_only else ("sdk_exec",):
        ratios[f"{what}_after/{what}_before"] = round(med[f"{what}_after"] / med[f"{what}_before"], 3)
    result = {
        "medians_ms": {k: round(m, 2) for k, m in med.items()},
        "n": {k: len(x) for k, x in samples.items()},
        "ratios": ratios,
        "loadavg_end": os.getloadavg(),
        "samples_ms": {k: [round(y, 3) for y in x] for k, x in samples.items()},
    }
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
