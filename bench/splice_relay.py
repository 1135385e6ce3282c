"""The egress proxy's relay alone, in one process on uvloop: CPU and wall to move bytes from
a sender through a relay to a reader over loopback TCP, with the kernel's splice
(providers/local/splice.py) and with the stream copy it replaced, alternating.

    python bench/splice_relay.py [--mib 256] [--rounds 5]

The sender and the reader run in a child process (their CPU is not counted); this process
runs only the relay, so its CPU (``time.process_time``) is the relay's. Prints medians.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time

import uvloop

from hutch.providers.local import splice

PEER = """
import socket, sys, threading
mib, port_in, port_out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
out = socket.create_connection(("127.0.0.1", port_out))  # the relay's upstream side reads from here
def send():
    block = b"x" * (1 << 20)
    s = socket.create_connection(("127.0.0.1", port_in))
    for _ in range(mib):
        s.sendall(block)
    s.shutdown(socket.SHUT_WR)
    s.recv(1)
threading.Thread(target=send, daemon=True).start()
got = 0
while chunk := out.recv(1 << 20):
    got += len(chunk)
print(got)
"""


async def copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(1 << 16):
        writer.write(data)
        await writer.drain()
    writer.write_eof()


async def one(mib: int, use_splice: bool) -> tuple[float, float]:
    sink: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.get_running_loop().create_future()
    done = asyncio.Event()

    async def upstream(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        sink.set_result((r, w))
        await done.wait()

    async def front(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        up_r, up_w = await sink
        c0, t0 = time.process_time(), time.monotonic()
        a = splice.spliceable(r, w) if use_splice else None
        b = splice.spliceable(up_r, up_w) if use_splice else None
        if a is not None and b is not None:
            await splice.relay(a, splice.buffered(r), b, splice.buffered(up_r))
        else:
            await copy(r, up_w)
        result.append((time.process_time() - c0, time.monotonic() - t0))
        up_w.close()
        w.close()
        done.set()

    result: list[tuple[float, float]] = []
    s_up = await asyncio.start_server(upstream, "127.0.0.1", 0)
    s_front = await asyncio.start_server(front, "127.0.0.1", 0)
    ports = [s.sockets[0].getsockname()[1] for s in (s_front, s_up)]
    peer = await asyncio.create_subprocess_exec(sys.executable, "-c", PEER, str(mib), *map(str, ports), stdout=subprocess.PIPE)
    out, _ = await peer.communicate()
    assert int(out) == mib << 20, out
    await done.wait()
    for s in (s_up, s_front):
        s.close()
    return result[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    samples: dict[str, list[tuple[float, float]]] = {"splice": [], "copy": []}
    for i in range(args.rounds):
        for kind in ("splice", "copy") if i % 2 == 0 else ("copy", "splice"):
            samples[kind].append(uvloop.run(one(args.mib, kind == "splice")))
    med = {}
    for k, v in samples.items():
        cpu, wall = statistics.median(c for c, _ in v), statistics.median(w for _, w in v)
        med[k] = {"cpu_ms_per_mib": round(1000 * cpu / args.mib, 3), "mb_s": round(args.mib * 1.048576 / wall)}
    print(json.dumps({"mib": args.mib, "rounds": args.rounds, "medians": med, "loadavg": os.getloadavg()}, indent=1))
    return 0


if __name__ == "__main__":
    socket.setdefaulttimeout(None)
    raise SystemExit(main())
