"""A layer is unpacked while it downloads, over http.client in threads (images/blobget.py,
blobs.Following): against registries on 127.0.0.1 that cut a blob's connection halfway, ignore
``Range`` when asked to resume, redirect blobs to another host, or send a corrupt blob. The pull
ends with the layer unpacked exactly, or with the download's error and nothing kept."""

from __future__ import annotations

import asyncio
import hashlib
import http.server
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.imagekit import image_parts, layer_tar, tree_files

from hutch.errors import HutchError
from hutch.imageref import parse_registry
from hutch.providers.local.images import pull as p
from hutch.providers.local.images.blobs import AbandonedError, BlobStore
from hutch.providers.local.images.store import ImageStore
from hutch.store import Store

DATA = os.urandom(3 << 20)  # incompressible: the blob is as large as the file


class Served(http.server.BaseHTTPRequestHandler):
    """One image; ``mode`` says how its layer blob is served (the first time, then honestly)."""

    blobs: dict[str, bytes] = {}
    manifest = b""
    layer = ""
    mode = ""
    state: dict[str, Any] = {}  # what the requests were (shared by the test)
    other = ""  # cross-host redirects go to this "host:port"
    pause = threading.Event()  # "garbage-then-whole": what the cut waits for

    def _send(self, code: int, body: bytes, start: int = 0, cut: bool = False, garbage: bool = False) -> None:
        self.send_response(code)
        self.send_header("content-length", str(len(body) - start))
        if code == 206:
            self.send_header("content-range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        self.end_headers()
        half = body[start : start + (len(body) - start) // 2]
        self.wfile.write(bytes(len(half)) if garbage else half if cut else body[start:])
        if cut:
            self.wfile.flush()
            if garbage:  # hold the connection until the unpack that follows has failed on the garbage
                self.pause.wait(60)
            self.close_connection = True

    def do_GET(self) -> None:
        name = self.path.rsplit("/", 1)[1]
        self.state.setdefault("auth", []).append((self.path, self.headers.get("authorization")))
        if self.path.endswith("/manifests/1"):
            self.send_response(200)
            self.send_header("content-type", "application/vnd.oci.image.manifest.v1+json")
            self.send_header("content-length", str(len(self.manifest)))
            self.end_headers()
            self.wfile.write(self.manifest)
            return
        if name not in self.blobs:
            self.send_response(404)
            self.end_headers()
            return
        body = self.blobs[name]
        if name != self.layer:
            self._send(200, body)
            return
        n = self.state["layer_gets"] = self.state.get("layer_gets", 0) + 1
        rng = self.headers.get("range", "")
        start = int(rng[6:].rstrip("-")) if rng.startswith("bytes=") else 0
        self.state.setdefault("ranges", []).append(start)
        if self.mode == "redirect" and not self.path.startswith("/moved/"):
            self.send_response(307)
            self.send_header("location", f"http://{self.other}/moved/{name}")
            self.send_header("content-length", "0")
            self.end_headers()
            return
        if self.mode in ("cut", "cut-ignore-range", "garbage-then-whole") and n == 1:
            self._send(200, body, cut=True, garbage=self.mode == "garbage-then-whole")
        elif self.mode in ("cut-ignore-range", "garbage-then-whole") or not start:
            self._send(200, body)
        else:
            self._send(206, body, start)

    def log_message(self, *args: object) -> None:
        pass


def _server(handler: type[Served]) -> tuple[http.server.ThreadingHTTPServer, threading.Thread]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, thread


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    layout = tmp_path / "layout"
    digest, _ = image_parts(layout, [layer_tar({"data/file.bin": DATA}, busybox=False)])
    blobs = {f"sha256:{f.name}": f.read_bytes() for f in (layout / "blobs/sha256").iterdir()}
    manifest = json.loads(blobs[digest])
    servers: list[http.server.ThreadingHTTPServer] = []

    def start(mode: str, corrupt: bool = False) -> tuple[str, dict[str, Any]]:
        layer = manifest["layers"][0]["digest"]
        data = dict(blobs)
        if corrupt:
            bad = bytearray(data[layer])
            bad[len(bad) // 2] ^= 0xFF
            data[layer] = bytes(bad)
        state: dict[str, Any] = {"layer": layer}
        attrs = {"blobs": data, "manifest": blobs[digest], "layer": layer, "mode": mode, "state": state}
        other, _ = _server(type("Other", (Served,), attrs))
        servers.append(other)
        attrs["other"] = f"127.0.0.1:{other.server_address[1]}"
        main, _ = _server(type("Main", (Served,), attrs))
        servers.append(main)
        return f"127.0.0.1:{main.server_address[1]}", state

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def _pull(home: Path, ref: str) -> tuple[ImageStore, dict[str, Any], int]:
    home.mkdir(parents=True, exist_ok=True)
    store = ImageStore(home / "images", Store(home / "db.sqlite").images)
    opts = p.PullOptions(platform="linux/amd64", keep_owners=os.geteuid() == 0)
    row, transferred = asyncio.run(p.pull(store, parse_registry(ref), None, opts, lambda e: None))
    return store, row, transferred


def _file_of(store: ImageStore, row: dict[str, Any]) -> bytes:
    return (store.rootfs_path(row["id"]) / "data/file.bin").read_bytes()


@pytest.mark.parametrize("mode", ["whole", "cut", "cut-ignore-range", "redirect"])
def test_a_layer_unpacked_while_it_downloads_is_exact_however_the_blob_comes(serve: Any, tmp_path: Path, mode: str) -> None:
    host, state = serve(mode)
    store, row, transferred = _pull(tmp_path / "home", f"{host}/img:1")
    assert _file_of(store, row) == DATA
    layer = row["layers"][0]
    assert hashlib.sha256(store.blobs.path(layer["digest"]).read_bytes()).hexdigest() == layer["digest"][7:]
    size = layer["size"]
    if mode == "cut":  # resumed: the second request asks for the rest only
        assert state["ranges"] == [0, size // 2] and transferred < size * 1.6
    elif mode == "cut-ignore-range":  # the server sent the whole blob again: unpacked again from the stored blob
        assert state["ranges"] == [0, size // 2] and transferred >= size * 1.5
    elif mode == "redirect":  # the second host never sees the registry's credentials (none here: no header at all)
        assert any(path.startswith("/moved/") for path, _ in state["auth"])
    assert not [f for f in tree_files(tmp_path / "home" / "images") if f.startswith("tmp/")]


def test_a_corrupt_blob_fails_as_a_download_even_if_its_unpack_failed_first(serve: Any, tmp_path: Path) -> None:
    host, state = serve("whole", corrupt=True)
    with pytest.raises(HutchError) as err:
        _pull(tmp_path / "home", f"{host}/img:1")
    assert err.value.kind == "invalid" and "failed verification" in err.value.message
    left = tree_files(tmp_path / "home" / "images")  # the config blob may stay (verified); the layer never
    assert not any(f.startswith(("layers/", "rootfs/", "tmp/")) or f.endswith(state["layer"][7:]) for f in left), left


def test_a_follower_ends_only_once_the_blob_is_stored(tmp_path: Path) -> None:
    blobs = BlobStore(tmp_path)
    data = b"x" * 1000
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    w = blobs.writer(digest, len(data))
    f = w.follow()
    w.write(data[:600])
    assert f.read(1000) == data[:600]
    got: list[bytes | BaseException] = []

    def rest() -> None:
        try:
            got.append(f.read(1000))
            got.append(f.read(1000))
        except BaseException as exc:
            got.append(exc)

    t = threading.Thread(target=rest)
    t.start()
    w.write(data[600:])
    w.commit()
    t.join(30)
    assert got == [data[600:], b""]
    f.close()

    for end in ("discard", "reset"):  # a refused or restarted transfer: the follower gives up, never sees an end
        w = blobs.writer(digest, len(data))
        f = w.follow()
        w.write(data[:10])
        getattr(w, end)()
        with pytest.raises(AbandonedError):
            f.read(100) if end == "reset" else (f.read(100), f.read(100))
        f.close()
        w.close()


def test_a_reset_between_a_followers_check_and_its_read_abandons_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The interleaving seen under load: the follower saw bytes to read, then the transfer started
    over (the file truncated) before its read: that must raise AbandonedError, never look like an end."""
    blobs = BlobStore(tmp_path)
    data = os.urandom(1000)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    w = blobs.writer(digest, len(data))
    f = w.follow()
    w.write(data[:600])
    assert f.read(100) == data[:100]
    real = os.preadv
    hooked: list[int] = []

    def reset_first(fd: int, buffers: Any, offset: int) -> int:
        if not hooked:
            hooked.append(offset)
            w.reset()  # the writer's thread restarts the blob right now (the server ignored Range)
        return real(fd, buffers, offset)

    monkeypatch.setattr(os, "preadv", reset_first)
    with pytest.raises(AbandonedError):
        f.read(100)
    assert hooked == [100]
    f.close()
    w.close()


def test_a_followed_unpack_that_fails_before_the_transfer_starts_over_is_not_the_pulls_answer(
    serve: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first answer's bytes are garbage and its unpack fails on them while the connection is
    still open; the server then cuts it and sends the whole blob again (ignoring Range): the pull
    unpacks the stored, verified blob instead of answering with the failed unpack."""
    host, state = serve("garbage-then-whole")
    failed = threading.Event()
    real = p._unpack

    def watched(*args: Any) -> tuple[str, bool]:
        try:
            return real(*args)
        except HutchError:
            failed.set()
            raise

    monkeypatch.setattr(p, "_unpack", watched)
    monkeypatch.setattr(Served, "pause", failed)
    store, row, _ = _pull(tmp_path / "home", f"{host}/img:1")
    assert failed.is_set() and state["ranges"] == [0, row["layers"][0]["size"] // 2]
    assert _file_of(store, row) == DATA
    assert not [f for f in tree_files(tmp_path / "home" / "images") if f.startswith("tmp/")]
