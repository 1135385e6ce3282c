"""An exposed port of a cluster sandbox: what one connection through the node's port WebSocket
costs (hutch.providers.cluster.tunnel), against a plain loopback TCP connection to the same
server on the host (the floor: no sandbox, no relay).

    python bench/cluster_ports.py [--rounds 30] [--mib 64]

No Ray: a node daemon is started as a node's actor starts it (NodeDaemon, on 127.0.0.1, TLS and
its token); this process is the gateway's side (uvloop, as the daemon). Measured, medians:
opening a connection and one small request/answer on it; a download of MIB MiB: wall,
MB/s, and CPU per MiB of the gateway's side (this process) and of the node's daemon (its
/proc times). The node daemon and the sandbox are removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import uvloop

SERVER = r"""
import socket, sys, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(64)
print(s.getsockname()[1], flush=True)
block = b"x" * (1 << 20)
def one(c):
    n = int(c.makefile("rb").readline())
    while n > 0:
        c.sendall(block[: min(n, len(block))]); n -= len(block)
    c.close()
while True:
    c, _ = s.accept()
    threading.Thread(target=one, args=(c,), daemon=True).start()
"""


def cpu_of(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def fetch(sock: socket.socket, n: int) -> int:
    reader, writer = await asyncio.open_connection(sock=sock, limit=1 << 20)
    writer.write(b"%d\n" % n)
    await writer.drain()
    got = 0
    while chunk := await reader.read(1 << 20):
        got += len(chunk)
    writer.close()
    return got


async def main(rounds: int, mib: int) -> dict[str, Any]:
    from hutch.providers.cluster.daemon import NodeDaemon
    from hutch.providers.cluster.http import NodeClient, sandbox
    from hutch.providers.cluster.tunnel import Tunnels

    home = Path(tempfile.mkdtemp(prefix="hutch-bench-ports-"))
    home.chmod(0o755)
    for name in [k for k in os.environ if k.startswith("HUTCH_")]:
        del os.environ[name]
    os.environ |= {"HUTCH_NODE_HOME": str(home / "node"), "HUTCH_POOL_SIZE": "0"}
    node_daemon = NodeDaemon("127.0.0.1")  # its daemon is our child: reaped below
    info = node_daemon.info()
    client = NodeClient("n1", str(info["url"]), str(info["token"]), str(info["ca"]))
    tunnels = Tunnels()
    plain = subprocess.Popen([sys.executable, "-c", SERVER, "0"], stdout=subprocess.PIPE, text=True)
    made: dict[str, Any] = {}
    try:
        assert plain.stdout is not None
        host_port = int(plain.stdout.readline())
        made = await client.json("POST", "/v1/sandboxes", json={"provider": "local"})
        ref = str(made["id"])
        await client.json("POST", sandbox(ref) + "/exec", json={"command": ["python3", "-c", SERVER, "8123"], "background": True})
        deadline = time.monotonic() + 60
        while True:  # the server inside is up
            try:
                await fetch(await tunnels.open(client, ref, 8123), 1)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)

        async def via_tunnel() -> socket.socket:
            return await tunnels.open(client, ref, 8123)

        async def via_tcp() -> socket.socket:
            sock = socket.create_connection(("127.0.0.1", host_port))
            sock.setblocking(False)
            return sock

        out: dict[str, Any] = {"rounds": rounds, "mib": mib, "load": os.getloadavg()[0]}
        for name, opener in (("tunnel", via_tunnel), ("tcp", via_tcp)):
            small = []
            for _ in range(rounds):
                t = time.perf_counter()
                assert await fetch(await opener(), 100) == 100
                small.append((time.perf_counter() - t) * 1000)
            t, cpu, node = time.perf_counter(), time.process_time(), cpu_of(int(info["pid"]))
            assert await fetch(await opener(), mib << 20) == mib << 20
            wall = time.perf_counter() - t
            out[name] = {
                "open_and_request_ms_median": round(statistics.median(small), 2),
                "open_and_request_ms_p90": round(sorted(small)[int(len(small) * 0.9)], 2),
                "download_mb_s": round(mib * 1.048576 / wall, 1),
                "gateway_cpu_ms_per_mib": round((time.process_time() - cpu) * 1000 / mib, 2),
                "node_daemon_cpu_ms_per_mib": round((cpu_of(int(info["pid"])) - node) * 1000 / mib, 2),
            }
        return out
    finally:
        plain.kill()
        plain.wait()
        await tunnels.close()
        if made:
            await client.json("DELETE", sandbox(str(made["id"])))
        await client.close()
        os.kill(int(info["pid"]), signal.SIGTERM)
        if node_daemon.proc is not None:
            await asyncio.to_thread(node_daemon.proc.wait, 60)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--mib", type=int, default=64)
    args = parser.parse_args()
    print(json.dumps(uvloop.run(main(args.rounds, args.mib)), indent=2))
