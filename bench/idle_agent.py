"""Idle sandboxes held by the native helper (hold.c) against the Python agent, and what the
first exec after create costs with each.

    python bench/idle_agent.py [--count 20] [--spare-idle 5]

Two daemons of this install, each in its own HUTCH_HOME (pool off, ``spare_idle`` as given):
``HUTCH_IDLE_AGENT=python`` (the Python agent from the start, as before the helper) and
``native``. Creates alternate between them. Set A: each sandbox is created and exec'd at
once (``true``, then ``true`` again): the create's and both execs' wall time (SDK) and the
CPU time of the sandbox's PID 2 (the agent, or the helper that becomes it: /proc/PID/schedstat,
kept across execve), where the Python agent's start lands; the spare supervisor and the run's
own processes cost the same either way and are not counted.
Set B: ``--count`` sandboxes created and never used. Then the harness waits until every
sandbox is idle (the Python agent's spares gone after ``spare_idle``; the helper back in
place) and sums the PSS of every process in each set's cgroups (/proc/PID/smaps_rollup).
Medians; destroys everything.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hutch import Sandbox
from hutch.config import Settings
from hutch.providers.local import cgroups

MODES = ("python", "native")


def groups(sid: str) -> list[Path]:
    layout = cgroups.detect()
    parents = [*layout.v1.values(), *([layout.v2 / cgroups.GROUP] if layout.v2 else [])]
    return [p / sid for p in parents if (p / sid).exists()]


def agent_pid(sid: str) -> int:
    """The host pid of the sandbox's PID 2: the agent, or the helper in its place."""
    for pid in pids(sid):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        if next(line for line in status.splitlines() if line.startswith("NSpid:")).split()[-1] == "2":
            return pid
    raise SystemExit(f"no PID 2 in {sid}")


def cpu_ns(pid: int) -> int:
    """CPU time of one process so far (ns, the scheduler's count: kept across execve)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


def pids(sid: str) -> set[int]:
    out: set[int] = set()
    for g in groups(sid):
        if (g / "cgroup.procs").exists():
            out |= {int(p) for p in (g / "cgroup.procs").read_text().split()}
    return out


def pss_kib(pid: int) -> int:
    try:
        rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0
    return next(int(line.split()[1]) for line in rollup.splitlines() if line.startswith("Pss:"))


def idle(sid: str, mode: str) -> bool:
    """No spare left; the helper back in place (native)."""
    procs = pids(sid)
    if len(procs) > 3:  # the outer bwrap, its init, the agent or helper
        return False
    if mode == "python":
        return True
    try:
        return Path(f"/proc/{agent_pid(sid)}/cmdline").read_bytes().startswith(b"/.hutch/hold\0")
    except OSError:
        return False


def start(home: Path, mode: str, spare_idle: float) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HUTCH_")}
    env |= {"HUTCH_HOME": str(home), "HUTCH_POOL_SIZE": "0", "HUTCH_SPARE_IDLE": str(spare_idle), "HUTCH_IDLE_AGENT": mode}
    log = open(home / "daemon.log", "ab")  # noqa: SIM115 - the child's
    proc = subprocess.Popen([sys.executable, "-m", "hutch", "serve"], env=env, stdout=log, stderr=log)
    log.close()
    sock = Settings.load(home=home).socket_path
    deadline = time.monotonic() + 60
    while not sock.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit((home / "daemon.log").read_text()[-2000:])
        time.sleep(0.05)
    return proc


def med(xs: list[float]) -> float:
    return round(statistics.median(xs), 2)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=20)
    ap.add_argument("--spare-idle", type=float, default=5.0)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="hutch-idle-agent-"))
    os.chmod(tmp, 0o711)
    homes = {m: tmp / m for m in MODES}
    daemons = {}
    made: dict[str, dict[str, list[Sandbox]]] = {m: {"A": [], "B": []} for m in MODES}
    times: dict[str, dict[str, list[float]]] = {m: {} for m in MODES}
    try:
        for m in MODES:
            homes[m].mkdir()
            os.chmod(homes[m], 0o711)
            daemons[m] = start(homes[m], m, args.spare_idle)
        settings = {m: Settings.load(home=homes[m]) for m in MODES}
        for m in MODES:  # the helper built, the agent compiled: not in the numbers
            Sandbox.create(settings=settings[m]).destroy()
        for i in range(args.count):
            for m in MODES if i % 2 == 0 else MODES[::-1]:
                t0 = time.perf_counter()
                sbx = Sandbox.create(settings=settings[m])
                t1 = time.perf_counter()
                agent = agent_pid(sbx.id)
                c1 = cpu_ns(agent)
                assert sbx.exec(["true"]).exit_code == 0
                t2 = time.perf_counter()
                c2 = cpu_ns(agent)
                assert sbx.exec(["true"]).exit_code == 0
                t3 = time.perf_counter()
                c3 = cpu_ns(agent)
                made[m]["A"].append(sbx)
                for name, value in (
                    ("create_ms", (t1 - t0) * 1e3),
                    ("create_agent_cpu_ms", c1 / 1e6),
                    ("first_exec_ms", (t2 - t1) * 1e3),
                    ("create_and_first_exec_ms", (t2 - t0) * 1e3),
                    ("first_exec_agent_cpu_ms", (c2 - c1) / 1e6),
                    ("second_exec_ms", (t3 - t2) * 1e3),
                    ("second_exec_agent_cpu_ms", (c3 - c2) / 1e6),
                ):
                    times[m].setdefault(name, []).append(value)
                made[m]["B"].append(Sandbox.create(settings=settings[m]))
        deadline = time.monotonic() + 300
        waiting = [(m, s.id) for m in MODES for group in made[m].values() for s in group]
        while waiting and time.monotonic() < deadline:
            time.sleep(0.5)
            waiting = [(m, sid) for m, sid in waiting if not idle(sid, m)]
        out: dict[str, object] = {"count": args.count, "spare_idle": args.spare_idle, "not_idle_at_the_end": len(waiting)}
        for m in MODES:
            result: dict[str, object] = {k: med(v) for k, v in times[m].items()}
            for group, label in (("B", "created_never_used"), ("A", "after_two_execs")):
                ids = [s.id for s in made[m][group]]
                procs = [p for sid in ids for p in pids(sid)]
                result[f"pss_mib_per_sandbox_{label}"] = round(sum(pss_kib(p) for p in procs) / 1024 / len(ids), 2)
                result[f"processes_per_sandbox_{label}"] = len(procs) / len(ids)
            out[m] = result
        py, nat = out["python"], out["native"]
        assert isinstance(py, dict) and isinstance(nat, dict)
        out["ratio_native_to_python"] = {k: round(nat[k] / py[k], 2) for k in py if isinstance(py[k], float) and py[k]}
        out["loadavg"] = os.getloadavg()
        print(json.dumps(out, indent=1))
    finally:
        for m in MODES:
            for group in made[m].values():
                for s in group:
                    with contextlib.suppress(Exception):  # best effort: the daemons' homes go next
                        s.destroy()
        for proc in daemons.values():
            proc.terminate()
            proc.wait(60)
        subprocess.run(["rm", "-rf", str(tmp)], check=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
