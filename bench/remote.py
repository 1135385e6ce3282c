"""Round trip of the sync client to one daemon: its unix socket, its TCP listener in clear
(loopback) and with TLS (a self-signed certificate made here with openssl).

    python bench/remote.py [N]

Starts ``hutch serve --listen 127.0.0.1:0`` twice in throwaway homes (one plain, one TLS),
times N ``GET /v1/health`` calls per transport (a new connection each, as the client does),
prints one JSON document (median and p95 in ms) and stops the daemons by pid. Not part of
bench/run.py; standard library and hutch only.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hutch.client import Client
from hutch.config import Settings


def serve(home: Path, *args: str) -> tuple[subprocess.Popen[bytes], str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HUTCH_")} | {"HUTCH_HOME": str(home)}
    cmd = [sys.executable, "-m", "hutch", "serve", "--json", "--listen", "127.0.0.1:0", *args]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    return proc, json.loads(proc.stdout.readline())["listen"]


def timed(client: Client, n: int) -> dict[str, float]:
    client.health()
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        client.health()
        samples.append((time.perf_counter() - t) * 1000)
    samples.sort()
    return {"median_ms": round(statistics.median(samples), 3), "p95_ms": round(samples[int(0.95 * (n - 1))], 3)}


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    tmp = Path(tempfile.mkdtemp(prefix="hutch-bench-remote-"))
    procs = []
    try:
        (tmp / "token").write_text(secrets.token_urlsafe(32))
        cert, key = tmp / "cert.pem", tmp / "key.pem"
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1",
             "-subj", "/CN=bench", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
            check=True, capture_output=True,
        )  # fmt: skip
        plain, plain_url = serve(tmp / "a", "--token-file", str(tmp / "token"))
        procs.append(plain)
        tls, tls_url = serve(tmp / "b", "--token-file", str(tmp / "token"), "--tls-cert", str(cert), "--tls-key", str(key))
        procs.append(tls)
        client_home = tmp / "client"
        results = {
            "unix": timed(Client(Settings.load(home=tmp / "a"), autostart=False), n),
            "http_loopback": timed(Client(Settings.load(home=client_home, host=plain_url, token_file=str(tmp / "token"))), n),
            "https_loopback": timed(
                Client(Settings.load(home=client_home, host=tls_url, token_file=str(tmp / "token"), ca_file=str(cert))), n
            ),
        }
        print(json.dumps({"requests": n, "call": "GET /v1/health", **results}, indent=2))
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
            proc.wait(15)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
