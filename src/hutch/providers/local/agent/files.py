"""File requests: read, write and list paths inside the sandbox, as the sandbox's user."""

from __future__ import annotations

import errno
import os
import stat

from . import wire

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .conn import Connection

HINTS = {
    "not_found": "list the directory with: hutch ls SANDBOX PATH",
    "permission_denied": "write under /workspace, /tmp or HOME; the rest of the sandbox is read-only",
    "capacity": "free space: /workspace shares the disk of HUTCH_HOME, /tmp and HOME are small tmpfs",
}
KINDS = {
    errno.ENOENT: "not_found",
    errno.ENOTDIR: "not_found",
    errno.EACCES: "permission_denied",
    errno.EPERM: "permission_denied",
    errno.EROFS: "permission_denied",
    errno.EISDIR: "invalid",
    errno.ENOSPC: "capacity",
    errno.EDQUOT: "capacity",
}


def os_error(exc: OSError, path: str) -> dict[str, Any]:
    kind = KINDS.get(exc.errno or 0, "internal")
    return wire.error(kind, f"{path}: {exc.strerror}", HINTS.get(kind))


def read(conn: Connection, req: Any) -> None:
    path = str(req["path"])
    limit = int(req.get("limit", 1 << 26))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError as exc:
        conn.send(os_error(exc, path))
        return
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        what = "is a directory" if stat.S_ISDIR(st.st_mode) else "is not a regular file"
        conn.send(wire.error("invalid", f"{path} {what}", "list a directory with: hutch ls SANDBOX PATH"))
        return
    with os.fdopen(fd, "rb") as f:
        f.seek(int(req.get("offset", 0)))
        data = f.read(limit + 1)
    truncated = len(data) > limit
    data = data[:limit]
    conn.send(wire.ok(total=st.st_size, truncated=truncated), data)


def write(conn: Connection, req: Any) -> None:
    path = str(req["path"])
    size = int(req["size"])
    payload = conn.data(size)
    parent = os.path.dirname(path) or "/"
    try:
        if req.get("parents", True):
            os.makedirs(parent, exist_ok=True)
        # a temporary file renamed into place: a failed write (disk full) leaves nothing behind
        tmp = os.path.join(parent, f".{os.path.basename(path)}.hutch-{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(payload)
                os.fchmod(f.fileno(), int(req.get("mode", 0o644)))
            os.replace(tmp, path)
        except BaseException:
            with wire.ignoring(OSError):
                os.unlink(tmp)
            raise
    except OSError as exc:
        conn.send(os_error(exc, path))
        return
    conn.send(wire.ok(path=path, size=size))


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "file" if stat.S_ISREG(mode) else "other"


def listing(conn: Connection, req: Any) -> None:
    path = str(req["path"])
    entries: list[dict[str, Any]] = []
    try:
        with os.scandir(path) as it:
            for entry in it:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                mode = st.st_mode
                entries.append(
                    {
                        "name": entry.name,
                        "type": _kind(mode),
                        "size": st.st_size,
                        "mode": stat.S_IMODE(mode),
                        "mtime": st.st_mtime,
                    }
                )
    except OSError as exc:
        conn.send(os_error(exc, path))
        return
    entries.sort(key=lambda e: str(e["name"]))
    conn.send(wire.ok(path=path, entries=entries))
