"""What a sandbox changed: its writable root (an image sandbox's overlay upper) and its
``/workspace``, compared with the image and with what the sandbox had when it started.

Changes are judged by **ctime**: the kernel sets it on every change of a file's content,
metadata or name, from its own clock, and no system call sets it back (``touch -d`` and
``utime`` move the mtime and set the ctime to now). ``since`` keeps the changes whose
ctime is at or after it.

- **The writable root.** Every entry of the upper is something the sandbox wrote. An
  overlay *whiteout* (a character device 0/0, or an empty file marked with the
  ``overlay.whiteout`` extended attribute) is a deletion, its ctime when it was deleted;
  an entry the image also has (not hidden by an opaque directory above it) is modified,
  anything else added. A directory marked opaque replaced the image's directory whole.
- **The workspace** has no lower layer: at create the provider records an index of it
  (path -> inode and ctime; a new sandbox's workspace is empty, so the index is too), and
  of the upper (the mount points bwrap made there). An entry not in the index is added, one
  whose inode or ctime moved is modified, an indexed path now absent is deleted. With
  ``since`` a deletion is kept when the nearest directory still there above it changed
  at or after ``since`` (a removal moves its directory's ctime; an older deletion under an
  unchanged directory is left out). Deletions of files made after the start cannot be
  proven (nothing recorded them) and are not reported, like ``docker diff``.

The daemon reads both trees itself, never following a symlink (``os.fwalk`` descends
through directory descriptors and checks each one is the directory it listed), reading
only names and metadata: what the sandbox planted cannot point it anywhere else.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

INDEX = "start-index.json"
MAX_INDEX = 200_000  # entries recorded per area at start (past it deletions there are not proven)
MAX_WALK = 2_000_000  # entries read per area by one diff
MAX_CHANGES = 100_000  # changes answered by one diff
MAX_NOTES = 5
WHITEOUT_XATTRS = ("user.overlay.whiteout", "trusted.overlay.whiteout")
OPAQUE_XATTRS = ("user.overlay.opaque", "trusted.overlay.opaque")
MOUNT_POINTS = frozenset({"workspace", ".hutch", "proc", "dev", "sys"})  # never the sandbox's own writes


def kind_of(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "other"


def _xattr(path: str, names: tuple[str, ...]) -> bytes | None:
    for name in names:
        with contextlib.suppress(OSError):
            return os.getxattr(path, name, follow_symlinks=False)
    return None


def is_whiteout(st: os.stat_result, path: str) -> bool:
    """An overlay whiteout: a 0/0 character device, or an empty file with the whiteout mark."""
    if stat.S_ISCHR(st.st_mode):
        return st.st_rdev == 0
    return stat.S_ISREG(st.st_mode) and st.st_size == 0 and _xattr(path, WHITEOUT_XATTRS) is not None


def is_opaque(dir_path: str) -> bool:
    return _xattr(dir_path, OPAQUE_XATTRS) in (b"y", b"x")


@dataclass
class Walked:
    """One entry of a tree: its path relative to the tree, its lstat, and a path to reach it
    without following symlinks (``/proc/self/fd/DIRFD/NAME``, valid during the walk)."""

    rel: str
    st: os.stat_result
    via: str


@dataclass
class Walk:
    notes: list[str] = field(default_factory=list)
    truncated: bool = False

    def entries(self, root: Path, limit: int = MAX_WALK) -> Iterator[Walked]:
        """Every entry under ``root`` (not ``root`` itself), top-down, never through a symlink."""
        if not root.is_dir():
            return
        seen = 0

        def failed(exc: OSError) -> None:
            if len(self.notes) < MAX_NOTES:
                self.notes.append(f"cannot read {exc.filename}: {exc.strerror}")

        for top, dirs, files, dfd in os.fwalk(root, follow_symlinks=False, onerror=failed):
            base = os.path.relpath(top, root)
            base = "" if base == "." else base + "/"
            for name in sorted(dirs + files):
                try:
                    st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                except OSError:
                    continue  # removed while read
                seen += 1
                if seen > limit:
                    self.truncated = True
                    return
                yield Walked(base + name, st, f"/proc/self/fd/{dfd}/{name}")


def index(root: Path | None, skip_top: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The start index of one area: ``{"entries": {rel: [ino, ctime_ns]}, "complete": bool}``."""
    entries: dict[str, list[int]] = {}
    walk = Walk()
    if root is not None:
        for e in walk.entries(root, MAX_INDEX):
            if e.rel.split("/", 1)[0] in skip_top and "/" in e.rel:
                continue
            entries[e.rel] = [e.st.st_ino, e.st.st_ctime_ns]
    return {"entries": entries, "complete": not walk.truncated}


