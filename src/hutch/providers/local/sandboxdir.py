"""A sandbox's directory under ``sandboxes/``: its workspace, control and runs directories."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from hutch.providers.local import disk
from hutch.providers.local.workspace import make_tenant_workspace

if TYPE_CHECKING:
    from hutch.config import Settings
    from hutch.models import SandboxRecord


def shared_workspace(rec: SandboxRecord) -> str | None:
    """A sub-agent's /workspace: its parent's (which, for a sub-agent, is its own parent's)."""
    parent = rec.data.get("parent_data")
    if not parent:
        return None
    return str(parent.get("workspace_path") or Path(parent["dir"]) / "workspace")


def make_dirs(
    settings: Settings,
    root: bool,
    sdir: Path,
    owner: tuple[int, int],
    tenant: str | None = None,
    cap: tuple[int, int] | None = None,
) -> tuple[Path, Path, Path]:
    """The sandbox's directories: its own (0711), workspace, control and runs (0700, its uid's);
    with a ``cap`` (size, its owner) the workspace is on the sandbox's own filesystem (:mod:`.disk`)."""
    settings.sandboxes_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(settings.sandboxes_dir, 0o711)
    if root:  # bwrap runs as the sandbox's uid and must pass through the state dir
        home = settings.home
        os.chmod(home, home.stat().st_mode | 0o111)
    sdir.mkdir(exist_ok=True)
    os.chmod(sdir, 0o711)  # explicit: the daemon runs with umask 077
    ws, ctl = sdir / "workspace", sdir / "ctl"
    uid, gid = owner
    if cap is not None:
        ws = disk.make(sdir, *cap) / "workspace"
    if tenant:  # kept under the state dir, outside the sandbox's own (removed on destroy)
        ws = make_tenant_workspace(settings, tenant, uid if root else None)
    ws.mkdir(mode=0o700, exist_ok=True)
    ctl.mkdir(mode=0o700, exist_ok=True)
    rdir = sdir / "runs"
    rdir.mkdir(mode=0o700, exist_ok=True)
    if root:
        for d in (ws, ctl, rdir):
            os.chown(d, uid, gid)
    return ws, ctl, rdir
