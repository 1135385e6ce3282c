"""Exec round trip of the unikraft provider through the spec-built test server.

    python bench/unikraft_exec.py [--rounds 50] [--out bench/results/unikraft-exec-....json]

An in-process Service talks HTTP to the test server on loopback (a subprocess, whose
instances are local sandboxes). Measures create (claim + instance + plugin ready), the
foreground exec round trip of `true` (median, p90), the same on a local sandbox for
reference, the API requests per exec, and destroy (delete + absence proof). The test
server's own cost (a local bwrap exec per command) is inside the unikraft numbers: they
say what hutch's client side adds on top, not what the real service would take.
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

TOKEN = "bench-token"


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def measure(url: str, rounds: int, home: Path) -> dict[str, object]:
    from hutch.config import Settings
    from hutch.models import ExecRequest, SandboxSpec
    from hutch.service import Service

    svc = Service(Settings.load(home=home))
    out: dict[str, object] = {}
    try:
        t0 = time.perf_counter()
        rec = await svc.create(SandboxSpec(provider="unikraft", provider_options={"metro": url}))
        out["create_ms"] = round((time.perf_counter() - t0) * 1000, 1)
        api = svc.provider("unikraft").api(url)  # type: ignore[attr-defined]
        local = await svc.create(SandboxSpec(provider="local"))
        for name, ref in (("unikraft", rec.id), ("local", local.id)):
            times = []
            n0 = api.requests
            for _ in range(rounds):
                t = time.perf_counter()
                r = await svc.exec(ref, ExecRequest(command=["true"]))
                times.append((time.perf_counter() - t) * 1000)
                assert r.exit_code == 0
            out[f"{name}_exec_ms"] = {"median": round(statistics.median(times), 2), "p90": round(pct(times, 0.9), 2)}
            if name == "unikraft":
                out["requests_per_exec"] = (api.requests - n0) / rounds
        t0 = time.perf_counter()
        await svc.destroy(rec.id)
        out["destroy_ms"] = round((time.perf_counter() - t0) * 1000, 1)
        await svc.destroy(local.id)
    finally:
        for r in svc.list():
            await svc.destroy(r.id)
        await svc.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--out")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="hutch-bench-ukc-"))
    base.chmod(0o711)  # the sandboxes' own users must be able to reach their directories
    server = subprocess.Popen(
        [sys.executable, "-m", "hutch.testing.unikraft", "--token", TOKEN, "--home", str(base / "ts")],
        stdout=subprocess.PIPE,
    )
    try:
        assert server.stdout is not None
        url = json.loads(server.stdout.readline())["url"]
        os.environ["HUTCH_UNIKRAFT_TOKEN"] = TOKEN
        result = asyncio.run(measure(url, args.rounds, base / "home"))
    finally:
        server.terminate()
        server.wait(60)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    result |= {"rounds": args.rounds, "python": platform.python_version(), "time": now}
    text = json.dumps(result, indent=2)
    print(text)
    out = Path(args.out or f"bench/results/unikraft-exec-{time.strftime('%Y%m%d-%H%M%S')}.json")
    out.write_text(text + "\n")
    subprocess.run(["rm", "-rf", str(base)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
