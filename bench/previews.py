"""An exposed port's cost: the same HTTP server (python3 -m http.server) run on the host
(direct) and inside a sandbox reached through ``hutch expose``'s loopback URL, interleaved.

    python bench/previews.py [--requests 300] [--size 64M] [--rounds 3]

1. Latency: ``--requests`` GETs of a small file, one connection each (as a browser without
   keep-alive, and as the proxy opens one into the sandbox per request); median and p95.
2. Throughput: one GET of a ``--size`` file, ``--rounds`` times; MB/s, median.

A daemon of its own in a temporary HUTCH_HOME; prints one JSON document; stops the daemon
by pid. Not part of bench/run.py.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from hutch.client import Client
from hutch.config import Settings
from hutch.units import parse_size


def fetch(url: str, cookie: str = "") -> int:
    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname or "", u.port, timeout=120)
    try:
        conn.request("GET", u.path, headers={"Cookie": cookie} if cookie else {})
        r = conn.getresponse()
        n = 0
        while chunk := r.read(1 << 20):
            n += len(chunk)
        assert r.status == 200, r.status
        return n
    finally:
        conn.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pct(samples: list[float], p: float) -> float:
    s = sorted(samples)
    return round(s[min(len(s) - 1, int(p * (len(s) - 1)))], 3)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--size", default="64M")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    size = parse_size(args.size)
    home = Path(tempfile.mkdtemp(prefix="hutch-bench-previews-"))
    env = {**os.environ, "HUTCH_HOME": str(home)}
    daemon = subprocess.Popen([sys.executable, "-m", "hutch", "serve", "--json"], env=env, stdout=subprocess.PIPE)
    assert daemon.stdout is not None
    daemon.stdout.readline()
    served = Path(tempfile.mkdtemp(prefix="hutch-bench-www-"))
    host_server = None
    try:
        c = Client(Settings.load(home=str(home)), autostart=False)
        sid = c.create({})["id"]
        c.exec(sid, {"command": ["sh", "-c", f"head -c {size} /dev/zero > /workspace/big && echo hi > /workspace/small"]})
        (served / "big").write_bytes(bytes(size))
        (served / "small").write_text("hi\n")
        c.start(sid, {"command": ["python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"], "cwd": "/workspace"})
        port = free_port()
        host_server = subprocess.Popen(
            [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
            cwd=served,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        doc = c.expose(sid, 8000)
        base = doc["url"].split("?")[0]
        token = doc["url"].split("hutch_preview=")[1]
        cookie = f"hutch_preview_{sid}_8000={token}"
        direct = f"http://127.0.0.1:{port}/"
        deadline = time.monotonic() + 60
        while True:  # both servers answer
            try:
                fetch(base + "small", cookie), fetch(direct + "small")
                break
            except (OSError, AssertionError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        lat: dict[str, list[float]] = {"direct": [], "exposed": []}
        for _ in range(args.requests):
            for name, url, ck in (("direct", direct, ""), ("exposed", base, cookie)):
                t = time.perf_counter()
                fetch(url + "small", ck)
                lat[name].append((time.perf_counter() - t) * 1000)
        thr: dict[str, list[float]] = {"direct": [], "exposed": []}
        for _ in range(args.rounds):
            for name, url, ck in (("direct", direct, ""), ("exposed", base, cookie)):
                t = time.perf_counter()
                n = fetch(url + "big", ck)
                thr[name].append(n / (time.perf_counter() - t) / 1e6)
        out: dict[str, Any] = {
            "requests": args.requests,
            "size_bytes": size,
            "latency_ms": {k: {"median": pct(v, 0.5), "p95": pct(v, 0.95)} for k, v in lat.items()},
            "throughput_mb_s": {k: round(statistics.median(v), 1) for k, v in thr.items()},
            "cpu_count": os.cpu_count(),
        }
        print(json.dumps(out, indent=2))
        c.destroy(sid)
    finally:
        if host_server is not None:
            host_server.terminate()
            host_server.wait()
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)


if __name__ == "__main__":
    main()
