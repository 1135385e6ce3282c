"""The gateway's CPU per request: one ``hutch serve --listen 127.0.0.1:0`` over TLS with an
API key, and its own process's CPU time (user + system from /proc, not wall time; the
sandboxes' processes are not counted) over N requests of each kind, sent one after another on
a kept-alive connection:

- ``key``: ``GET /v1/sandboxes/SBX`` (the key check, one sandbox read),
- ``list``: ``GET /v1/sandboxes`` with ``--sandboxes`` live sandboxes of the key,
- ``exec``: ``POST /v1/sandboxes/SBX/exec`` of ``true``.

Then a short load like bench/gateway.py's (``--clients`` async clients at ``--rate`` each for
``--seconds``): requests a second achieved and the daemon's CPU per request under it.

    python bench/gateway_cpu.py [--requests 300] [--sandboxes 20] [--clients 50] [--rate 20] [--seconds 20]
    python bench/gateway_cpu.py --profile FILE   # also cProfile the daemon (pstats file)

Prints one JSON document; stops the daemon by its pid. Not part of bench/run.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from hutch.client import Client
from hutch.config import Settings

TICK_MS = 1000.0 / os.sysconf("SC_CLK_TCK")
PROFILED = """
import cProfile, sys, time
from hutch.cli import main
prof = cProfile.Profile(time.process_time)
prof.enable()
try:
    main()
finally:
    prof.disable()
    prof.dump_stats({out!r})
"""


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def own_cpu_ms(pid: int) -> float:
    """The process's own user + system CPU (ms), its reaped children left out."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_MS


def per_request(pid: int, h: httpx.Client, method: str, path: str, n: int, body: Any = None) -> dict[str, float]:
    for _ in range(5):  # warm
        h.request(method, path, json=body).raise_for_status()
    c0, t0 = own_cpu_ms(pid), time.monotonic()
    for _ in range(n):
        h.request(method, path, json=body).raise_for_status()
    wall = time.monotonic() - t0
    return {"cpu_ms_per_request": round((own_cpu_ms(pid) - c0) / n, 3), "sequential_rps": round(n / wall, 1)}


async def _connections(
    url: str, secret: str, cert: str, path: str, clients: int, rate: float, end: float
) -> tuple[list[float], int]:
    """``clients`` kept-alive TLS connections, each sending ``GET path`` ``rate`` times a second
    until ``end`` (paced; a late request is sent at once, never a burst to catch up). A raw
    HTTP/1.1 client: the load generator must cost little next to the gateway it measures."""
    host, port = url.removeprefix("https://").rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=cert)
    request = f"GET {path} HTTP/1.1\r\nhost: {host}\r\nauthorization: Bearer {secret}\r\n\r\n".encode()
    latencies: list[float] = []
    errors = [0]

    async def one() -> None:
        reader, writer = await asyncio.open_connection(host, int(port), ssl=ctx, server_hostname=host)
        try:
            next_at = time.monotonic()
            while next_at < end:
                now = time.monotonic()
                if next_at > now:
                    await asyncio.sleep(next_at - now)
                sent = time.perf_counter()
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length:", 1)[1].split(b"\r\n", 1)[0])
                await reader.readexactly(length)
                if head.startswith(b"HTTP/1.1 200 "):
                    latencies.append((time.perf_counter() - sent) * 1000)
                else:
                    errors[0] += 1
                next_at = max(next_at + 1 / rate, time.monotonic() - 1 / rate)
        finally:
            writer.close()

    results = await asyncio.gather(*(one() for _ in range(clients)), return_exceptions=True)
    return latencies, errors[0] + sum(1 for r in results if isinstance(r, BaseException))


def _worker(job: tuple[str, str, str, str, int, float, float]) -> tuple[list[float], int]:
    return asyncio.run(_connections(*job))


