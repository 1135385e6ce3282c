"""An image import is read as it arrives (no copy of the upload on the daemon's disk first):
a blob of the archive is stored, and the answer has begun, while the client is still sending;
a client that goes away mid-upload leaves nothing behind. Raw HTTP on the daemon's socket, so
that the test controls when each byte is sent."""

from __future__ import annotations

import http.client
import io
import json
import os
import socket
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

from tests.conftest import Daemon
from tests.imagekit import image_parts, layer_tar, oci_layout

BIG = 4 << 20  # random bytes: its gzip layer is as large, and is sent first


def _archive(tmp: Path) -> tuple[bytes, int, str]:
    """An OCI layout as a tar whose first member is the big layer's blob; the tar, where that member ends, its digest."""
    layout = tmp / "layout"
    big = layer_tar({"data/big.bin": os.urandom(BIG)}, busybox=False)
    manifest = image_parts(layout, [layer_tar({"etc/hello.txt": b"hi\n"}), big])
    oci_layout(layout, {"streamed": [(*manifest, None)]})
    blobs = sorted((layout / "blobs/sha256").iterdir(), key=lambda p: -p.stat().st_size)
    first = blobs[0]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(first, arcname=f"blobs/sha256/{first.name}")
        end = buf.tell()
        for p in blobs[1:]:
            tar.add(p, arcname=f"blobs/sha256/{p.name}")
        tar.add(layout / "index.json", arcname="index.json")
        tar.add(layout / "oci-layout", arcname="oci-layout")
    return buf.getvalue(), end, first.name


def _start(daemon: Daemon) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(120)
    s.connect(str(daemon.settings.socket_path))
    url = "/v1/images/import?format=oci&name=local/streamed:1"
    head = "Host: hutch\r\nContent-Type: application/x-tar\r\nTransfer-Encoding: chunked"
    s.sendall(f"POST {url} HTTP/1.1\r\n{head}\r\n\r\n".encode())
    return s


def _send(s: socket.socket, data: bytes) -> None:
    for i in range(0, len(data), 256 << 10):
        part = data[i : i + (256 << 10)]
        s.sendall(b"%x\r\n%s\r\n" % (len(part), part))


def _wait(what: str, check: Callable[[], bool], seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"still waiting for {what}"
        time.sleep(0.05)


def test_an_import_is_stored_and_answered_while_the_upload_goes_on(daemon: Daemon, tmp_path: Path) -> None:
    data, end, big = _archive(tmp_path)
    blob = daemon.home / "images/blobs/sha256" / big
    s = _start(daemon)
    _send(s, data[: end + 512])  # the big blob whole, and no more
    _wait("the first blob to be stored before the upload ended", blob.exists)
    assert blob.stat().st_size > BIG
    tmp = daemon.home / "images/tmp"  # the blob being received now, if any: no copy of the upload
    assert all(p.name.startswith("stream-") for p in tmp.iterdir()), list(tmp.iterdir())
    resp = http.client.HTTPResponse(s)  # type: ignore[arg-type]
    resp.begin()  # the answer began before the upload ended
    assert resp.status == 200
    first = json.loads(resp.readline())
    assert first["type"] == "received" and first["bytes"] > 0
    _send(s, data[end + 512 :])
    s.sendall(b"0\r\n\r\n")
    frames = [first] + [json.loads(line) for line in resp.read().splitlines()]
    s.close()
    assert frames[-1]["type"] == "done", frames[-1]
    assert frames[-1]["image"]["names"] == ["local/streamed:1"]
    received = [f["bytes"] for f in frames if f["type"] == "received"]
    assert received == sorted(received) and received[-1] == len(data)  # the last one tells the whole upload
    image = frames[-1]["image"]
    assert (Path(image["rootfs"]) / "data/big.bin").stat().st_size == BIG
    assert (Path(image["rootfs"]) / "etc/hello.txt").read_text() == "hi\n"


def test_an_upload_cut_short_keeps_nothing(daemon: Daemon, tmp_path: Path) -> None:
    data, end, big = _archive(tmp_path)
    blob = daemon.home / "images/blobs/sha256" / big
    s = _start(daemon)
    _send(s, data[: end + 512])
    _wait("the first blob to be stored", blob.exists)
    s.close()  # gone mid-upload: the import ends, what it stored is collected
    _wait("the blob of the cut upload to be removed", lambda: not blob.exists())
    c = daemon.client()
    assert c.images() == []
    tmp = daemon.home / "images/tmp"
    _wait("images/tmp to be empty", lambda: not tmp.is_dir() or not any(tmp.iterdir()))
    # the daemon goes on: the same archive, sent whole, is imported
    s = _start(daemon)
    _send(s, data)
    s.sendall(b"0\r\n\r\n")
    resp = http.client.HTTPResponse(s)  # type: ignore[arg-type]
    resp.begin()
    frames = [json.loads(line) for line in resp.read().splitlines()]
    s.close()
    assert frames[-1]["type"] == "done" and blob.exists()
    assert [i["names"] for i in c.images()] == [["local/streamed:1"]]


def test_a_daemon_stopped_during_a_stalled_upload_exits(daemon: Daemon, tmp_path: Path) -> None:
    """The import's worker thread waits on the event loop for the next bytes: stopping the daemon
    ends that wait (a thread left waiting would keep the process from exiting)."""
    data, end, big = _archive(tmp_path)
    s = _start(daemon)
    _send(s, data[: end + 512])
    _wait("the first blob to be stored", (daemon.home / "images/blobs/sha256" / big).exists)
    assert daemon.proc is not None
    daemon.proc.terminate()  # the client is still connected, and sends nothing more
    try:
        code = daemon.proc.wait(60)
    finally:
        s.close()
    assert code == 0
    daemon.start()
    assert daemon.client().images() == []
