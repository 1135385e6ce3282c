"""A background run is acknowledged only once it lives in the sandbox: a daemon killed with
SIGKILL right after the acknowledgement never turns it into a run that "died while the
daemon was down"."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.conftest import Daemon, destroy_all, sweep

from hutch.errors import HutchError

ROUNDS = 4
WORKERS = 12
ACKS_BEFORE_KILL = 24  # per round; the daemon is killed by the thread that gets this acknowledgement
COMMAND = ["sh", "-c", "sleep 0.3; echo done"]


def _round(d: Daemon, sandbox_id: str) -> list[str]:
    """Background execs from many threads until the daemon is killed; the acknowledged ids."""
    acked: list[str] = []
    lock = threading.Lock()
    killed = threading.Event()

    def worker() -> None:
        with d.client() as c:
            while not killed.is_set():
                try:
                    run = c.exec(sandbox_id, {"command": COMMAND, "background": True})
                except (HutchError, ValueError):
                    # the daemon is gone: nothing was acknowledged (ValueError: it died between
                    # the response's headers and its body)
                    return
                with lock:
                    acked.append(run["id"])
                    if len(acked) == ACKS_BEFORE_KILL and not killed.is_set():
                        killed.set()
                        d.kill9()  # at once, while other acknowledgements are in flight
                        return

    with ThreadPoolExecutor(WORKERS) as pool:
        for f in [pool.submit(worker) for _ in range(WORKERS)]:
            f.result()
    assert killed.is_set()
    return acked


def test_acknowledged_background_runs_survive_daemon_sigkill(hutch_home: Path) -> None:
    d = Daemon(hutch_home, HUTCH_MAX_BACKGROUND_RUNS="10000").start()
    try:
        with d.client() as c:
            sandbox_id = c.create({})["id"]
        acked: list[str] = []
        for _ in range(ROUNDS):
            acked += _round(d, sandbox_id)
            d.start()  # the next daemon adopts what the killed one left
        with d.client() as c:
            deadline = time.monotonic() + 120
            runs = {r["id"]: r for r in c.runs(sandbox_id)}
            while any(runs[i]["status"] == "running" for i in acked) and time.monotonic() < deadline:
                time.sleep(0.2)
                runs = {r["id"]: r for r in c.runs(sandbox_id)}
            bad = {i: (runs[i]["status"], runs[i]["error"]) for i in acked if runs[i]["status"] != "completed"}
            assert not bad, f"{len(bad)} of {len(acked)} acknowledged runs did not complete, e.g. {sorted(bad.items())[:3]}"
            for run_id in acked[:: max(1, len(acked) // 10)]:
                assert c.output(run_id)["stdout"]["data"] == "done\n"
    finally:
        try:
            destroy_all(hutch_home)
        finally:
            d.stop()
            sweep(hutch_home)
