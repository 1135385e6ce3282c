"""The gvisor runtime against bwrap and bare processes, in the same run (medians):

- create -> first result: a new sandbox's first ``true`` (bare: one fork/exec of ``true``);
- exec round trip: ``true`` in a running sandbox (bare: fork/exec);
- idle memory: the sandbox's cgroup after it settled (bare: none);
- CPU-bound: ``python3 -c 'sum(range(10**7))'``, timed inside (the workload's own clock);
- syscall-heavy: a walk with ``os.stat`` over a tree of 2000 files in /tmp, timed inside.

    python bench/gvisor.py [--rounds 5] [--out bench/results/gvisor-....json]

Uses an in-process Service with its own HUTCH_HOME (as root: real cgroups); removes everything.
"""

from __future__ import annotations

import argparse
import asyncio
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from hutch.config import Settings  # noqa: E402
from hutch.models import ExecRequest, SandboxSpec  # noqa: E402
from hutch.service import Service  # noqa: E402

CPU = "import time; t = time.perf_counter(); sum(range(10**7)); print(time.perf_counter() - t)"
TREE = (
    "import os, time\n"
    "root = '/tmp/tree'\n"
    "for i in range(40):\n"
    "    os.makedirs(f'{root}/d{i}', exist_ok=True)\n"
    "    for j in range(50):\n"
    "        open(f'{root}/d{i}/f{j}', 'w').close()\n"
    "t = time.perf_counter()\n"
    "n = 0\n"
    "for top, dirs, files in os.walk(root):\n"
    "    for f in files:\n"
    "        os.stat(os.path.join(top, f)); n += 1\n"
    "print(time.perf_counter() - t)\n"
)


def bare(rounds: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"create_first_ms": [], "exec_ms": [], "cpu_s": [], "walk_s": []}
    for _ in range(rounds):
        t = time.perf_counter()
        subprocess.run(["true"], check=True)
        out["create_first_ms"].append((time.perf_counter() - t) * 1000)
        out["exec_ms"].append(out["create_first_ms"][-1])
        out["cpu_s"].append(float(subprocess.run([sys.executable, "-c", CPU], capture_output=True, text=True).stdout))
        with tempfile.TemporaryDirectory() as tmp:
            code = TREE.replace("'/tmp/tree'", repr(tmp + "/tree"))
            out["walk_s"].append(float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout))
    return out


async def runtime(svc: Service, name: str, rounds: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"create_first_ms": [], "exec_ms": [], "idle_mib": [], "cpu_s": [], "walk_s": []}
    provider = svc.provider("local")
    for _ in range(rounds):
        t = time.perf_counter()
        rec = await svc.create(SandboxSpec(runtime=name))
        first = await svc.exec(rec.id, ExecRequest(command=["true"]))
        out["create_first_ms"].append((time.perf_counter() - t) * 1000)
        assert first.exit_code == 0, first
        try:
            for _ in range(5):
                t = time.perf_counter()
                await svc.exec(rec.id, ExecRequest(command=["true"]))
                out["exec_ms"].append((time.perf_counter() - t) * 1000)
            await asyncio.sleep(2)
            mem = provider.usage(rec).get("memory")  # type: ignore[attr-defined]
            if mem is not None:
                out["idle_mib"].append(mem / (1 << 20))
            r = await svc.exec(rec.id, ExecRequest(command=["python3", "-c", CPU]))
            out["cpu_s"].append(float(r.stdout))
            r = await svc.exec(rec.id, ExecRequest(command=["python3", "-c", TREE]))
            out["walk_s"].append(float(r.stdout))
        finally:
            await svc.destroy(rec.id)
    return out


def medians(raw: dict[str, list[float]]) -> dict[str, float]:
    return {k: round(statistics.median(v), 4) for k, v in raw.items() if v}


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="hutch-bench-gvisor-"))
    os.chmod(home, 0o711)
    svc = Service(Settings.load(home=home, pool_size=0))
    try:
        await svc.create(SandboxSpec(runtime="gvisor"))  # the platform probe, once, outside the numbers
        for rec in svc.list():
            await svc.destroy(rec.id)
        results: dict[str, Any] = {"bare": medians(bare(args.rounds))}
        for name in ("bwrap", "gvisor"):  # alternated rounds would be fairer; the same run is what matters here
            results[name] = medians(await runtime(svc, name, args.rounds))
    finally:
        for rec in svc.list():
            await svc.destroy(rec.id)
        await svc.close()
        subprocess.run(["rm", "-rf", str(home)], check=False)
    ratios = {
        name: {k: round(v / results["bare"][k], 2) for k, v in results[name].items() if results["bare"].get(k)}
        for name in ("bwrap", "gvisor")
    }
    report = {
        "command": ["python", "bench/gvisor.py", "--rounds", str(args.rounds)],
        "machine": {"cpus": os.cpu_count(), "load": os.getloadavg(), "kernel": platform.release()},
        "medians": results,
        "ratio_to_bare": ratios,
        "gvisor_to_bwrap": {
            k: round(v / results["bwrap"][k], 2) for k, v in results["gvisor"].items() if results["bwrap"].get(k)
        },
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    asyncio.run(main())
