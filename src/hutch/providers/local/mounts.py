"""Checking ``--mount HOST:SANDBOX[:ro]`` before anything is created.

Refused: the host root; hutch's own state directory (it holds the daemon's socket), or
any directory above it; runtime and kernel trees (/run, /proc, /sys, /dev); sockets; and
directories holding a socket within the first levels of the tree (the scan is bounded,
see docs/security.md). Targets are normalised and may not cover the paths the sandbox
is built from.
"""

from __future__ import annotations

import os
import posixpath
import stat
from pathlib import Path

from hutch.errors import InvalidError
from hutch.models import Mount

RESERVED_TARGETS = ("/proc", "/dev", "/usr", "/etc", "/.hutch", "/bin", "/lib", "/lib64", "/sbin", "/sys")
FORBIDDEN_SOURCES = (Path("/proc"), Path("/sys"), Path("/dev"), Path("/run"), Path("/var/run"))
SCAN_DEPTH = 4
SCAN_ENTRIES = 20000


def check_target(target: str) -> str:
    if not target.startswith("/") or ".." in target.split("/"):
        raise InvalidError(f"invalid sandbox path {target!r}", hint="use an absolute path without '..', such as /data")
    norm = posixpath.normpath(target)
    norm = "/" + norm.lstrip("/")
    if norm == "/" or any(norm == r or norm.startswith(r + "/") for r in RESERVED_TARGETS):
        raise InvalidError(f"cannot mount over {target!r}", hint="choose a path such as /data or /workspace/src")
    return norm


def _socket_inside(root: Path) -> Path | None:
    seen = 0
    todo = [(root, 0)]
    while todo:
        path, depth = todo.pop()
        try:
            with os.scandir(path) as it:
                for entry in it:
                    seen += 1
                    if seen > SCAN_ENTRIES:
                        return None
                    try:
                        mode = entry.stat(follow_symlinks=False).st_mode
                    except OSError:
                        continue
                    if stat.S_ISSOCK(mode):
                        return Path(entry.path)
                    if stat.S_ISDIR(mode) and depth + 1 < SCAN_DEPTH:
                        todo.append((Path(entry.path), depth + 1))
        except OSError:
            continue
    return None


def check_source(source: str, state_dir: Path) -> Path:
    src = Path(source)
    if not src.is_absolute():
        raise InvalidError(
            f"mount source {source!r} is relative", hint="give an absolute host path (the CLI resolves it for you)"
        )
    if not src.exists():
        raise InvalidError(f"mount source {source!r} does not exist", hint="create it first, or fix the path")
    real = src.resolve()
    if real == Path("/"):
        raise InvalidError("binding the host root is not allowed", hint="bind only the directory you need")
    home = state_dir.resolve()
    if real == home or home.is_relative_to(real) or real.is_relative_to(home):
        raise InvalidError(f"{source} holds hutch's state and the daemon's socket", hint="bind a directory outside HUTCH_HOME")
    for bad in FORBIDDEN_SOURCES:
        if real == bad or real.is_relative_to(bad):
            raise InvalidError(f"{source} is a runtime or kernel directory", hint="bind a regular directory or file")
    if real.is_socket():
        raise InvalidError(f"{source} is a socket; host sockets are never exposed", hint="bind a directory or file")
    if not (real.is_dir() or real.is_file()):
        raise InvalidError(f"{source} is not a file or directory", hint="bind a directory or regular file")
    if real.is_dir():
        found = _socket_inside(real)
        if found is not None:
            raise InvalidError(
                f"{source} contains a socket ({found}); host sockets are never exposed",
                hint="bind a subdirectory without sockets",
            )
    return real


def validate(mounts: list[Mount], state_dir: Path) -> list[tuple[Path, str, bool]]:
    return [(check_source(m.source, state_dir), check_target(m.target), m.readonly) for m in mounts]
