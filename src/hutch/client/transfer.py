"""The client side of push and pull: manifests of a local tree, the push tar, a safe pull.

A manifest maps relative paths to ``{type, mode, sha256, target, size}``. In a git work
tree it lists tracked plus untracked-not-ignored files (``git ls-files -co
--exclude-standard``); elsewhere every file, minus ``--exclude`` patterns and ``.git``.
Symlinks are kept as symlinks; one pointing outside the tree is skipped, never followed.
"""

from __future__ import annotations

import fnmatch
import hashlib
import io
import json
import os
import posixpath
import stat
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hutch.errors import ConflictError, InvalidError

if TYPE_CHECKING or sys.version_info >= (3, 12):
    import tarfile
else:  # the extraction filters came with 3.11.4 (Debian 12 has 3.11.2): 3.12's module, backported
    from backports import tarfile

if TYPE_CHECKING:
    from hutch import wire

SIZE_WARNING = 512 << 20
Progress = Callable[[int], None]


def _git_files(root: Path) -> list[str] | None:
    try:
        inside = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--is-inside-work-tree"], capture_output=True, text=True, check=False
        )
    except OSError:
        return None
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        return None
    out = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-co", "--exclude-standard", "-z"], capture_output=True, check=False
    )
    if out.returncode != 0:
        return None
    return sorted({p.decode("utf-8", "surrogateescape") for p in out.stdout.split(b"\0") if p})


def _walk(root: Path) -> list[str]:
    found: list[str] = []
    for top, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != ".git" and not os.path.islink(os.path.join(top, d)))
        rel = os.path.relpath(top, root)
        found += [n if rel == "." else f"{rel}/{n}" for n in files]
        found += [(n if rel == "." else f"{rel}/{n}") for n in os.listdir(top) if os.path.islink(os.path.join(top, n))]
    return sorted(set(found))


def _excluded(rel: str, patterns: Iterable[str]) -> bool:
    parts = rel.split("/")
    for pat in patterns:
        pat = pat.rstrip("/")
        if fnmatch.fnmatch(rel, pat) or any(fnmatch.fnmatch(p, pat) for p in parts):
            return True
    return False


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def local_manifest(root: Path, excludes: Iterable[str] = ()) -> tuple[dict[str, wire.ManifestEntry], list[str]]:
    """(manifest, skipped) for the tree at ``root``; skipped lists what was left out and why."""
    if not root.is_dir():
        raise InvalidError(f"{root} is not a directory", hint="give the directory to push")
    excludes = list(excludes)
    names = _git_files(root)
    if names is None:
        names = _walk(root)
    real_root = os.path.realpath(root)
    manifest: dict[str, wire.ManifestEntry] = {}
    skipped: list[str] = []
    for rel in names:
        if _excluded(rel, excludes) or rel.split("/")[0] == ".git":
            continue
        path = root / rel
        try:
            st = path.lstat()
        except OSError:
            continue  # tracked by git but deleted here
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(path)
            resolved = os.path.realpath(os.path.join(os.path.dirname(os.path.join(real_root, rel)), target))
            if os.path.isabs(target) or not (resolved + "/").startswith(real_root + "/"):
                skipped.append(f"{rel}: symlink outside the tree ({target})")
                continue
            manifest[rel] = {"type": "symlink", "mode": mode, "sha256": None, "target": target, "size": 0}
        elif stat.S_ISREG(st.st_mode):
            manifest[rel] = {"type": "file", "mode": mode, "sha256": _sha256(path), "target": None, "size": st.st_size}
        else:
            skipped.append(f"{rel}: not a regular file or symlink")
    return manifest, skipped


@dataclass
class PushPlan:
    manifest: dict[str, wire.ManifestEntry]
    send: list[str]
    skipped: list[str]
    size: int

    def summary(self, result: wire.PushResult) -> wire.PushSummary:
        warnings = []
        if self.size > SIZE_WARNING:
            warnings.append(f"pushed {self.size >> 20} MiB: large trees are better mounted (--mount) or excluded")
        return {**result, "skipped_paths": self.skipped, "warnings": warnings}


def plan_push(root: Path, excludes: Iterable[str], kept: dict[str, wire.ManifestEntry]) -> PushPlan:
    """What to send: entries that differ from what the sandbox was last given."""
    manifest, skipped = local_manifest(root, excludes)
    send = sorted(p for p, e in manifest.items() if kept.get(p) != e)
    return PushPlan(manifest, send, skipped, sum(int(manifest[p].get("size") or 0) for p in send))