def record_start(sdir: Path, upper: Path | None, workspace: Path) -> None:
    """Write the sandbox's start index (``sdir/start-index.json``, the daemon's, 0600)."""
    doc = {"time": time.time(), "root": index(upper, MOUNT_POINTS), "workspace": index(workspace)}
    tmp = sdir / (INDEX + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
    os.replace(tmp, sdir / INDEX)


def read_start(sdir: Path) -> dict[str, Any] | None:
    try:
        with open(sdir / INDEX) as f:
            doc: dict[str, Any] = json.load(f)
    except (OSError, ValueError):
        return None
    return doc


class Lower:
    """Name lookups in the image's root, one directory listing at a time, never through a symlink."""

    def __init__(self, root: Path | None) -> None:
        self.root = root
        self._dirs: dict[str, dict[str, int] | None] = {}

    def listing(self, rel_dir: str) -> dict[str, int] | None:
        """``{name: mode}`` of the image's directory ``rel_dir`` ("" the root), None if it has none."""
        if rel_dir in self._dirs:
            return self._dirs[rel_dir]
        found: dict[str, int] | None = None
        if self.root is not None:
            with contextlib.suppress(OSError):
                fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                try:
                    for part in [p for p in rel_dir.split("/") if p]:
                        nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                        os.close(fd)
                        fd = nfd
                    found = {}
                    with os.scandir(fd) as it:
                        for entry in it:
                            found[entry.name] = entry.stat(follow_symlinks=False).st_mode
                finally:
                    os.close(fd)
        self._dirs[rel_dir] = found
        return found

    def hide(self, rel_dir: str) -> None:
        """An opaque directory: nothing of the image shows below it."""
        self._dirs[rel_dir] = None

    def mode(self, rel: str) -> int | None:
        parent, _, name = rel.rpartition("/")
        names = self.listing(parent)
        return None if names is None else names.get(name)


def _change(path: str, kind: str, st: os.stat_result | None, type_: str | None = None) -> dict[str, Any]:
    return {
        "path": path,
        "kind": kind,
        "type": type_ or (kind_of(st.st_mode) if st is not None else "other"),
        "size": st.st_size if st is not None and stat.S_ISREG(st.st_mode) else 0,
        "mode": stat.S_IMODE(st.st_mode) if st is not None else 0,
        "ctime": st.st_ctime if st is not None else None,
    }


def _unchanged(start: dict[str, list[int]], rel: str, st: os.stat_result) -> bool:
    was = start.get(rel)
    return was is not None and was[0] == st.st_ino and was[1] == st.st_ctime_ns


def root_changes(
    upper: Path, lower_root: Path, start: dict[str, Any] | None, since_ns: int | None, walk: Walk
) -> Iterator[dict[str, Any]]:
    """The writable root's changes (paths absolute, as the sandbox sees them)."""
    began: dict[str, list[int]] = (start or {}).get("entries", {})
    lower = Lower(lower_root)
    dirs: dict[str, int] = {}  # ctime of each directory of the upper (a whiteout's own ctime is shared)
    with contextlib.suppress(OSError):
        dirs[""] = os.lstat(upper).st_ctime_ns
    for e in walk.entries(upper):
        if e.rel.split("/", 1)[0] in MOUNT_POINTS:
            continue  # a mount point bwrap made (nothing the sandbox writes there reaches the upper)
        is_dir = stat.S_ISDIR(e.st.st_mode)
        image_mode = lower.mode(e.rel)
        if is_dir:
            dirs[e.rel] = e.st.st_ctime_ns
        if is_dir and (image_mode is None or not stat.S_ISDIR(image_mode) or is_opaque(e.via)):
            lower.hide(e.rel)  # a new directory (or one that replaced the image's): nothing below is the image's
        if is_whiteout(e.st, e.via):
            # overlay links whiteouts to one shared inode, whose ctime moves with every deletion: the
            # deletion happened at or before both its own ctime and its directory's
            when = min(e.st.st_ctime_ns, dirs.get(e.rel.rpartition("/")[0], e.st.st_ctime_ns))
            if since_ns is None or when >= since_ns:
                found = _change("/" + e.rel, "deleted", e.st, kind_of(image_mode) if image_mode is not None else "other")
                yield found | {"size": 0, "mode": 0, "ctime": when / 1e9}
            continue
        if _unchanged(began, e.rel, e.st) or (since_ns is not None and e.st.st_ctime_ns < since_ns):
            continue
        existed = image_mode is not None or e.rel in began
        yield _change("/" + e.rel, "modified" if existed else "added", e.st)


def workspace_changes(ws: Path, start: dict[str, Any] | None, since_ns: int | None, walk: Walk) -> Iterator[dict[str, Any]]:
    """The workspace's changes against its start index (paths under ``/workspace``)."""
    began: dict[str, list[int]] = (start or {}).get("entries", {})
    present: dict[str, int] = {}  # every path there now -> its ctime (for deletions' directories)
    for e in walk.entries(ws):
        present[e.rel] = e.st.st_ctime_ns
        if _unchanged(began, e.rel, e.st) or (since_ns is not None and e.st.st_ctime_ns < since_ns):
            continue
        yield _change("/workspace/" + e.rel, "modified" if e.rel in began else "added", e.st)
    if walk.truncated:
        return
    with contextlib.suppress(OSError):
        present[""] = os.lstat(ws).st_ctime_ns
    for rel in sorted(began):
        if rel in present:
            continue
        parent = rel.rpartition("/")[0]
        while parent not in present and parent:
            parent = parent.rpartition("/")[0]
        if since_ns is not None and present.get(parent, 0) < since_ns:
            continue
        yield {"path": "/workspace/" + rel, "kind": "deleted", "type": "other", "size": 0, "mode": 0, "ctime": None}


def diff(
    *,
    sdir: Path,
    workspace: Path,
    upper: Path | None,
    lower: Path | None,
    since: float | None,
    under: str = "/",
    limit: int = MAX_CHANGES,
) -> dict[str, Any]:
    """The changes of one sandbox, sorted by path; only those at or under ``under``."""
    start = read_start(sdir)
    since_ns = int(since * 1e9) if since is not None else None
    notes: list[str] = []
    if start is None:
        notes.append("the sandbox has no start index (made by an older hutch): /workspace deletions are not known")
    elif not start["workspace"].get("complete", True):
        notes.append(f"/workspace had over {MAX_INDEX} entries at start: deletions past them are not known")
    if upper is None:
        notes.append("the root filesystem is the host's, read-only: only /workspace is compared")
    walk = Walk()
    found: list[dict[str, Any]] = []
    prefix = under.rstrip("/") + "/"
    sources = [workspace_changes(workspace, start and start["workspace"], since_ns, walk)]
    if upper is not None and lower is not None:
        sources.insert(0, root_changes(upper, lower, start and start["root"], since_ns, walk))
    truncated = False
    for source in sources:
        for change in source:
            if under != "/" and change["path"] != under and not change["path"].startswith(prefix):
                continue
            if len(found) >= limit:
                truncated = True
                break
            found.append(change)
    found.sort(key=lambda c: c["path"])
    notes += walk.notes
    if walk.truncated:
        truncated = True
        notes.append(f"a tree has over {MAX_WALK} entries: only the first were compared")
    return {"since": since, "changes": found, "truncated": truncated, "notes": notes}
