"""Unpacking and flattening a Debian-minbase-sized image (about 10k files), measured.

    python bench/images_unpack.py [--files 10000] [--rounds 3]

The lower layer is a tar+gzip of the first ``--files`` files (and their directories and
symlinks) under the host's /usr, files over 1 MiB left out; the upper layer rewrites 5% of
them, whites out 1% and makes one directory opaque. Prints one JSON document: medians in ms.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from hutch.providers.local.images.flatten import flatten
from hutch.providers.local.images.unpack import unpack_layer

GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"


def lower_layer(path: Path, files: int) -> list[str]:
    names: list[str] = []
    with tarfile.open(path, "w:gz", compresslevel=6, format=tarfile.PAX_FORMAT) as tf:
        for dirpath, dirnames, filenames in os.walk("/usr"):
            dirnames.sort()
            tf.add(dirpath, arcname=dirpath.lstrip("/"), recursive=False)
            for name in sorted(filenames):
                p = os.path.join(dirpath, name)
                if os.path.islink(p) or (os.path.isfile(p) and os.path.getsize(p) <= 1 << 20):
                    tf.add(p, arcname=p.lstrip("/"), recursive=False)
                    names.append(p.lstrip("/"))
            if len(names) >= files:
                break
    return names


def upper_layer(path: Path, names: list[str]) -> None:
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tf:
        for i, name in enumerate(names):
            if i % 20 == 0:
                ti = tarfile.TarInfo(name)
                data = f"changed {i}\n".encode()
                ti.size = len(data)
                tf.addfile(ti, __import__("io").BytesIO(data))
            elif i % 100 == 1:
                d, base = os.path.split(name)
                tf.addfile(tarfile.TarInfo(os.path.join(d, ".wh." + base)))
        tf.addfile(tarfile.TarInfo("usr/share/.wh..wh..opq"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    top = Path(tempfile.mkdtemp(prefix="hutch-bench-images-"))
    try:
        names = lower_layer(top / "lower.tgz", args.files)
        upper_layer(top / "upper.tgz", names)
        timings: dict[str, list[float]] = {"unpack_lower_ms": [], "unpack_upper_ms": [], "flatten_ms": []}
        stats = None
        for r in range(args.rounds):
            t = time.perf_counter()
            stats = unpack_layer(top / "lower.tgz", top / f"l{r}", media_type=GZIP, keep_owners=os.geteuid() == 0)
            timings["unpack_lower_ms"].append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            unpack_layer(top / "upper.tgz", top / f"u{r}", media_type=GZIP, keep_owners=os.geteuid() == 0)
            timings["unpack_upper_ms"].append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            flatten([top / f"l{r}", top / f"u{r}"], top / f"root{r}")
            timings["flatten_ms"].append((time.perf_counter() - t) * 1000)
        assert stats is not None
        out = {
            "files": stats.files,
            "entries": stats.entries,
            "lower_compressed_bytes": stats.compressed_bytes,
            "lower_bytes": stats.bytes,
            "load": os.getloadavg()[0],
            **{k: round(statistics.median(v), 1) for k, v in timings.items()},
        }
        print(json.dumps(out))
    finally:
        shutil.rmtree(top)


if __name__ == "__main__":
    main()