def load(url: str, secret: str, cert: Path, sbx: str, clients: int, rate: float, seconds: float, pid: int) -> dict[str, Any]:
    """The connections spread over two processes (this machine's cores), the daemon's CPU over the whole of it."""
    import multiprocessing

    procs = 2
    rss0 = rss_mib(pid)
    c0, t0 = own_cpu_ms(pid), time.monotonic()
    end = t0 + seconds
    job = (url, secret, str(cert), f"/v1/sandboxes/{sbx}", clients // procs, rate, end)
    with multiprocessing.get_context("fork").Pool(procs) as pool:
        counts = pool.map(_worker, [job] * procs)
    elapsed = time.monotonic() - t0
    cpu = own_cpu_ms(pid) - c0
    latencies = sorted(x for c in counts for x in c[0])
    done, errors = len(latencies), sum(c[1] for c in counts)
    return {
        "clients": clients // procs * procs,
        "target_rps": clients // procs * procs * rate,
        "achieved_rps": round(done / elapsed, 1),
        "errors": errors,
        "daemon_cpu_ms_per_request": round(cpu / max(1, done), 3),
        "daemon_cores": round(cpu / 1000 / elapsed, 2),  # how much of a core the daemon used
        "p50_ms": round(latencies[len(latencies) // 2], 2) if latencies else None,
        "p99_ms": round(latencies[int(len(latencies) * 0.99)], 2) if latencies else None,
        "daemon_rss_mib": {"start": rss0, "end": rss_mib(pid)},
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--sandboxes", type=int, default=20)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--profile", default="")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="hutch-bench-gwcpu-"))
    home = Path(tempfile.mkdtemp(prefix="hutch-bench-gwcpu-home-"))
    proc = None
    try:
        cert, key = tmp / "cert.pem", tmp / "key.pem"
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1",
             "-subj", "/CN=bench", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
            check=True, capture_output=True,
        )  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith("HUTCH_")} | {"HUTCH_HOME": str(home)}
        env["HUTCH_POOL_SIZE"] = "0"
        run = ["-m", "hutch"]
        if args.profile:  # cProfile on CPU time (not wall time: the machine is shared)
            run = ["-c", PROFILED.format(out=str(Path(args.profile).resolve()))]
        cmd = [sys.executable, *run, "serve", "--json", "--listen", "127.0.0.1:0"]
        proc = subprocess.Popen(
            [*cmd, "--tls-cert", str(cert), "--tls-key", str(key)], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        assert proc.stdout is not None
        url = json.loads(proc.stdout.readline())["listen"]
        local = Client(Settings.load(home=home), autostart=False)
        secret = local.create_key({"name": "bench"})["key"]
        (tmp / "bench.key").write_text(secret)
        remote = Client(Settings.load(home=tmp / "client", host=url, token_file=str(tmp / "bench.key"), ca_file=str(cert)))
        boxes = [remote.create({"limits": {"memory": "64M"}, "provider": "fake"})["id"] for _ in range(args.sandboxes - 1)]
        sbx = remote.create({"limits": {"memory": "256M"}})["id"]
        ctx = ssl.create_default_context(cafile=str(cert))
        with httpx.Client(base_url=url, verify=ctx, headers={"authorization": f"Bearer {secret}"}, timeout=60) as h:
            result: dict[str, Any] = {
                "key": per_request(proc.pid, h, "GET", f"/v1/sandboxes/{sbx}", args.requests),
                "list": per_request(proc.pid, h, "GET", "/v1/sandboxes", args.requests),
                "exec": per_request(proc.pid, h, "POST", f"/v1/sandboxes/{sbx}/exec", args.requests, {"command": ["true"]}),
            }
        result["load"] = load(url, secret, cert, sbx, args.clients, args.rate, args.seconds, proc.pid)
        result |= {"sandboxes": args.sandboxes, "cpus": os.cpu_count(), "loadavg_1m": round(os.getloadavg()[0], 2)}
        for ref in [sbx, *boxes]:
            remote.destroy(ref)
        print(json.dumps(result, indent=2))
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
