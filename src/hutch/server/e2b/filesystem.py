"""envd's ``filesystem.Filesystem`` service and its ``/files`` contents, over the Service.

Contents go through the Service's file reads and writes (``file_read``/``file_written``
events). Stat, listings, directories, moves and removals run a small POSIX command in the
sandbox as a run of its own (``stat``, ``find``, ``mkdir``, ``mv``, ``rm``: coreutils and
busybox both have them), so they act with the sandbox's own user and view. Watching is polling:
each ``GetWatcherEvents`` lists the tree again and reports what changed since the last call
(the ``WatchDir`` stream is :mod:`.watch`).
"""

from __future__ import annotations

import datetime
import itertools
import posixpath
from typing import Any

from hutch.errors import HutchError
from hutch.models import ExecRequest
from hutch.server.e2b.connect import ConnectError, invalid
from hutch.service import Service

SEP = "\x1f"
FORMAT = SEP.join(["%n", "%F", "%s", "%a", "%A", "%U", "%G", "%Y", "%N"])
TYPES = {"regular file": "FILE_TYPE_FILE", "regular empty file": "FILE_TYPE_FILE", "directory": "FILE_TYPE_DIRECTORY"}
MAX_ENTRIES = 100_000
MAX_WATCHERS = 64
FS_TIMEOUT = 60.0
NOT_FOUND, EXISTS = 3, 4
STAT = 'cd / 2>/dev/null; [ -e "$1" ] || [ -L "$1" ] || exit 3; exec stat -c "$2" -- "$1"'
LIST = '[ -d "$1" ] || { [ -e "$1" ] && exit 5; exit 3; }; exec find "$1" -mindepth 1 -maxdepth "$3" -exec stat -c "$2" -- {} +'
MKDIR = '[ -e "$1" ] && exit 4; mkdir -p -- "$1"'
MOVE = '[ -e "$1" ] || [ -L "$1" ] || exit 3; mkdir -p -- "$(dirname -- "$2")" && mv -f -- "$1" "$2"'
REMOVE = '[ -e "$1" ] || [ -L "$1" ] || exit 3; rm -rf -- "$1"'


def rfc3339(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.UTC).isoformat().replace("+00:00", "Z")


def entry(line: str) -> dict[str, Any] | None:
    parts = line.split(SEP)
    if len(parts) != 9:
        return None
    path, kind, size, mode, perms, owner, group, mtime, quoted = parts
    out: dict[str, Any] = {
        "name": posixpath.basename(path.rstrip("/")) or "/",
        "type": TYPES.get(kind, "FILE_TYPE_FILE" if kind != "symbolic link" else "FILE_TYPE_UNSPECIFIED"),
        "path": path,
        "size": size,  # int64: a string in proto3 JSON
        "mode": int(mode, 8),
        "permissions": perms,
        "owner": owner,
        "group": group,
        "modifiedTime": rfc3339(float(mtime)),
    }
    if kind == "symbolic link":
        out["symlinkTarget"] = quoted.split(" -> ", 1)[1].strip("'\"\u2018\u2019") if " -> " in quoted else ""
        out["isSymlink"] = True
    return out


