"""The host's python3 that runs the in-sandbox agent: found, and its version checked.

The agent (:mod:`hutch.providers.local.agent`) runs under the host's ``/usr/bin/python3``
(bound read-only with ``/usr``), not under hutch's own interpreter; its code is written
and type-checked for MIN_VERSION, the oldest python3 it supports.
"""

from __future__ import annotations

import os
import subprocess
import sys

from hutch.errors import UnavailableError
from hutch.provider import CheckResult

MIN_VERSION = (3, 10)
_checked: dict[tuple[str, int, float], tuple[int, ...]] = {}  # (path, inode, mtime) -> version


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


def version(path: str) -> tuple[int, ...]:
    """The version of the python3 at ``path`` (asked once per binary: it takes ~20 ms)."""
    st = os.stat(path)
    key = (path, st.st_ino, st.st_mtime)
    if key not in _checked:
        try:
            out = subprocess.run(
                [path, "-I", "-S", "-c", "import sys; print(*sys.version_info[:3])"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            ).stdout
            _checked[key] = tuple(int(part) for part in out.split())
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            raise UnavailableError(
                f"cannot run {path}, which runs the sandbox agent: {exc}", hint="install python3 (3.10 or newer)"
            ) from exc
    return _checked[key]


def checked(path: str) -> tuple[int, ...]:
    """``path``'s version, if the agent can run under it; ``unavailable`` otherwise."""
    found = version(path)
    if len(found) < 2 or found < MIN_VERSION:
        shown = ".".join(map(str, found)) or "unknown"
        need = ".".join(map(str, MIN_VERSION))
        raise UnavailableError(
            f"{path} is Python {shown}; the sandbox agent runs under it and needs {need} or newer",
            hint=f"install Python {need} or newer as {path} (e.g. apt-get install python3), then run hutch doctor",
        )
    return found


def agent_python() -> tuple[str, str | None]:
    """The interpreter for the agent and the host dir to bind for it, its version checked."""
    path, prefix = find()
    checked(path)
    return path, prefix


def check() -> CheckResult:
    """For ``doctor``."""
    path, _ = find()
    try:
        found = checked(path)
    except UnavailableError as exc:
        return CheckResult("python", False, exc.message, exc.hint)
    return CheckResult("python", True, f"{path} {'.'.join(map(str, found))} runs the sandbox agent")
