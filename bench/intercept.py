"""What opening HTTPS costs: hutch's egress proxy intercepting a sandbox that holds placeholder
secrets, against the same proxy relaying a plain CONNECT tunnel, in the same run.

    python3 bench/intercept.py [--rounds N] [--requests N] [--mib N] [--json FILE]

The proxy is hutch's own code (``providers/local/egress.py`` and ``intercept.py``) run in this
process on a loopback listener, as the daemon runs it for a sandbox; the sandbox's side is a
client process on the host (the sandbox's own loopback leg is the same for both and left out).
The upstream is a threaded HTTPS server on 127.0.0.1 with a certificate of a CA made here;
the proxy verifies it with that CA (what ``egress_ca`` does). Two proxy listeners run side by
side: ``tunnel`` (a sandbox without placeholders: CONNECT relayed blind, the client's TLS goes
end to end) and ``intercept`` (a sandbox with a placeholder bound to the upstream's name: the
proxy answers the client's TLS with the sandbox CA's leaf, makes its own TLS connection to the
upstream, reads each request with h11 and puts the value in its Authorization header).

Measured, tunnel and intercept alternating request by request, the order swapped each round:
- ``new connection``: CONNECT, TLS, one ``GET /`` (3-byte body), close: what curl does;
- ``kept-alive``: one more ``GET /`` on a connection already open: what an SDK's session does;
- throughput: ``GET /big`` (``--mib`` MiB) over one connection, MB/s.
Medians of the client's own timing (``time.perf_counter_ns``). Then the proxy's CPU time
(``time.process_time`` of this process; the upstream and the client are other processes) over
batches of one kind at a time (tunnel, intercept, tunnel, intercept; the lower of each kind's
two), per pair of requests (one on a new connection, one kept-alive).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.x509.oid import NameOID

from hutch import pki
from hutch.models import NetworkPolicy, SandboxSpec
from hutch.providers.local.egress import Egress
from hutch.providers.local.placeholders import Vault, placeholder
from hutch.providers.local.sandboxca import SandboxCA

NAME = "upstream.intercept-bench.test"
VALUE = "bench-secret-value-0123456789abcdef"

SERVER = r"""
import http.server, socketserver, ssl, sys
big = int(sys.argv[2])
ZEROS = bytes(1 << 20)
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        if self.path == "/big":
            self.send_response(200)
            self.send_header("Content-Length", str(big))
            self.end_headers()
            left = big
            while left:
                n = min(left, len(ZEROS))
                self.wfile.write(memoryview(ZEROS)[:n])
                left -= n
            return
        ok = self.headers.get("Authorization", "").endswith(sys.argv[3])
        body = b"ok\n" if ok else b"no\n"
        self.send_response(200)
        self.send_header("Content-Length", "3")
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    request_queue_size = 256
srv = S(("127.0.0.1", 0), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1])
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"""

CLIENT = r"""
import http.client, json, socket, ssl, sys, time
cfg = json.loads(sys.argv[1])
ctxs = {k: ssl.create_default_context(cafile=v) for k, v in cfg["cafiles"].items()}
def conn(kind):
    c = http.client.HTTPSConnection("127.0.0.1", cfg["proxies"][kind], context=ctxs[kind], timeout=60)
    c.set_tunnel(cfg["name"], cfg["port"])
    return c
def get(c, path, expect):
    c.request("GET", path, headers={"Authorization": "Bearer " + cfg["token"]})
    r = c.getresponse()
    n = 0
    while chunk := r.read(1 << 18):
        n += len(chunk)
    if r.status != 200 or (expect is not None and n != expect):
        raise SystemExit("bad response %s, %d bytes" % (r.status, n))
kinds = list(cfg["proxies"])
out = {"new": {k: [] for k in kinds}, "kept": {k: [] for k in kinds}, "big": {k: [] for k in kinds}}
kept = {k: conn(k) for k in kinds}
for k in kinds:
    get(kept[k], "/", 3)  # the kept connection is open before timing
for i in range(cfg["requests"]):
    order = kinds if i % 2 == 0 else kinds[::-1]
    for k in order:
        t0 = time.perf_counter_ns()
        c = conn(k)
        get(c, "/", 3)
        c.close()
        out["new"][k].append(time.perf_counter_ns() - t0)
        t0 = time.perf_counter_ns()
        get(kept[k], "/", 3)
        out["kept"][k].append(time.perf_counter_ns() - t0)
for i in range(cfg["big_rounds"]):
    for k in (kinds if i % 2 == 0 else kinds[::-1]):
        c = conn(k)
        t0 = time.perf_counter_ns()
        get(c, "/big", cfg["big"])
        out["big"][k].append(time.perf_counter_ns() - t0)
        c.close()
print(json.dumps(out))
"""


def _ca_files(tmp: Path) -> Path:
    """The upstream's CA and certificate: a PEM of its chain and key, returned; the CA at tmp/ca.pem."""
    ca_key, leaf_key = pki.new_key(), pki.new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "intercept bench CA")])
    now = datetime.datetime.now(datetime.UTC)
    ca = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True).sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    leaf = (
        x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, NAME)]))
        .issuer_name(name).public_key(leaf_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(NAME)]), critical=False).sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    (tmp / "ca.pem").write_bytes(pki.cert_pem(ca))
    (tmp / "server.pem").write_bytes(pki.cert_pem(leaf) + pki.key_pem(leaf_key))
    return tmp / "server.pem"


