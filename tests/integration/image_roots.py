"""Root filesystems the image tests build themselves (no registry, no store): busybox-static
from Debian (no python, no C library at all), and the same with musl as the only libc."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.conftest import Daemon

BUSYBOX = "/bin/busybox"
MUSL_LOADER = "ld-musl-x86_64.so.1"
MUSL_LIBC = Path("/lib/x86_64-linux-musl/libc.so")  # Debian's musl package: libc and loader in one
MARKER = "from the image\n"


def busybox_root(dest: Path) -> Path:
    """A root with busybox-static and its applets at their usual paths, a passwd, a marker."""
    dest.mkdir(parents=True)
    applets = subprocess.run([BUSYBOX, "--list-full"], capture_output=True, text=True, check=True).stdout.split()
    (dest / "bin").mkdir()
    shutil.copy2(BUSYBOX, dest / "bin" / "busybox")
    for rel in applets:
        link = dest / rel
        if link.name == "busybox" or link.exists():
            continue
        link.parent.mkdir(parents=True, exist_ok=True)
        depth = len(Path(rel).parts) - 1
        os.symlink("../" * (depth - 1) + "bin/busybox" if depth > 1 else "busybox", link)
    (dest / "etc").mkdir()
    (dest / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/nonexistent:/bin/false\n")
    (dest / "etc" / "group").write_text("root:x:0:\nnogroup:x:65534:\n")
    (dest / "etc" / "marker").write_text(MARKER)
    for name, mode in (("root", 0o700), ("tmp", 0o1777), ("proc", 0o555), ("dev", 0o755), ("usr/local", 0o755)):
        (dest / name).mkdir(parents=True, exist_ok=True)
        os.chmod(dest / name, mode)
    return dest


def musl_root(dest: Path) -> Path:
    """busybox plus musl's loader as the only C library (no glibc, no ld-linux)."""
    busybox_root(dest)
    (dest / "lib").mkdir(exist_ok=True)
    shutil.copy2(MUSL_LIBC, dest / "lib" / MUSL_LOADER)
    return dest


def tree_state(root: Path) -> dict[str, tuple[int, int, int, str]]:
    """Every entry's mode, owner, size and content digest (symlinks: their target)."""
    import hashlib

    out: dict[str, tuple[int, int, int, str]] = {}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(top) / name
            st = p.lstat()
            what = os.readlink(p) if p.is_symlink() else hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else ""
            out[str(p.relative_to(root))] = (st.st_mode, st.st_uid, st.st_size, what)
    return out


def image_daemon(home: Path, images: dict[str, dict[str, object]]) -> Daemon:
    table = home / "test-images.json"
    table.write_text(json.dumps(images))
    return Daemon(home, argv=("hutch.testing.images",), HUTCH_TEST_IMAGES=str(table)).start()


def shared_dir(prefix: str) -> Path:
    """A directory every uid can reach (not pytest's tmp_path: 0700 under root)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(path, 0o755)
    return path
