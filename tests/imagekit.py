"""Images and registries for tests: tiny images built here (busybox-static's binary and a few files)
as OCI layouts, and Debian's docker-registry on 127.0.0.1 (anonymous, or with htpasswd auth),
images pushed to it with skopeo. Nothing reaches outside this machine."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import socket
import subprocess
import tarfile
import tempfile
import time
import urllib.request
from collections.abc import Iterable
from pathlib import Path

BUSYBOX = Path("/usr/bin/busybox")
APPLETS = ("sh", "ls", "cat", "echo", "id", "true")
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
GZ_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"


def _info(name: str, kind: bytes = tarfile.REGTYPE, mode: int = 0o644, size: int = 0, link: str = "") -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.type, ti.mode, ti.size, ti.linkname, ti.mtime = kind, mode, size, link, 1700000000
    return ti


def layer_tar(files: dict[str, bytes], *, busybox: bool = True, extra: Iterable[tarfile.TarInfo] = ()) -> bytes:
    """An uncompressed layer tar: busybox at /bin/busybox with a few applet links, and ``files``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs = {"bin", "etc", "tmp"} | {str(Path(p).parent) for p in files if "/" in p}
        for d in sorted(dirs):
            tar.addfile(_info(d, tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755))
        if busybox:
            data = BUSYBOX.read_bytes()
            tar.addfile(_info("bin/busybox", mode=0o755, size=len(data)), io.BytesIO(data))
            for applet in APPLETS:
                tar.addfile(_info(f"bin/{applet}", tarfile.SYMTYPE, 0o777, link="busybox"))
        for name, data in sorted(files.items()):
            tar.addfile(_info(name, size=len(data)), io.BytesIO(data))
        for ti in extra:
            tar.addfile(ti)
    return buf.getvalue()


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _blob(layout: Path, data: bytes) -> str:
    digest = _sha(data)
    path = layout / "blobs" / "sha256" / digest[7:]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return digest


def image_parts(
    layout: Path,
    layers: list[bytes],
    *,
    arch: str = "amd64",
    cmd: list[str] | None = None,
    env: list[str] | None = None,
    workdir: str | None = "/etc",
) -> tuple[str, int]:
    """Write the blobs of one image (gzip layers, config, manifest) into ``layout``; the manifest's digest and size."""
    descs, diff_ids = [], []
    for tar in layers:
        gz = gzip.compress(tar, mtime=0, compresslevel=1)
        descs.append({"mediaType": GZ_LAYER, "digest": _blob(layout, gz), "size": len(gz)})
        diff_ids.append(_sha(tar))
    config = {
        "architecture": arch,
        "os": "linux",
        "config": {"Env": env or ["PATH=/bin", "GREETING=hello"], "Cmd": cmd or ["/bin/sh"]}
        | ({"WorkingDir": workdir} if workdir else {}),
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }
    cfg = json.dumps(config).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": _blob(layout, cfg), "size": len(cfg)},
        "layers": descs,
    }
    data = json.dumps(manifest).encode()
    return _blob(layout, data), len(data)


def oci_layout(layout: Path, images: dict[str, list[tuple[str, int, str | None]]]) -> Path:
    """Finish an OCI layout: ``index.json`` naming each ref (an image, or an index of several platforms)."""
    entries = []
    for ref, manifests in images.items():
        if len(manifests) == 1 and manifests[0][2] is None:
            digest, size, _ = manifests[0]
            entries.append({"mediaType": OCI_MANIFEST, "digest": digest, "size": size,
                            "annotations": {"org.opencontainers.image.ref.name": ref}})  # fmt: skip
            continue
        index = {
            "schemaVersion": 2,
            "mediaType": OCI_INDEX,
            "manifests": [
                {"mediaType": OCI_MANIFEST, "digest": d, "size": s, "platform": {"os": "linux", "architecture": a}}
                for d, s, a in manifests
            ],
        }
        data = json.dumps(index).encode()
        entries.append({"mediaType": OCI_INDEX, "digest": _blob(layout, data), "size": len(data),
                        "annotations": {"org.opencontainers.image.ref.name": ref}})  # fmt: skip
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": entries}))
    return layout


def tiny_layout(layout: Path) -> Path:
    """Refs ``tiny`` (busybox + /etc/hello.txt), ``multi`` (an index: amd64 and arm64), ``arm`` (arm64 only)."""
    base = layer_tar({"etc/hello.txt": b"hello from the image\n", "etc/passwd": b"root:x:0:0:root:/root:/bin/sh\n"})
    top = layer_tar({"etc/top.txt": b"top layer\n"}, busybox=False)
    tiny = image_parts(layout, [base, top])
    arm = image_parts(layout, [base], arch="arm64")
    amd = image_parts(layout, [base], cmd=["/bin/echo", "multi"])
    return oci_layout(layout, {"tiny": [(*tiny, None)], "multi": [(*amd, "amd64"), (*arm, "arm64")], "arm": [(*arm, None)]})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Registry:
    """Debian's docker-registry on 127.0.0.1, in a temp directory; ``users`` turns on htpasswd auth."""

    def __init__(self, users: dict[str, str] | None = None) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="hutch-registry-"))
        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.users = users or {}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Registry:
        cfg = ["version: 0.1", "log:", "  level: error", "storage:", "  filesystem:", f"    rootdirectory: {self.dir / 'data'}",
               "http:", f"  addr: {self.host}"]  # fmt: skip
        if self.users:
            import bcrypt

            lines = [f"{u}:{bcrypt.hashpw(p.encode(), bcrypt.gensalt(5)).decode()}" for u, p in self.users.items()]
            (self.dir / "htpasswd").write_text("\n".join(lines) + "\n")
            cfg += ["auth:", "  htpasswd:", "    realm: hutch-test", f"    path: {self.dir / 'htpasswd'}"]
        (self.dir / "config.yml").write_text("\n".join(cfg) + "\n")
        log = (self.dir / "registry.log").open("ab")
        self.proc = subprocess.Popen(["docker-registry", "serve", str(self.dir / "config.yml")], stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://{self.host}/v2/", timeout=2)
                break
            except urllib.error.HTTPError:
                break  # 401: up, with auth
            except OSError as exc:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    log = (self.dir / "registry.log").read_text()[-2000:]
                    raise RuntimeError("docker-registry did not start: " + log) from exc
                time.sleep(0.05)
        return self

    def push(self, layout: Path, ref: str, dest: str, *, all_platforms: bool = False) -> None:
        """Copy ``ref`` of an OCI layout to ``dest`` (``repo:tag``) with skopeo."""
        argv = ["skopeo", "copy", "--quiet", "--dest-tls-verify=false"]
        if all_platforms:
            argv.append("--all")
        if self.users:
            user, password = next(iter(self.users.items()))
            auth = {"auths": {self.host: {"auth": _b64(f"{user}:{password}")}}}
            authfile = self.dir / "auth.json"
            authfile.write_text(json.dumps(auth))
            argv += ["--dest-authfile", str(authfile)]
        argv += [f"oci:{layout}:{ref}", f"docker://{self.host}/{dest}"]
        subprocess.run(argv, check=True, capture_output=True, timeout=300)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(15)
        shutil.rmtree(self.dir, ignore_errors=True)


def _b64(text: str) -> str:
    import base64

    return base64.b64encode(text.encode()).decode()


def tree_files(path: Path) -> list[str]:
    """Every file and directory under ``path`` (relative), for leftover checks."""
    if not path.exists():
        return []
    return sorted(os.path.relpath(os.path.join(top, n), path) for top, dirs, files in os.walk(path) for n in dirs + files)