class Proxies:
    """Two listeners of one Egress in a thread of its own: ``tunnel`` and ``intercept``."""

    def __init__(self, tmp: Path, port: int) -> None:
        (tmp / "hosts").write_text(f"127.0.0.1 {NAME}\n")
        self.events = 0
        self.egress = Egress(str(tmp / "hosts"), self._count, upstream_ca=str(tmp / "ca.pem"))
        self.policy = NetworkPolicy(mode="allowlist", allow_hosts=[NAME], ports=[port], cidrs=["127.0.0.1/32"])
        spec = SandboxSpec(network=self.policy, secrets={"TOKEN": VALUE}, secret_hosts={"TOKEN": [NAME]}, secret_names=["TOKEN"])
        self.token = placeholder("TOKEN")
        self.ca = SandboxCA.new("sbx_bench")
        (tmp / "sandbox-ca.pem").write_bytes(self.ca.pem())
        self.vault = Vault.of(spec, {"TOKEN": self.token}, self.ca)
        self.loop = asyncio.new_event_loop()
        self.ports: dict[str, int] = {}
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        for kind in ("tunnel", "intercept"):
            sock = socket.create_server(("127.0.0.1", 0))
            self.ports[kind] = sock.getsockname()[1]
            asyncio.run_coroutine_threadsafe(self.egress.open(kind, sock, self.policy), self.loop).result()
        self.egress.arm("intercept", self.vault)

    def _count(self, type_: str, sandbox_id: str, run_id: str | None, data: dict[str, Any]) -> None:
        self.events += 1

    def close(self) -> None:
        async def end() -> None:
            await self.egress.close_all()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:  # connections the client left open
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(end(), self.loop).result()
        self.loop.call_soon_threadsafe(self.loop.stop)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200, help="requests of each kind (default 200)")
    parser.add_argument("--rounds", type=int, default=6, help="downloads of each kind (default 6)")
    parser.add_argument("--mib", type=int, default=64, help="size of each download (default 64 MiB)")
    parser.add_argument("--cpu-requests", type=int, default=100, help="requests per CPU batch (default 100)")
    parser.add_argument("--json", metavar="FILE", help="also write the results here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hutch-intercept-bench-") as name:
        tmp = Path(name)
        cert = _ca_files(tmp)
        server = subprocess.Popen([sys.executable, "-c", SERVER, str(cert), str(args.mib << 20), VALUE], stdout=subprocess.PIPE)
        try:
            assert server.stdout is not None
            port = int(server.stdout.readline())
            proxies = Proxies(tmp, port)
            cfg = {
                "name": NAME, "port": port, "proxies": proxies.ports, "token": proxies.token,
                "cafiles": {"tunnel": str(tmp / "ca.pem"), "intercept": str(tmp / "sandbox-ca.pem")},
                "requests": args.requests, "big_rounds": args.rounds, "big": args.mib << 20,
            }  # fmt: skip
            raw = _client(cfg)
            # the proxy's CPU (this process: the upstream and the client are others), one kind at a time
            cpu: dict[str, list[float]] = {}
            for kind in ("tunnel", "intercept", "tunnel", "intercept"):
                one = cfg | {"proxies": {kind: proxies.ports[kind]}, "requests": args.cpu_requests, "big_rounds": 0}
                cpu0 = time.process_time()
                _client(one)
                cpu.setdefault(kind, []).append((time.process_time() - cpu0) / args.cpu_requests)
            proxies.close()
        finally:
            server.kill()
            server.wait()
    report = summarize(raw, args, {k: min(v) for k, v in cpu.items()}, proxies.events)
    print(json.dumps(report, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(report | {"samples_ns": raw}, indent=2))


def _client(cfg: dict[str, Any]) -> dict[str, Any]:
    client = subprocess.run([sys.executable, "-c", CLIENT, json.dumps(cfg)], capture_output=True, text=True, check=False)
    if client.returncode != 0:
        raise SystemExit(f"client failed: {client.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(client.stdout)
    return result


def summarize(raw: dict[str, Any], args: argparse.Namespace, cpu: dict[str, float], events: int) -> dict[str, Any]:
    def ms(values: list[int]) -> float:
        return round(statistics.median(values) / 1e6, 3)

    out: dict[str, Any] = {"load": os.getloadavg(), "cpus": os.cpu_count(), "requests": args.requests, "mib": args.mib}
    for what in ("new", "kept"):
        tunnel, intercept = ms(raw[what]["tunnel"]), ms(raw[what]["intercept"])
        key = "new_connection_ms" if what == "new" else "kept_alive_ms"
        out[key] = {"tunnel": tunnel, "intercept": intercept, "overhead": round(intercept - tunnel, 3)}
        out[key]["ratio"] = round(intercept / tunnel, 2)
    mbs = {k: round(args.mib * 1.048576 / (statistics.median(v) / 1e9), 1) for k, v in raw["big"].items()}
    out["throughput_mb_s"] = mbs | {"ratio": round(mbs["intercept"] / mbs["tunnel"], 2)}
    # per iteration: one request on a new connection and one on the kept-alive one
    out["proxy_cpu_ms_per_request_pair"] = {k: round(v * 1e3, 3) for k, v in cpu.items()}
    out["proxy_cpu_ms_per_request_pair"]["ratio"] = round(cpu["intercept"] / cpu["tunnel"], 2)
    out["events"] = events
    return out


if __name__ == "__main__":
    main()
