"""The in-sandbox agent's own runtime for image sandboxes: the host's python3 and what it
links, at a path of its own, never the image's.

An image may have no Python (busybox) or another C library (musl), so the agent cannot
run under the image's interpreter. Once per host interpreter, hutch copies that
interpreter's binary and every shared library it and its standard library's extension
modules link (the dynamic loader included, about 15 MB) into ``HUTCH_HOME/agent``; a
sandbox gets that directory read-only at ``/.hutch/rt`` and the interpreter's standard
library read-only at ``/.hutch/rt/lib/python3.X``. The agent is started through the
copied loader with ``--library-path``, so nothing of the image (its libc, its
``ld.so.cache``) is used, and nothing of the host's ``/usr`` beyond that runtime is
visible to the workload.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import struct
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from hutch.errors import UnavailableError

SANDBOX_RT = "/.hutch/rt"  # where the runtime is inside an image sandbox
PT_INTERP = 3
_LIB = re.compile(r"=>\s+(/\S+)\s+\(")
_lock = threading.Lock()
_known: dict[Path, Runtime] = {}


@dataclass(frozen=True)
class Runtime:
    """A prepared runtime: ``dir`` (bin/python3, lib/*) and the stdlib bound beside it."""

    dir: Path
    stdlib: Path  # the host's standard library directory (lib/python3.X)
    loader: str  # the loader's file name in lib/

    def argv(self) -> list[str]:
        """The command prefix that runs the host's python3 inside an image sandbox."""
        lib = f"{SANDBOX_RT}/lib"
        return [f"{lib}/{self.loader}", "--library-path", lib, f"{SANDBOX_RT}/bin/python3"]

    @property
    def stdlib_target(self) -> str:
        return f"{SANDBOX_RT}/lib/{self.stdlib.name}"


def interpreter_of(binary: Path) -> str:
    """The ELF program interpreter (dynamic loader) ``binary`` names; '' for a static one."""
    with open(binary, "rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2:  # 64-bit ELF only
            raise UnavailableError(f"{binary} is not a 64-bit ELF program", hint="run the agent's python3 from a 64-bit host")
        little = head[5] == 1
        fmt = "<" if little else ">"
        phoff = struct.unpack_from(fmt + "Q", head, 0x20)[0]
        phentsize, phnum = struct.unpack_from(fmt + "HH", head, 0x36)
        for i in range(phnum):
            f.seek(phoff + i * phentsize)
            ph = f.read(phentsize)
            p_type = struct.unpack_from(fmt + "I", ph, 0)[0]
            if p_type == PT_INTERP:
                offset, size = struct.unpack_from(fmt + "Q", ph, 8)[0], struct.unpack_from(fmt + "Q", ph, 32)[0]
                f.seek(offset)
                return f.read(size).rstrip(b"\0").decode()
    return ""


def _libraries(loader: str, objects: list[Path]) -> set[Path]:
    """Every shared library the objects need, as the host's loader resolves them."""
    found: set[Path] = set()
    for obj in objects:
        try:
            out = subprocess.run([loader, "--list", str(obj)], capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.SubprocessError):
            continue
        found.update(Path(m.group(1)) for m in _LIB.finditer(out.stdout))
    return found


def _key(python: Path, loader: Path) -> str:
    digest = hashlib.sha256()
    for p in (python, loader):
        st = p.stat()
        digest.update(f"{p} {st.st_ino} {st.st_size} {st.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:24]


def _build(python: Path, loader: Path, loader_name: str, stdlib: Path, dest: Path) -> None:
    objects = [python, *sorted((stdlib / "lib-dynload").glob("*.so"))]
    libs = _libraries(str(loader), objects)
    libs |= {p for p in (Path("/lib/x86_64-linux-gnu/libgcc_s.so.1"), Path("/usr/lib/libgcc_s.so.1")) if p.exists()}
    dest.parent.mkdir(mode=0o711, parents=True, exist_ok=True)
    os.chmod(dest.parent, 0o711)  # explicit: the daemon's umask is 077, and bwrap runs as the sandbox's uid
    work = Path(tempfile.mkdtemp(prefix=".rt-", dir=dest.parent))
    try:
        (work / "bin").mkdir()
        (work / "lib").mkdir()
        shutil.copyfile(python, work / "bin" / "python3")
        shutil.copyfile(loader, work / "lib" / loader_name)
        for lib in libs:
            shutil.copyfile(lib, work / "lib" / lib.name)
        (work / "lib" / stdlib.name).mkdir()  # the stdlib's mount point
        for top, _dirs, files in os.walk(work):
            os.chmod(top, 0o755)
            for name in files:
                os.chmod(os.path.join(top, name), 0o755)
        with contextlib.suppress(OSError):  # another daemon was quicker: the same files
            work.rename(dest)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def prepare(python: str, version: tuple[int, ...], root: Path) -> Runtime:
    """The runtime of the host interpreter ``python`` (of ``version``) under ``root`` (made once, then reused)."""
    real = Path(os.path.realpath(python))
    loader_name = interpreter_of(real)
    if not loader_name:
        raise UnavailableError(f"{real} is statically linked", hint="run the agent under a dynamically linked python3")
    loader = Path(os.path.realpath(loader_name))
    stdlib = real.parent.parent / "lib" / f"python{version[0]}.{version[1]}"
    if not (stdlib / "os.py").is_file():
        raise UnavailableError(f"cannot find the standard library of {real}", hint="install python3 fully (its stdlib)")
    key = _key(real, loader)
    dest = root / f"runtime-{key}"
    with _lock:  # per state directory: several services in one process (tests, embedding) keep their own
        known = _known.get(dest)
        if known is None or not (dest / "bin" / "python3").is_file():
            if not (dest / "bin" / "python3").is_file():
                _build(real, loader, Path(loader_name).name, stdlib, dest)
            known = _known[dest] = Runtime(dest, stdlib, Path(loader_name).name)
    return known
