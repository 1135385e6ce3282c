"""Image sandboxes against host-/usr sandboxes: create -> first result, alternating, in one
run; and the snapshot and fork of an image sandbox that wrote 100 MB to its writable root.

    python bench/image_sandboxes.py [--rounds 15] [--cpu-rounds 8] [--written 100] [--out bench/results/image-sandboxes-....json]

Goals (issue 13): create -> first result from an image sandbox <= 1.3x the host-/usr
sandbox (medians of the same run, wall time and CPU time: the client's plus the daemon's
whole process tree, sandboxes included; see bench/cpu.py); snapshot and fork of an image sandbox with 100 MB
written: report the time. The image is a busybox root filesystem imported into the real
daemon's store (``rootfs:DIR``). Uses its own HUTCH_HOME and daemon; removes everything.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "n": len(samples),
        "median_ms": round(statistics.median(samples) * 1000, 1),
        "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))] * 1000, 1),
        "min_ms": round(ordered[0] * 1000, 1),
    }


def create_first(settings: Any, image: str | None, keep: list[Any] | None = None) -> float:
    """Wall time of create + first exec; the sandbox is destroyed, or kept in ``keep`` (destroyed later)."""
    from hutch import Sandbox

    started = time.perf_counter()
    sbx = Sandbox.create(settings=settings, image=image) if image else Sandbox.create(settings=settings)
    r = sbx.exec(["true"])
    took = time.perf_counter() - started
    assert r.exit_code == 0, r.stderr
    if keep is None:
        sbx.destroy()
    else:
        keep.append(sbx)
    return took


def cpu_create_first(daemon_pid: int, settings: Any, image: str | None, rounds: int, per_block: int = 3) -> list[float]:
    """CPU (ms) per create + first exec: client + daemon's whole process tree (bench/cpu.py), destroys unmeasured."""
    from bench.cpu import daemon_block

    out: list[float] = []
    for _ in range(rounds):
        made: list[Any] = []

        def block(made: list[Any] = made) -> None:
            for _ in range(per_block):
                create_first(settings, image, made)

        ms = daemon_block(daemon_pid, block)
        out.append(ms / per_block)
        for sbx in made:
            sbx.destroy()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--cpu-rounds", type=int, default=8, help="blocks of 3 creates per kind, CPU time (0: none)")
    ap.add_argument("--written", type=int, default=100, help="MB the sandbox writes before its snapshot and fork")
    ap.add_argument("--out")
    args = ap.parse_args()
    from tests.conftest import Daemon
    from tests.integration.image_roots import busybox_root, shared_dir

    from hutch import Sandbox
    from hutch.client import Client
    from hutch.client.images import follow

    work = shared_dir("hutch-bench-imgsbx-")
    home = Path(tempfile.mkdtemp(prefix="hutch-bench-home-"))
    daemon = Daemon(home).start()
    result: dict[str, Any] = {"machine": platform.node(), "kernel": platform.release(), "cpus": os.cpu_count()}
    try:
        with Client(daemon.settings, autostart=False) as c:
            follow(c.image_import(f"rootfs:{busybox_root(work / 'busybox')}", "bench-busybox:1"))
        for kind in ("host", "image"):  # warm-up: the agent's bytecode and runtime are made once
            create_first(daemon.settings, "bench-busybox:1" if kind == "image" else None)
        samples: dict[str, list[float]] = {"host": [], "image": []}
        for _ in range(args.rounds):  # alternating, so a load change hits both kinds alike
            samples["host"].append(create_first(daemon.settings, None))
            samples["image"].append(create_first(daemon.settings, "bench-busybox:1"))
        host, image = stats(samples["host"]), stats(samples["image"])
        result["create_first"] = {"host_usr": host, "image": image, "ratio": round(image["median_ms"] / host["median_ms"], 2)}
        result["load_after_create"] = os.getloadavg()
        if args.cpu_rounds:  # CPU time: what a loaded machine does not inflate
            assert daemon.proc is not None
            cpu: dict[str, list[float]] = {"host": [], "image": []}
            for i in range(args.cpu_rounds):
                for kind in ("host", "image") if i % 2 == 0 else ("image", "host"):
                    img = "bench-busybox:1" if kind == "image" else None
                    cpu[kind] += cpu_create_first(daemon.proc.pid, daemon.settings, img, 1)
            ch, ci = statistics.median(cpu["host"]), statistics.median(cpu["image"])
            result["create_first_cpu"] = {
                "host_usr_ms": [round(x, 1) for x in cpu["host"]],
                "image_ms": [round(x, 1) for x in cpu["image"]],
                "host_usr_median_ms": round(ch, 1),
                "image_median_ms": round(ci, 1),
                "ratio": round(ci / ch, 2),
            }
            result["load_after_cpu"] = os.getloadavg()

        sbx = Sandbox.create(settings=daemon.settings, image="bench-busybox:1")
        mb = args.written
        r = sbx.exec(f"dd if=/dev/urandom of=/usr/local/data bs=1M count={mb} 2>/dev/null && sync && ls -l /usr/local/data")
        assert r.exit_code == 0, r.stderr
        started = time.perf_counter()
        snap = sbx.snapshot("bench-snap")
        result["snapshot"] = {"written_mb": mb, "ms": round((time.perf_counter() - started) * 1000, 1), "bytes": snap["size"]}
        started = time.perf_counter()
        children = sbx.fork(1, keep=True)
        result["fork"] = {"written_mb": mb, "ms": round((time.perf_counter() - started) * 1000, 1)}
        child = children[0]
        assert not isinstance(child, Exception), child
        r = child.exec("ls -l /usr/local/data 2>&1")
        result["fork"]["child_has_the_write"] = "No such file" not in r.stdout
        started = time.perf_counter()
        restored = Sandbox.restore("bench-snap", settings=daemon.settings)
        result["restore"] = {"ms": round((time.perf_counter() - started) * 1000, 1)}
        r = restored.exec("ls -l /usr/local/data 2>&1")
        result["restore"]["has_the_write"] = "No such file" not in r.stdout
        result["load_after"] = os.getloadavg()
    finally:
        from tests.conftest import destroy_all, sweep

        destroy_all(home)
        daemon.stop()
        sweep(home)
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
