"""The image store's robustness against a real daemon: leftovers of an interrupted unpack are swept
(at daemon start and by prune), and two clients pulling one image at once end with one image."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from tests.conftest import Daemon
from tests.imagekit import Registry

from hutch.client.images import follow


def _plant(images: Path) -> list[Path]:
    """What a daemon killed mid-unpack and mid-flatten leaves (a tree with a non-writable directory
    inside, as an image's layer can have), next to a partial download that must stay."""
    tmp = images / "tmp"
    unpack = tmp / ".layer-0123456789abcdef.unpack-k3j4h5"
    (unpack / "usr/lib").mkdir(parents=True)
    (unpack / "usr/lib/file").write_bytes(b"x" * 4096)
    os.chmod(unpack / "usr", 0o555)
    flatten = tmp / ".rootfs-0123456789abcdef.flatten-a1b2c3"
    (flatten / "etc").mkdir(parents=True)
    scratch = tmp / "layer-fedcba9876543210"
    scratch.mkdir()
    beside = images / "layers" / (".%s.unpack-zz" % ("ab" * 32))
    beside.mkdir(parents=True)
    return [unpack, flatten, scratch, beside]


def test_an_interrupted_unpack_is_swept_at_daemon_start_and_by_prune(daemon: Daemon) -> None:
    images = daemon.home / "images"
    daemon.kill9()
    planted = _plant(images)
    partial = images / "tmp" / ("cd" * 32 + ".partial")
    partial.write_bytes(b"resume me")
    daemon.start()  # the store is swept before the daemon answers
    assert [p for p in planted if os.path.lexists(p)] == []
    assert partial.read_bytes() == b"resume me"  # an interrupted download is kept for its resume
    planted = _plant(images)  # and again, while the daemon runs: prune removes them
    pruned = daemon.client().image_prune()
    assert pruned["temporaries"] == len(planted) and pruned["freed"] >= 4096
    assert [p for p in planted if os.path.lexists(p)] == []


def test_two_clients_pulling_one_image_at_once_end_with_one_image(daemon: Daemon, registry: Registry) -> None:
    ref = f"{registry.host}/tiny:1"
    start = threading.Barrier(2)
    results: list[dict[str, Any]] = []
    failures: list[BaseException] = []

    def pull() -> None:
        try:
            with daemon.client() as c:
                start.wait(60)
                results.append(follow(c.image_pull(ref)))
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=pull) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert failures == []
    assert len(results) == 2 and results[0]["image"]["id"] == results[1]["image"]["id"]
    images = daemon.client().images()
    assert [i["id"] for i in images] == [results[0]["image"]["id"]] and images[0]["names"] == [ref]
    assert len(list((daemon.home / "images/layers").iterdir())) == 2  # tiny's two layers, each unpacked once
    assert [p.name for p in (daemon.home / "images/tmp").iterdir()] == []  # nothing left behind
    assert (Path(results[0]["image"]["rootfs"]) / "etc/hello.txt").read_text() == "hello from the image\n"
