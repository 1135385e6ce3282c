"""hutch image pull / import / list / inspect / rm / prune against a real daemon and real registries
(Debian's docker-registry on 127.0.0.1, images pushed with skopeo; tests/imagekit.py)."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import tarfile
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import Daemon, sweep
from tests.imagekit import Registry, free_port, image_parts, layer_tar, oci_layout, tree_files

from hutch import wire
from hutch.client.images import follow
from hutch.errors import HutchError
from hutch.wire.pydantic import adapter


def pull(d: Daemon, ref: str, **kw: Any) -> dict[str, Any]:
    """Pull through the daemon; every frame is held to its wire type (unknown keys refused)."""
    frames: list[dict[str, Any]] = []
    check = adapter(wire.ImagePullFrame)
    done = follow(d.client().image_pull(ref, **kw), lambda f: frames.append(check.validate_python(f)))
    done["frames"] = frames
    return done


def stored(home: Path) -> list[str]:
    """What the image store holds on disk besides its lock files."""
    return [p for p in tree_files(home / "images") if not p.startswith("locks")]


def test_pull_anonymously_then_again_transfers_nothing(daemon: Daemon, registry: Registry) -> None:
    ref = f"{registry.host}/tiny:1"
    first = pull(daemon, ref)
    image = first["image"]
    assert first["transferred"] > 1_000_000  # busybox, gzipped
    assert image["names"] == [ref] and image["platform"] == "linux/amd64" and len(image["layers"]) == 2
    assert image["config"]["env"] == ["PATH=/bin", "GREETING=hello"] and image["config"]["workdir"] == "/etc"
    kinds = {f["type"] for f in first["frames"]}
    assert {"resolved", "layer", "done"} <= kinds
    rootfs = Path(image["rootfs"])
    assert (rootfs / "etc/hello.txt").read_text() == "hello from the image\n"
    assert (rootfs / "etc/top.txt").read_text() == "top layer\n" and os.readlink(rootfs / "bin/sh") == "busybox"
    again = pull(daemon, ref)
    assert again["transferred"] == 0 and again["image"]["id"] == image["id"]
    c = daemon.client()
    assert [i["id"] for i in c.images()] == [image["id"]]
    assert c.image_inspect(image["id"][7:19])["names"] == [ref]
    assert c.image_inspect(f"{registry.host}/tiny@{image['digests'][0].split('@')[1]}")["id"] == image["id"]
    with pytest.raises(HutchError) as err:
        c.image_inspect("nosuch:1")
    assert err.value.kind == "not_found" and err.value.hint and "hutch image pull nosuch:1" in err.value.hint


def test_a_multi_platform_index_gives_the_hosts_image_and_another_arch_is_refused(daemon: Daemon, registry: Registry) -> None:
    image = pull(daemon, f"{registry.host}/multi:1")["image"]
    assert image["platform"] == "linux/amd64" and image["config"]["cmd"] == ["/bin/echo", "multi"]
    assert len(image["digests"]) == 2  # the index's digest and the platform manifest's
    with pytest.raises(HutchError) as err:
        pull(daemon, f"{registry.host}/arm:1")
    assert err.value.kind == "invalid" and "linux/arm64" in err.value.message and "linux/amd64" in err.value.message
    assert len(daemon.client().images()) == 1


def test_pull_with_credentials_and_wrong_ones(daemon: Daemon, auth_registry: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    ref = f"{auth_registry.host}/team/tiny:1"
    monkeypatch.setenv("DOCKER_CONFIG", str(daemon.home / "no-docker-config"))
    with pytest.raises(HutchError) as err:
        pull(daemon, ref)
    assert err.value.kind == "unauthorized" and "HUTCH_REGISTRY_USER" in (err.value.hint or "")
    monkeypatch.setenv("HUTCH_REGISTRY_USER", "alice")
    monkeypatch.setenv("HUTCH_REGISTRY_PASSWORD", "wrong-secret-777")
    with pytest.raises(HutchError) as err:
        pull(daemon, ref)
    assert err.value.kind == "unauthorized"
    told = json.dumps(err.value.to_dict())
    assert "wrong-secret-777" not in told and "refused the credentials" in told
    assert stored(daemon.home) == [] or not any(p.startswith(("blobs/sha256/", "rootfs/")) for p in stored(daemon.home))
    monkeypatch.setenv("HUTCH_REGISTRY_PASSWORD", "s3cret-pass-42")
    assert pull(daemon, ref)["image"]["names"] == [ref]
    # from the docker config file instead of the environment
    monkeypatch.delenv("HUTCH_REGISTRY_USER")
    monkeypatch.delenv("HUTCH_REGISTRY_PASSWORD")
    cfg = daemon.home / "docker"
    cfg.mkdir()
    import base64

    auth = base64.b64encode(b"alice:s3cret-pass-42").decode()
    (cfg / "config.json").write_text(json.dumps({"auths": {auth_registry.host: {"auth": auth}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(cfg))
    assert pull(daemon, ref)["transferred"] == 0
    log = (daemon.home / "hutchd.log").read_text() if (daemon.home / "hutchd.log").exists() else ""
    log += (daemon.home / "test-daemon.log").read_text()
    assert "s3cret-pass-42" not in log and "wrong-secret-777" not in log


def test_a_registry_that_is_down_is_unavailable_and_nothing_is_stored(daemon: Daemon) -> None:
    with pytest.raises(HutchError) as err:
        pull(daemon, f"127.0.0.1:{free_port()}/tiny:1")
    assert err.value.kind == "unavailable" and "cannot reach registry" in err.value.message
    assert [p for p in stored(daemon.home) if not p.startswith("tmp")] == [] and daemon.client().images() == []


class _Corrupting(http.server.BaseHTTPRequestHandler):
    """A registry serving one image whose layer blob has one byte changed."""

    blobs: dict[str, bytes] = {}
    manifest = b""

    def do_GET(self) -> None:
        if self.path.endswith("/manifests/1"):
            body, ctype = self.manifest, "application/vnd.oci.image.manifest.v1+json"
        elif "/blobs/" in self.path and self.path.rsplit("/", 1)[1] in self.blobs:
            body, ctype = self.blobs[self.path.rsplit("/", 1)[1]], "application/octet-stream"
        else:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def corrupting_registry(tmp_path: Path) -> Iterator[str]:
    layout = tmp_path / "layout"
    digest, _ = image_parts(layout, [layer_tar({"etc/x": b"x"})])
    blobs = {f"sha256:{p.name}": p.read_bytes() for p in (layout / "blobs/sha256").iterdir()}
    manifest = json.loads(blobs[digest])
    layer = manifest["layers"][0]["digest"]
    bad = bytearray(blobs[layer])
    bad[len(bad) // 2] ^= 0xFF
    blobs[layer] = bytes(bad)
    handler = type("H", (_Corrupting,), {"blobs": blobs, "manifest": blobs[digest]})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_blob_whose_digest_does_not_match_keeps_nothing(daemon: Daemon, corrupting_registry: str) -> None:
    with pytest.raises(HutchError) as err:
        pull(daemon, f"{corrupting_registry}/bad:1")
    assert err.value.kind == "invalid" and "failed verification" in err.value.message
    left = stored(daemon.home)
    assert not any(p.startswith(("blobs/sha256/", "layers/", "rootfs/")) or p.endswith(".partial") for p in left), left
    assert daemon.client().images() == []


def _docker_archive(dest: Path) -> Path:
    """What docker save writes: manifest.json, the config, one layer.tar per layer."""
    tar_bytes = layer_tar({"etc/from-docker.txt": b"docker\n"})
    import hashlib

    diff_id = "sha256:" + hashlib.sha256(tar_bytes).hexdigest()
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Cmd": ["/bin/sh"]},
                         "rootfs": {"type": "layers", "diff_ids": [diff_id]}}).encode()  # fmt: skip
    cfg_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = json.dumps([{"Config": cfg_name, "RepoTags": ["saved/img:2"], "Layers": ["abc/layer.tar"]}]).encode()
    import io

    with tarfile.open(dest, "w") as tar:
        for name, data in (("abc/layer.tar", tar_bytes), (cfg_name, config), ("manifest.json", manifest)):
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tar.addfile(ti, io.BytesIO(data))
    return dest


def test_import_of_each_archive_form(daemon: Daemon, image_layout: Path, tmp_path: Path) -> None:
    c = daemon.client()
    archive = tmp_path / "tiny.oci.tar"
    with tarfile.open(archive, "w") as tar:
        for entry in sorted(os.listdir(image_layout)):
            tar.add(image_layout / entry, arcname=entry)
    with pytest.raises(HutchError) as err:
        follow(c.image_import(f"oci-archive:{archive}", "local/one:1"))
    assert err.value.kind == "invalid" and "arm, multi, tiny" in err.value.message
    one = follow(c.image_import(f"oci-archive:{archive}:tiny", "local/one:1"))["image"]
    assert one["names"] == ["local/one:1"] and one["source"] == "import oci"
    two = follow(c.image_import(f"oci:{image_layout}:multi", "local/two"))["image"]
    assert two["names"] == ["local/two:latest"] and two["config"]["cmd"] == ["/bin/echo", "multi"]
    three = follow(c.image_import(f"docker-archive:{_docker_archive(tmp_path / 'saved.tar')}"))["image"]
    assert three["names"] == ["saved/img:2"]
    assert (Path(three["rootfs"]) / "etc/from-docker.txt").read_text() == "docker\n"
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc/os-release").write_text("ID=handmade\n")
    (root / "bin").mkdir()
    os.symlink("/bin/busybox", root / "bin/sh")
    four = follow(c.image_import(f"rootfs:{root}", "handmade:1"))["image"]
    assert (Path(four["rootfs"]) / "etc/os-release").read_text() == "ID=handmade\n"
    assert four["config"]["env"] and four["config"]["env"][0].startswith("PATH=")
    tarball = tmp_path / "root.tar.gz"
    subprocess.run(["tar", "-czf", str(tarball), "-C", str(root), "."], check=True)
    five = follow(c.image_import(f"rootfs:{tarball}", "handmade:gz"))["image"]
    assert five["layers"][0]["media_type"].endswith("+gzip")
    assert (Path(five["rootfs"]) / "etc/os-release").read_text() == "ID=handmade\n"
    with pytest.raises(HutchError) as err:
        follow(c.image_import(f"oci:{image_layout}:nosuch", "x"))
    assert err.value.kind == "not_found" and "tiny" in err.value.message
    garbage = tmp_path / "garbage.tar"
    garbage.write_bytes(b"not a tar at all" * 100)
    with pytest.raises(HutchError) as err:
        follow(c.image_import(f"docker-archive:{garbage}"))
    assert err.value.kind == "invalid"
    assert len(c.images()) == 5


def test_rm_and_prune_free_what_no_image_uses(daemon: Daemon, registry: Registry) -> None:
    c = daemon.client()
    tiny = pull(daemon, f"{registry.host}/tiny:1")["image"]
    multi = pull(daemon, f"{registry.host}/multi:1")["image"]  # shares its base layer with tiny
    layers_before = {p.name for p in (daemon.home / "images/layers").iterdir()}
    assert len(layers_before) == 2  # tiny's base + top; multi's one layer is tiny's base, unpacked once
    removed = c.image_rm(f"{registry.host}/tiny:1")
    assert removed["deleted"] and removed["untagged"] == [f"{registry.host}/tiny:1"] and removed["freed"] > 0
    assert [i["id"] for i in c.images()] == [multi["id"]]
    assert not Path(tiny["rootfs"]).exists() and Path(multi["rootfs"]).exists()
    assert len(list((daemon.home / "images/layers").iterdir())) == 1
    assert (Path(multi["rootfs"]) / "etc/hello.txt").exists()
    (daemon.home / "images/tmp").mkdir(exist_ok=True)
    (daemon.home / "images/tmp" / ("ab" * 32 + ".partial")).write_bytes(b"x" * 5000)  # an interrupted download
    pruned = c.image_prune()
    assert pruned["partials"] == 1 and pruned["freed"] >= 5000
    c.image_rm(multi["id"])
    assert c.images() == []
    assert set(stored(daemon.home)) <= {"tmp", "blobs", "blobs/sha256", "layers", "rootfs"}  # empty directories only
    with pytest.raises(HutchError) as err:
        c.image_rm("nosuch:1")
    assert err.value.kind == "not_found"


@pytest.fixture
def small_home() -> Iterator[Path]:
    assert os.geteuid() == 0, "this test mounts a small tmpfs; the suite runs as root in CI"
    home = Path(tempfile.mkdtemp(prefix="hutch-full-"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=12m,mode=0711", "tmpfs", str(home)], check=True)
    try:
        yield home
    finally:
        subprocess.run(["umount", "-l", str(home)], check=False)
        home.rmdir()


def test_a_disk_that_fills_mid_pull_is_a_clear_error_and_leaves_nothing(small_home: Path, registry: Registry) -> None:
    layout = Path(tempfile.mkdtemp(prefix="hutch-big-"))
    try:
        big = layer_tar({"big.bin": os.urandom(16 << 20)}, busybox=False)
        oci_layout(layout, {"big": [(*image_parts(layout, [big]), None)]})
        registry.push(layout, "big", "big:1")
    finally:
        subprocess.run(["rm", "-rf", str(layout)], check=False)
    d = Daemon(small_home).start()
    try:
        with pytest.raises(HutchError) as err:
            pull(d, f"{registry.host}/big:1")
        assert err.value.kind == "capacity" and "disk is full" in err.value.message and "prune" in (err.value.hint or "")
        left = stored(small_home)
        assert not any(p.startswith(("blobs/sha256/", "layers/", "rootfs/")) or p.endswith(".partial") for p in left), left
        assert d.client().images() == []
    finally:
        d.stop()
        sweep(small_home)


def _hutch(d: Daemon, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    import sys

    from tests.conftest import hutch_env

    env = hutch_env(d.home)
    return subprocess.run([sys.executable, "-m", "hutch", *args], input=stdin, capture_output=True, env=env, timeout=300)


def test_the_cli_imports_from_stdin_lists_inspects_and_hints(daemon: Daemon, tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc/os-release").write_text("ID=piped\n")
    tar = subprocess.run(["tar", "-cf", "-", "-C", str(root), "."], check=True, capture_output=True).stdout
    r = _hutch(daemon, "image", "import", "-", "piped:1", "--json", stdin=tar)
    assert r.returncode == 0, r.stderr
    frames = [json.loads(line) for line in r.stdout.splitlines()]
    assert frames[-1]["type"] == "done" and frames[-1]["image"]["names"] == ["piped:1"]
    listed = json.loads(_hutch(daemon, "image", "list", "--json").stdout)
    assert [i["names"] for i in listed] == [["piped:1"]]
    shown = json.loads(_hutch(daemon, "image", "inspect", "piped:1", "--json").stdout)
    assert (Path(shown["rootfs"]) / "etc/os-release").read_text() == "ID=piped\n"
    r = _hutch(daemon, "image", "inspect", "nosuch:2", "--json")
    assert r.returncode == 1 and json.loads(r.stdout)["error"]["hint"].startswith("hutch image pull nosuch:2")
    r = _hutch(daemon, "pull", "python:3.12", "--json")
    assert r.returncode == 1 and "hutch image pull python:3.12" in json.loads(r.stdout)["error"]["hint"]
    r = _hutch(daemon, "image", "pull", "Bad Ref", "--json")
    assert r.returncode == 2 and json.loads(r.stdout)["error"]["kind"] == "invalid"
    doctor = json.loads(_hutch(daemon, "doctor", "--json").stdout)
    assert any(c["name"] == "images" and "piped:1" in c["detail"] for c in doctor["checks"])
    r = _hutch(daemon, "image", "rm", "piped:1", "--json")
    assert json.loads(r.stdout)["deleted"] is True


def test_sandboxes_start_from_a_pulled_image_and_rm_waits_for_them(daemon: Daemon, registry: Registry) -> None:
    from hutch import Sandbox

    ref = f"{registry.host}/tiny:1"
    image = pull(daemon, ref)["image"]
    sbx = Sandbox.create(image=ref, settings=daemon.settings)
    try:
        assert sbx.exec("cat /etc/hello.txt").stdout == "hello from the image\n"
        assert daemon.client().image_inspect(ref)["sandboxes"] == [sbx.id]
        with pytest.raises(HutchError) as err:
            daemon.client().image_rm(ref)
        assert err.value.kind == "conflict" and sbx.id in err.value.message and "--force" in (err.value.hint or "")
    finally:
        sbx.destroy()
    assert daemon.client().image_rm(ref)["deleted"] and not Path(image["rootfs"]).exists()
