"""The gateway's cost and behaviour under load: one ``hutch serve --listen 127.0.0.1:0`` with
TLS (a self-signed certificate made here with openssl) and an API key.

    python bench/gateway.py [--execs N] [--clients 50] [--rate 20] [--seconds 60]

1. Overhead per exec: N ``exec true`` in one sandbox through the unix socket (the owner)
   and through TLS with the key, interleaved in the same run (the sync client: a new
   connection per request, as the CLI does); median and p95 of each, and the difference.
2. Load: ``--clients`` async clients (kept-alive connections), each sending ``--rate``
   ``GET /v1/sandboxes/{id}`` a second for ``--seconds``, paced (a late request is sent at
   once, never in a burst to catch up); latency p50/p99, errors, the rate achieved, and the
   daemon's resident memory sampled every 5 s.

Prints one JSON document and stops the daemon by pid. Not part of bench/run.py.
"""

from __future__ import annotations

import argparse
import asyncio
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

from hutch.client import AsyncClient, Client
from hutch.config import Settings


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def pct(samples: list[float], p: float) -> float:
    s = sorted(samples)
    return round(s[min(len(s) - 1, int(p * (len(s) - 1)))], 2)


def execs(local: Client, remote: Client, sbx: str, n: int) -> dict[str, Any]:
    times: dict[str, list[float]] = {"unix": [], "tls": []}
    for c in (local, remote):
        c.exec(sbx, {"command": ["true"]})  # warm
    for _ in range(n):
        for name, c in (("unix", local), ("tls", remote)):
            t = time.perf_counter()
            c.exec(sbx, {"command": ["true"]})
            times[name].append((time.perf_counter() - t) * 1000)
    out: dict[str, Any] = {k: {"median_ms": round(statistics.median(v), 2), "p95_ms": pct(v, 0.95)} for k, v in times.items()}
    out["overhead_median_ms"] = round(out["tls"]["median_ms"] - out["unix"]["median_ms"], 2)
    return out


async def load(settings: Settings, sbx: str, clients: int, rate: float, seconds: float, pid: int) -> dict[str, Any]:
    latencies: list[float] = []
    errors: list[str] = []
    memory: list[float] = [rss_mib(pid)]
    end = time.monotonic() + seconds

    async def one() -> None:
        client = AsyncClient(settings)
        try:
            await client.get(sbx)
            next_at = time.monotonic()
            while next_at < end:
                now = time.monotonic()
                if next_at > now:
                    await asyncio.sleep(next_at - now)
                t = time.perf_counter()
                try:
                    await client.get(sbx)
                except Exception as exc:  # noqa: BLE001 - counted, the load goes on
                    errors.append(f"{exc.__class__.__name__}: {exc}")
                latencies.append((time.perf_counter() - t) * 1000)
                next_at = max(next_at + 1 / rate, time.monotonic() - 1 / rate)  # late: no burst to catch up
        finally:
            await client.close()

    async def sample() -> None:
        while time.monotonic() < end:
            await asyncio.sleep(5)
            memory.append(rss_mib(pid))

    started = time.monotonic()
    await asyncio.gather(sample(), *(one() for _ in range(clients)))
    elapsed = time.monotonic() - started
    return {
        "clients": clients,
        "target_rps": clients * rate,
        "achieved_rps": round(len(latencies) / elapsed, 1),
        "requests": len(latencies),
        "errors": len(errors),
        "first_errors": errors[:3],
        "p50_ms": pct(latencies, 0.50),
        "p99_ms": pct(latencies, 0.99),
        "max_ms": pct(latencies, 1.0),
        "daemon_rss_mib": {"start": memory[0], "end": memory[-1], "max": max(memory), "samples": memory},
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--execs", type=int, default=200)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--seconds", type=float, default=60.0)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="hutch-bench-gw-"))
    home = Path(tempfile.mkdtemp(prefix="hutch-bench-gw-home-"))  # its own: sandbox users must reach beneath it
    proc = None
    try:
        cert, key = tmp / "cert.pem", tmp / "key.pem"
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1",
             "-subj", "/CN=bench", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
            check=True, capture_output=True,
        )  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith("HUTCH_")} | {"HUTCH_HOME": str(home)}
        cmd = [sys.executable, "-m", "hutch", "serve", "--json", "--listen", "127.0.0.1:0"]
        proc = subprocess.Popen(
            [*cmd, "--tls-cert", str(cert), "--tls-key", str(key)], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        assert proc.stdout is not None
        url = json.loads(proc.stdout.readline())["listen"]
        local = Client(Settings.load(home=home), autostart=False)
        made = local.create_key({"name": "bench"})
        (tmp / "bench.key").write_text(made["key"])
        settings = Settings.load(home=tmp / "client", host=url, token_file=str(tmp / "bench.key"), ca_file=str(cert))
        remote = Client(settings)
        sbx = remote.create({"limits": {"memory": "256M"}})["id"]
        result = {
            "exec": execs(local, remote, sbx, args.execs),
            "load": asyncio.run(load(settings, sbx, args.clients, args.rate, args.seconds, proc.pid)),
            "cpus": os.cpu_count(),
            "loadavg_1m": round(os.getloadavg()[0], 2),
        }
        remote.destroy(sbx)
        print(json.dumps(result, indent=2))
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
