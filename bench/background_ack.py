"""How long a background exec takes to be acknowledged (``exec --background`` round trip).

    python bench/background_ack.py [--runs 300] [--threads 8]

Starts its own daemon in a throwaway HUTCH_HOME, makes one sandbox, then times N
sequential background execs of ``true`` (the median and p90 of the acknowledgement), and
the acknowledgements per second from ``--threads`` threads at once. Cleans up after itself.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HOME = Path(tempfile.mkdtemp(prefix="hutch-bench-ack-"))
os.chmod(HOME, 0o711)
os.environ["HUTCH_HOME"] = str(HOME)
os.environ["HUTCH_MAX_BACKGROUND_RUNS"] = "100000"

from hutch.client import Client  # noqa: E402
from hutch.config import Settings  # noqa: E402
from hutch.server.home import socket_answers  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--threads", type=int, default=8)
    args = parser.parse_args()
    settings = Settings.load(home=HOME)
    log = open(HOME / "daemon.log", "ab")  # noqa: SIM115 - owned by the child
    daemon = subprocess.Popen([sys.executable, "-m", "hutch", "serve"], stdout=log, stderr=log)
    try:
        while not socket_answers(settings.socket_path):
            time.sleep(0.02)
        with Client(settings, autostart=False) as c:
            sid = c.create({})["id"]
            req = {"command": ["true"], "background": True}
            for _ in range(20):  # warm-up
                c.exec(sid, req)
            samples = []
            for _ in range(args.runs):
                t0 = time.perf_counter()
                c.exec(sid, req)
                samples.append((time.perf_counter() - t0) * 1000)

        def many(n: int) -> None:
            with Client(settings, autostart=False) as cc:
                for _ in range(n):
                    cc.exec(sid, req)

        per = max(1, args.runs // args.threads)
        t0 = time.perf_counter()
        with ThreadPoolExecutor(args.threads) as pool:
            list(pool.map(many, [per] * args.threads))
        rate = per * args.threads / (time.perf_counter() - t0)
        samples.sort()
        print(
            json.dumps(
                {
                    "runs": args.runs,
                    "ack_ms_median": round(statistics.median(samples), 2),
                    "ack_ms_p90": round(samples[int(len(samples) * 0.9)], 2),
                    "threads": args.threads,
                    "acks_per_s": round(rate, 1),
                }
            )
        )
        with Client(settings, autostart=False) as c:
            c.destroy(sid)
    finally:
        daemon.terminate()
        daemon.wait(30)
        subprocess.run(["rm", "-rf", str(HOME)], check=False)


if __name__ == "__main__":
    main()