def push_body(
    root: Path, manifest: dict[str, wire.ManifestEntry], send: Iterable[str], progress: Progress | None = None
) -> bytes:
    """``<length>\\n<manifest JSON><tar of the paths to send>`` (parent directories included)."""
    head = json.dumps({"files": manifest}).encode()
    buf = io.BytesIO()
    send = sorted(send)
    if send:
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            dirs: set[str] = set()
            for rel in send:
                parts = rel.split("/")[:-1]
                for i in range(1, len(parts) + 1):
                    d = "/".join(parts[:i])
                    if d not in dirs:
                        dirs.add(d)
                        tar.add(root / d, arcname=d, recursive=False, filter=_anonymous)
                tar.add(root / rel, arcname=rel, recursive=False, filter=_anonymous)
                if progress is not None:
                    progress(int(manifest[rel].get("size") or 0))
    return str(len(head)).encode() + b"\n" + head + buf.getvalue()


def _anonymous(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _safe_member(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """Extraction filter: inside ``dest`` only, links that stay inside, modes kept (not
    setuid/setgid), no owners, no devices. None skips the member."""
    name = posixpath.normpath(member.name)
    if name == ".":
        return None
    if name.startswith(("/", "../")) or name == "..":
        raise InvalidError(f"the sandbox sent a path outside the tree: {member.name!r}")
    if not (member.isfile() or member.isdir() or member.issym()):
        return None
    if member.issym():
        resolved = posixpath.normpath(posixpath.join(posixpath.dirname(name), member.linkname))
        if posixpath.isabs(member.linkname) or resolved == ".." or resolved.startswith("../"):
            return None
    mode = (member.mode or 0o644) & 0o1777
    return member.replace(name=name, mode=mode, deep=False)


def pull_plan(tar: tarfile.TarFile, dest: Path) -> tuple[list[tarfile.TarInfo], list[str], list[str]]:
    """(members to write, overwritten paths with other content, skipped paths)."""
    real = os.path.realpath(dest)
    keep: list[tarfile.TarInfo] = []
    overwrite: list[str] = []
    skipped: list[str] = []
    for member in tar.getmembers():
        safe = _safe_member(member, real)
        if safe is None:
            if posixpath.normpath(member.name) != ".":
                skipped.append(member.name)
            continue
        local = dest / safe.name
        if os.path.lexists(local) and not safe.isdir():
            if safe.isfile() and local.is_file() and not local.is_symlink():
                data = tar.extractfile(member)
                same = data is not None and hashlib.sha256(data.read()).hexdigest() == _sha256(local)
                if same and stat.S_IMODE(local.lstat().st_mode) == safe.mode:
                    continue
            elif safe.issym() and local.is_symlink() and os.readlink(local) == safe.linkname:
                continue
            overwrite.append(safe.name)
        keep.append(safe)
    return keep, overwrite, skipped


def pull_into(data: bytes, dest: Path, *, force: bool = False, dry_run: bool = False) -> wire.PullSummary:
    """Unpack a pulled workspace into ``dest``: nothing is written when a file would be
    overwritten with other content and ``force`` is not given."""
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members, overwrite, skipped = pull_plan(tar, dest)
        if overwrite and not force and not dry_run:
            shown = ", ".join(overwrite[:5]) + (" ..." if len(overwrite) > 5 else "")
            raise ConflictError(
                f"pulling would overwrite {len(overwrite)} file(s) in {dest} with other content: {shown}",
                hint="check with --dry-run, then add --force to overwrite",
            )
        files = [m for m in members if not m.isdir()]
        summary: wire.PullSummary = {
            "directory": str(dest),
            "files_received": len(files),
            "bytes": sum(m.size for m in files if m.isfile()),
            "overwritten": len(overwrite),
            "skipped": len(skipped),
            "dry_run": dry_run,
        }
        if dry_run:
            return {**summary, "receive": [m.name for m in files], "overwrite": overwrite}
        for member in members:
            if member.issym() or member.isfile():
                target = dest / member.name
                if os.path.lexists(target) and (target.is_symlink() or not target.is_dir()):
                    target.unlink()
        tar.extractall(dest, members=members, filter=_checked)
    return summary


def _checked(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo | None:
    """Python's ``data`` filter, checked against the tree as it is on disk while
    extracting (a symlink made by an earlier member included), with the mode kept."""
    try:
        safe = tarfile.data_filter(member, path)
    except (tarfile.LinkOutsideDestinationError, tarfile.AbsoluteLinkError):
        return None
    except tarfile.FilterError as exc:
        raise InvalidError(f"refusing to unpack {member.name!r}: {exc}") from exc
    return safe.replace(mode=member.mode, deep=False) if member.isfile() or member.isdir() else safe