class Files:
    def __init__(self, service: Service) -> None:
        self.svc = service
        self.watchers: dict[str, tuple[str, str, bool, dict[str, tuple[str, str]]]] = {}
        self.ids = itertools.count(1)

    def full(self, sandbox_id: str, path: Any) -> str:
        if not isinstance(path, str) or not path or "\x00" in path or len(path) > 4096:
            raise invalid("path must be a non-empty string of at most 4096 characters")
        if not path.startswith("/"):
            path = posixpath.join(self.svc.get(sandbox_id).spec.workdir, path)
        return str(posixpath.normpath(path))

    async def sh(self, sandbox_id: str, script: str, *args: str) -> str:
        req = ExecRequest(command=["/bin/sh", "-c", script, "sh", *args], timeout=FS_TIMEOUT)
        result = await self.svc.runs.exec(sandbox_id, req)
        if result.exit_code == NOT_FOUND:
            raise ConnectError("not_found", f"path {args[0]!r} not found")
        if result.exit_code == EXISTS:
            raise ConnectError("already_exists", f"path {args[0]!r} already exists")
        if result.exit_code == 5:
            raise invalid(f"path {args[0]!r} is not a directory")
        if result.exit_code != 0:
            raise invalid(f"{args[0]!r}: {result.stderr.strip()[:500] or 'failed'}")
        return str(result.stdout)

    async def stat_path(self, sandbox_id: str, path: str) -> dict[str, Any]:
        found = entry((await self.sh(sandbox_id, STAT, path, FORMAT)).rstrip("\n"))
        if found is None:
            raise ConnectError("unavailable", f"could not read the entry of {path!r}")
        return found

    async def listing(self, sandbox_id: str, path: str, depth: int) -> list[dict[str, Any]]:
        out = await self.sh(sandbox_id, LIST, path, FORMAT, str(depth))
        entries = [e for e in (entry(line) for line in out.splitlines()[:MAX_ENTRIES]) if e is not None]
        return sorted(entries, key=lambda e: e["path"])

    async def call(self, method: str, sandbox_id: str, msg: dict[str, Any]) -> dict[str, Any]:
        if method == "Stat":
            return {"entry": await self.stat_path(sandbox_id, self.full(sandbox_id, msg.get("path")))}
        if method == "ListDir":
            depth = msg.get("depth") or 1
            if not isinstance(depth, int) or not 1 <= depth <= 64:
                raise invalid("depth must be between 1 and 64")
            return {"entries": await self.listing(sandbox_id, self.full(sandbox_id, msg.get("path")), depth)}
        if method == "MakeDir":
            path = self.full(sandbox_id, msg.get("path"))
            await self.sh(sandbox_id, MKDIR, path)
            return {"entry": await self.stat_path(sandbox_id, path)}
        if method == "Move":
            src, dst = self.full(sandbox_id, msg.get("source")), self.full(sandbox_id, msg.get("destination"))
            await self.sh(sandbox_id, MOVE, src, dst)
            return {"entry": await self.stat_path(sandbox_id, dst)}
        if method == "Remove":
            await self.sh(sandbox_id, REMOVE, self.full(sandbox_id, msg.get("path")))
            return {}
        if method == "CreateWatcher":
            return await self.create_watcher(sandbox_id, msg)
        if method == "GetWatcherEvents":
            return {"events": await self.events(sandbox_id, msg.get("watcherId", msg.get("watcher_id")))}
        if method == "RemoveWatcher":
            self.watchers.pop(self._watcher(sandbox_id, msg.get("watcherId", msg.get("watcher_id")))[0], None)
            return {}
        raise ConnectError("unimplemented", f"filesystem.Filesystem/{method} is not implemented")

    async def snapshot(self, sandbox_id: str, path: str, recursive: bool) -> dict[str, tuple[str, str]]:
        entries = await self.listing(sandbox_id, path, 64 if recursive else 1)
        return {e["path"]: (e["modifiedTime"] + e["size"], e["type"]) for e in entries}

    async def create_watcher(self, sandbox_id: str, msg: dict[str, Any]) -> dict[str, Any]:
        if sum(1 for w in self.watchers.values() if w[0] == sandbox_id) >= MAX_WATCHERS:
            raise ConnectError("resource_exhausted", f"sandbox {sandbox_id} has {MAX_WATCHERS} watchers")
        path = self.full(sandbox_id, msg.get("path"))
        recursive = bool(msg.get("recursive"))
        before = await self.snapshot(sandbox_id, path, recursive)
        ident = f"w{next(self.ids)}"
        self.watchers[ident] = (sandbox_id, path, recursive, before)
        return {"watcherId": ident}

    def _watcher(self, sandbox_id: str, ident: Any) -> tuple[str, tuple[str, str, bool, dict[str, tuple[str, str]]]]:
        found = self.watchers.get(ident) if isinstance(ident, str) else None
        if found is None or found[0] != sandbox_id:
            raise ConnectError("not_found", f"watcher {ident!r} not found")
        return ident, found

    async def events(self, sandbox_id: str, ident: Any) -> list[dict[str, Any]]:
        key, (_, path, recursive, before) = self._watcher(sandbox_id, ident)
        try:
            after = await self.snapshot(sandbox_id, path, recursive)
        except HutchError:
            raise
        self.watchers[key] = (sandbox_id, path, recursive, after)
        return changes(before, after, path)


Snapshot = dict[str, tuple[str, str]]


def snapshot_of(listing: str) -> Snapshot:
    entries = [e for e in (entry(line) for line in listing.splitlines()[:MAX_ENTRIES]) if e is not None]
    return {e["path"]: (e["modifiedTime"] + e["size"], e["type"]) for e in entries}


def changes(before: Snapshot, after: Snapshot, path: str) -> list[dict[str, Any]]:
    """envd's filesystem events between two listings of ``path``."""
    out: list[dict[str, Any]] = []
    for p in sorted(set(before) | set(after)):
        name = posixpath.relpath(p, path)
        if p not in before:
            out.append({"name": name, "type": "EVENT_TYPE_CREATE"})
            if after[p][1] == "FILE_TYPE_FILE":
                out.append({"name": name, "type": "EVENT_TYPE_WRITE"})
        elif p not in after:
            out.append({"name": name, "type": "EVENT_TYPE_REMOVE"})
        elif before[p] != after[p]:
            out.append({"name": name, "type": "EVENT_TYPE_WRITE"})
    return out
