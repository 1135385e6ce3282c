"""Image sandboxes against host-/usr sandboxes: create -> first result, alternating, in one
run; and the snapshot and fork of an image sandbox that wrote 100 MB to its writable root.

    python bench/image_sandboxes.py [--rounds 15] [--written 100] [--out bench/results/image-sandboxes-....json]

Goals (issue 13): create -> first result from an image sandbox <= 1.3x the host-/usr
sandbox (medians of the same run); snapshot and fork of an image sandbox with 100 MB
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


def create_first(settings: Any, image: str | None) -> float:
    from hutch import Sandbox

    started = time.perf_counter()
    sbx = Sandbox.create(settings=settings, image=image) if image else Sandbox.create(settings=settings)
    r = sbx.exec(["true"])
    took = time.perf_counter() - started
    assert r.exit_code == 0, r.stderr
    sbx.destroy()
    return took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
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
