"""The host's python3 that runs the in-sandbox agent: found, its version checked, the agent
compiled for it once.

The agent (:mod:`hutch.providers.local.agent`) runs under the host's ``/usr/bin/python3``
(bound read-only with ``/usr``), not under hutch's own interpreter; its code is written
and type-checked for MIN_VERSION, the oldest python3 it supports. Compiling the agent's
files takes that interpreter longer than starting does, so it is done once per
interpreter and agent (kept under ``HUTCH_HOME/agent``), and every sandbox gets the
bytecode with the sources (unchecked-hash pycs: used as they are).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from hutch.errors import UnavailableError
from hutch.provider import CheckResult

MIN_VERSION = (3, 10)
SANDBOX_DIR = "/.hutch/agent"  # where the agent's files are inside a sandbox
PROBE = """
import sys
print(*sys.version_info[:3], flush=True)
if len(sys.argv) > 1 and sys.version_info >= (3, 10):
    import os, py_compile
    for name in sorted(os.listdir(sys.argv[1])):
        if name.endswith(".py") and name != "__main__.py":
            py_compile.compile(os.path.join(sys.argv[1], name), doraise=True,
                               invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
"""


@dataclass(frozen=True)
class AgentPython:
    path: str
    prefix: str | None  # a host directory to bind for it (an interpreter outside /usr)
    version: tuple[int, ...]
    compiled: dict[str, bytes] = field(default_factory=dict)  # "__pycache__/NAME.TAG.pyc" -> bytecode


_lock = threading.Lock()
_known: dict[str, AgentPython] = {}  # cache key -> what was found


def find() -> tuple[str, str | None]:
    """The interpreter that runs the agent inside the sandbox, and a host dir to bind for it."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.path.exists(candidate) and candidate.startswith("/usr/bin"):
            return candidate, None
    exe = os.path.realpath(sys.executable)
    prefix = os.path.realpath(sys.base_prefix)
    if exe.startswith("/usr/"):
        return exe, None
    return exe, prefix


def _probe(path: str, workdir: str | None = None) -> tuple[int, ...]:
    """Run ``path``: its version, and (with ``workdir``) the .py files there compiled."""
    args = [path, "-I", "-S", "-c", PROBE, *([workdir] if workdir else [])]
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False).stdout
        return tuple(int(part) for part in out.split("\n", 1)[0].split())
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        raise UnavailableError(
            f"cannot run {path}, which runs the sandbox agent: {exc}", hint="install python3 (3.10 or newer)"
        ) from exc


def _refuse(path: str, found: tuple[int, ...]) -> None:
    if len(found) < 2 or found < MIN_VERSION:
        shown = ".".join(map(str, found)) or "unknown"
        need = ".".join(map(str, MIN_VERSION))
        raise UnavailableError(
            f"{path} is Python {shown}; the sandbox agent runs under it and needs {need} or newer",
            hint=f"install Python {need} or newer as {path} (e.g. apt-get install python3), then run hutch doctor",
        )


def version(path: str) -> tuple[int, ...]:
    """The version of the python3 at ``path``."""
    return _probe(path)


def checked(path: str) -> tuple[int, ...]:
    """``path``'s version, if the agent can run under it; ``unavailable`` otherwise."""
    found = version(path)
    _refuse(path, found)
    return found


def _key(path: str, sources: Mapping[str, bytes]) -> str:
    st = os.stat(path)
    digest = hashlib.sha256(f"{path} {st.st_ino} {st.st_size} {st.st_mtime_ns}".encode() + PROBE.encode())
    for name in sorted(sources):
        digest.update(name.encode() + b"\0" + sources[name] + b"\0")
    return digest.hexdigest()[:32]


def _load(where: Path) -> tuple[tuple[int, ...], dict[str, bytes]] | None:
    try:
        found = tuple(int(part) for part in (where / "version").read_text().split())
        cache = where / "__pycache__"
        compiled = {f"__pycache__/{p.name}": p.read_bytes() for p in sorted(cache.iterdir())} if cache.is_dir() else {}
    except (OSError, ValueError):
        return None
    return found, compiled


def _compile(path: str, sources: Mapping[str, bytes], root: Path, where: Path) -> tuple[tuple[int, ...], dict[str, bytes]]:
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".new-", dir=root))
    try:
        for name, data in sources.items():
            (work / name).write_bytes(data)
        found = _probe(path, str(work))
        for name in sources:
            (work / name).unlink()
        (work / "version").write_text(" ".join(map(str, found)))
        for old in root.iterdir():  # what an earlier hutch or interpreter compiled
            if old.name != where.name and not old.name.startswith(".new-"):
                shutil.rmtree(old, ignore_errors=True)
        with contextlib.suppress(OSError):  # another daemon was quicker: the same bytes
            work.rename(where)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return _load(where) or (found, {})


def prepare(sources: Mapping[str, bytes], root: Path) -> AgentPython:
    """The agent's interpreter (refused when too old) and the agent compiled for it
    (nothing compiled when that fails: the sandbox then compiles the sources itself)."""
    path, prefix = find()
    key = _key(path, sources)
    with _lock:
        known = _known.get(key)
        if known is None:
            where = root / key
            found, compiled = _load(where) or _compile(path, sources, root, where)
            known = _known[key] = AgentPython(path, prefix, found, compiled)
    _refuse(path, known.version)
    return known


def check() -> CheckResult:
    """For ``doctor``."""
    path, _ = find()
    try:
        found = checked(path)
    except UnavailableError as exc:
        return CheckResult("python", False, exc.message, exc.hint)
    return CheckResult("python", True, f"{path} {'.'.join(map(str, found))} runs the sandbox agent")
