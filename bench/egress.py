"""The egress proxy against a direct connection, measured in the same run (bench/run.py).

An upstream HTTP server runs on the host at 127.0.0.1 (a random port), under a name that
only the proxy's hosts file knows (``HUTCH_EGRESS_HOSTS``, set by bench/run.py before the
daemon starts). One sandbox is created with ``allow_hosts=[NAME]``, ``allow_ports=[PORT]``
and ``allow_cidrs=["127.0.0.1/32"]`` (without the CIDR the proxy refuses loopback).

The same client script runs on both sides, with the same interpreter (``/usr/bin/python3``,
which the sandbox sees read-only): inside the sandbox through the proxy at 127.0.0.1:3128,
and on the host straight to the upstream (the baseline). It times every request in
process with ``time.perf_counter_ns``, from ``connect`` to the end of the response: a new
connection per request, as curl, pip or git open them. Batches of requests alternate
between the two sides, the order swapped every round. Standard library only.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

NAME = "upstream.hutch-bench.test"  # resolved by the proxy's hosts file only
PYTHON = "/usr/bin/python3"  # the same binary inside (read-only /usr) and outside the sandbox
TRANSFER_BYTES = 100 << 20  # 100 MiB
SMALL_BODY = b"ok\n"

LABELS = {
    "direct": "direct: host -> upstream, no proxy",
    "proxy_http": "proxy, absolute-form `GET http://NAME:PORT/`",
    "proxy_connect": "proxy, `CONNECT NAME:PORT` then `GET /`",
}

SERVER = r"""
import socket, socketserver, sys
BIG = int(sys.argv[1])
CHUNK = bytes(1 << 20)
class H(socketserver.BaseRequestHandler):
    def handle(self):
        s, data = self.request, b""
        while b"\r\n\r\n" not in data:
            got = s.recv(65536)
            if not got:
                return
            data += got
        if data.split(b" ", 2)[1] == b"/big":
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % BIG)
            left = BIG
            while left:
                n = min(left, len(CHUNK))
                s.sendall(memoryview(CHUNK)[:n])
                left -= n
        else:
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n")
class S(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256
srv = S(("127.0.0.1", 0), H)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"""

CLIENT = r"""
import base64, json, os, socket, sys, time
cfg = json.loads(sys.argv[1])
name, port = cfg["name"], cfg["port"]
user = os.environ.get("HTTP_PROXY", "").partition("//")[2].rpartition("@")[0]
auth = "Proxy-Authorization: Basic %s\r\n" % base64.b64encode((user + ":").encode()).decode() if user else ""
buf = bytearray(256 << 10)

def response(s, expect):
    head, total = b"", 0
    while True:
        n = s.recv_into(buf)
        if not n:
            break
        if b"\r\n\r\n" not in head:
            head += bytes(buf[: min(n, 4096)])
        total += n
    s.close()
    end = head.find(b"\r\n\r\n")
    if not head.startswith((b"HTTP/1.1 200 ", b"HTTP/1.0 200 ")) or end < 0 or total - end - 4 != expect:
        raise SystemExit("bad response: %r, %d bytes" % (head[:200], total))

def direct(path, expect):
    s = socket.create_connection((cfg["upstream"], port))
    s.sendall(("GET %s HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n\r\n" % (path, name, port)).encode())
    response(s, expect)

def proxy_http(path, expect):
    s = socket.create_connection(("127.0.0.1", 3128))
    head = "GET http://%s:%d%s HTTP/1.1\r\nHost: %s:%d\r\n" % (name, port, path, name, port)
    s.sendall((head + auth + "Connection: close\r\n\r\n").encode())
    response(s, expect)

def proxy_connect(path, expect):
    s = socket.create_connection(("127.0.0.1", 3128))
    s.sendall(("CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n%s\r\n" % (name, port, name, port, auth)).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        got = s.recv(4096)
        if not got:
            raise SystemExit("proxy closed during CONNECT: %r" % head)
        head += got
    if not head.startswith(b"HTTP/1.1 200 "):
        raise SystemExit("CONNECT refused: %r" % head[:300])
    s.sendall(("GET %s HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n\r\n" % (path, name, port)).encode())
    response(s, expect)

kinds = [globals()[k] for k in cfg["kinds"]]
out = {k: [] for k in cfg["kinds"]}
warm = {k: [] for k in cfg["kinds"]}
for i in range(cfg["warm"] + cfg["count"]):
    shift = i % len(kinds)
    for fn in kinds[shift:] + kinds[:shift]:
        t0 = time.perf_counter_ns()
        fn(cfg["path"], cfg["expect"])
        t1 = time.perf_counter_ns()
        (warm if i < cfg["warm"] else out)[fn.__name__].append(t1 - t0)
print(json.dumps({"samples_ns": out, "warmup_ns": warm}))
"""


def hosts_line() -> str:
    return f"127.0.0.1 {NAME}\n"


class EgressBench:
    """One upstream server, one sandbox with a network; ``close`` ends the server (the harness destroys the sandbox)."""

    def __init__(
        self,
        tmp: Path,
        create: Callable[..., Any],
        log: Callable[[str], None],
        summarize: Callable[[list[float]], dict[str, Any]],
    ) -> None:
        self.tmp = tmp
        self.create = create
        self.log = log
        self.summarize = summarize
        self.server: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.sbx: Any = None
        self.requests = 0  # proxied requests made, to check the sandbox's egress counters

    def start(self) -> None:
        if not Path(PYTHON).exists():
            raise RuntimeError(f"{PYTHON} is missing: the client runs with it inside and outside the sandbox")
        script = self.tmp / "egress-upstream.py"
        script.write_text(SERVER)
        self.server = subprocess.Popen([sys.executable, "-I", str(script), str(TRANSFER_BYTES)], stdout=subprocess.PIPE)
        assert self.server.stdout is not None
        line = self.server.stdout.readline()
        if not line.strip().isdigit():
            raise RuntimeError(f"the upstream server did not start (said {line!r})")
        self.port = int(line)
        self.sbx = self.create(allow_hosts=[NAME], allow_ports=[self.port], allow_cidrs=["127.0.0.1/32"])
        for kind in LABELS:  # one checked request each way before anything is timed
            self._batch([kind], 1, 0, "/")

    def _cfg(self, kinds: list[str], count: int, warm: int, path: str) -> str:
        expect = TRANSFER_BYTES if path == "/big" else len(SMALL_BODY)
        cfg = {"name": NAME, "port": self.port, "upstream": "127.0.0.1", "kinds": kinds, "count": count, "warm": warm}
        return json.dumps(cfg | {"path": path, "expect": expect})

    def _batch(self, kinds: list[str], count: int, warm: int, path: str) -> dict[str, Any]:
        """One client process: inside the sandbox for proxy kinds, on the host for ``direct``."""
        argv = [PYTHON, "-I", "-S", "-c", CLIENT, self._cfg(kinds, count, warm, path)]
        if kinds == ["direct"]:
            r = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=600)
            code, out, err = r.returncode, r.stdout, r.stderr
        else:
            res = self.sbx.exec(argv, timeout=600)
            code, out, err = res.exit_code, res.stdout, res.stderr
            self.requests += (count + warm) * len(kinds)
        if code != 0:
            raise RuntimeError(f"egress client ({', '.join(kinds)}) exited {code}: {err.strip()[-500:]}")
        parsed: dict[str, Any] = json.loads(out)
        return parsed

    def latency(self, rounds: int, warmup: int, per_batch: int, warm_requests: int) -> dict[str, Any]:
        """Rounds of two batches, proxy and direct, the order swapped every round; ms per request."""
        samples: dict[str, list[float]] = {k: [] for k in LABELS}
        warm: dict[str, list[float]] = {k: [] for k in LABELS}
        sides = (["proxy_http", "proxy_connect"], ["direct"])
        for i in range(warmup + rounds):
            for kinds in sides if i % 2 == 0 else sides[::-1]:
                got = self._batch(list(kinds), per_batch, warm_requests, "/")
                for kind in kinds:
                    ms = [ns / 1e6 for ns in got["samples_ns"][kind]]
                    (warm if i < warmup else samples)[kind].extend(ms)
                    warm[kind].extend(ns / 1e6 for ns in got["warmup_ns"][kind])
            done = i - warmup + 1
            if done > 0 and done % max(1, rounds // 4) == 0:
                self.log(f"egress: round {done}/{rounds}")
        direct = statistics.median(samples["direct"])
        out: dict[str, Any] = {}
        for kind, label in LABELS.items():
            med = statistics.median(samples[kind])
            out[kind] = {
                "label": label,
                "kind": "baseline" if kind == "direct" else "hutch",
                "unit": "ms",
                **self.summarize(samples[kind]),
                "overhead_ms": None if kind == "direct" else med - direct,
                "samples_ms": [round(x, 4) for x in samples[kind]],
                "warmup_samples_ms": [round(x, 4) for x in warm[kind]],
            }
        return out

    def transfer(self, rounds: int, warmup: int) -> dict[str, Any]:
        """100 MiB through the proxy (CONNECT) and directly, alternating; MB/s from the client's timing."""
        times: dict[str, list[float]] = {"direct": [], "proxy_connect": []}
        for i in range(warmup + rounds):
            for kind in ("direct", "proxy_connect") if i % 2 == 0 else ("proxy_connect", "direct"):
                got = self._batch([kind], 1, 0, "/big")
                if i >= warmup:
                    times[kind].append(got["samples_ns"][kind][0] / 1e6)
            self.log(f"egress transfer: round {i + 1}/{warmup + rounds}" + (" (warm-up)" if i < warmup else ""))
        out: dict[str, Any] = {"bytes": TRANSFER_BYTES, "path": "/big", "warmup_rounds": warmup}
        for kind, ms in times.items():
            rates = [TRANSFER_BYTES / 1e6 / (t / 1000) for t in ms]
            out[kind] = {
                "label": "direct: host -> upstream" if kind == "direct" else "proxy: `CONNECT` tunnel from the sandbox",
                "samples_ms": [round(t, 3) for t in ms],
                "samples_mb_s": [round(r, 1) for r in rates],
                "median_mb_s": statistics.median(rates),
            }
        out["ratio"] = out["proxy_connect"]["median_mb_s"] / out["direct"]["median_mb_s"]
        return out

    def counters(self) -> dict[str, Any]:
        """The sandbox's egress counters against the proxied requests made (every one an event)."""
        info = self.sbx.refresh()
        return {"egress_counters": info.get("egress"), "proxied_requests_made": self.requests}

    def close(self) -> None:
        if self.server is not None and self.server.poll() is None:
            self.server.kill()
            self.server.wait(10)
        self.server = None
