"""Image store benchmarks: pull of a ~50 MB image from a local registry (Debian's docker-registry
on 127.0.0.1, the image pushed with skopeo), a second pull of it (blob bytes transferred), and
the disk 20 sandboxes of one image add.

    python bench/images.py [--rounds 3] [--sandboxes 20] [--out bench/results/images-....json]

Each round: a fresh daemon pulls the image (its first pull: wall time, and the CPU time of the
daemon's process tree, which the machine's load does not inflate), pulls it again, then pulls
another image of the same size (a warm daemon's pull).

Goals (issue 13): pull >= 100 MB/s; a second pull transfers 0 bytes; 20 sandboxes of one image
add no copy of its layers. Uses its own HUTCH_HOME, registry and daemon; removes everything.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MB = 1 << 20


def du(path: Path) -> int:
    """Bytes of disk a tree uses, each inode counted once (du -s --bytes would count apparent sizes)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for top, dirs, files in os.walk(path):
        for name in dirs + files:
            try:
                st = os.lstat(os.path.join(top, name))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sandboxes", type=int, default=20)
    ap.add_argument("--out")
    args = ap.parse_args()
    from bench.cpu import settle
    from tests.conftest import Daemon
    from tests.imagekit import Registry, image_parts, layer_tar, oci_layout

    from hutch import Sandbox
    from hutch.client.images import follow

    work = Path(tempfile.mkdtemp(prefix="hutch-bench-images-"))
    work.chmod(0o755)  # the homes below it: sandbox users traverse it
    reg = Registry().start()
    result: dict[str, Any] = {"machine": platform.machine(), "cpus": os.cpu_count(), "time": time.time()}
    daemons: list[Daemon] = []
    try:
        layout = work / "layout"

        def image(name: str) -> None:  # busybox + 48 MiB of incompressible data in 4 layers
            layers = [layer_tar({"etc/hello.txt": b"hi\n"})] + [
                layer_tar({f"data/blob{i}.bin": os.urandom(12 * MB)}, busybox=False) for i in range(4)
            ]
            oci_layout(layout, {name: [(*image_parts(layout, layers), None)]})
            reg.push(layout, name, f"bench/{name}:1")

        for name in ("big", "other"):
            image(name)
        ref, other = f"{reg.host}/bench/big:1", f"{reg.host}/bench/other:1"
        pulls, seconds, second_bytes, warm, cpu_ms, warm_cpu_ms = [], [], [], [], [], []
        for _ in range(args.rounds):
            home = work / f"home-{len(daemons)}"
            home.mkdir()
            d = Daemon(home).start()
            daemons.append(d)
            assert d.proc is not None
            c = d.client()
            d0 = settle(d.proc.pid)
            t = time.perf_counter()
            first = follow(c.image_pull(ref))  # the daemon's first pull: its image code is imported now
            elapsed = time.perf_counter() - t
            cpu_ms.append(settle(d.proc.pid) - d0)
            size = first["image"]["size"]
            seconds.append(elapsed)
            pulls.append(size / MB / elapsed)
            second_bytes.append(follow(c.image_pull(ref))["transferred"])
            d0 = settle(d.proc.pid)
            t = time.perf_counter()
            follow(c.image_pull(other))  # the same size, other layers, a daemon that has pulled before
            warm.append(size / MB / (time.perf_counter() - t))
            warm_cpu_ms.append(settle(d.proc.pid) - d0)
        result["image_bytes"] = size
        result["pull_seconds"] = seconds
        result["pull_mb_per_s_median"] = statistics.median(pulls)
        result["pull_mb_per_s"] = pulls
        result["warm_pull_mb_per_s"] = warm
        result["warm_pull_mb_per_s_median"] = statistics.median(warm)
        result["pull_daemon_cpu_ms"] = cpu_ms  # the daemon's process tree, the first pull of each daemon
        result["pull_mb_per_daemon_cpu_s_median"] = statistics.median(size / MB / (ms / 1000) for ms in cpu_ms)
        result["warm_pull_daemon_cpu_ms"] = warm_cpu_ms
        result["warm_pull_mb_per_daemon_cpu_s_median"] = statistics.median(size / MB / (ms / 1000) for ms in warm_cpu_ms)
        result["load"] = os.getloadavg()
        result["second_pull_transferred_bytes"] = second_bytes
        result["image_bytes"] = size
        result["pull_seconds"] = seconds
        result["pull_mb_per_s_median"] = statistics.median(pulls)
        result["pull_mb_per_s"] = pulls
        result["second_pull_transferred_bytes"] = second_bytes
        d = daemons[-1]
        images = d.home / "images"
        before = du(images)
        sandboxes_dir = d.home / "sandboxes"
        boxes = []
        try:
            sandboxes_before = du(sandboxes_dir) if sandboxes_dir.exists() else 0
            for _ in range(args.sandboxes):
                boxes.append(Sandbox.create(image=ref, settings=d.settings))
            assert all(b.exec("cat /etc/hello.txt").stdout == "hi\n" for b in boxes[:2])
            after_images = du(images)
            after_sandboxes = du(sandboxes_dir)
        finally:
            for b in boxes:
                b.destroy()
        result["sandboxes"] = args.sandboxes
        result["image_store_bytes"] = before
        result["image_store_bytes_with_sandboxes"] = after_images
        result["sandboxes_dir_bytes_added"] = after_sandboxes - sandboxes_before
    finally:
        for d in daemons:
            d.stop()
        reg.stop()
        subprocess.run(["rm", "-rf", str(work)], check=False)
    out = Path(args.out or ROOT / "bench" / "results" / f"images-{time.strftime('%Y%m%d-%H%M%S')}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
