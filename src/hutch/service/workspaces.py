"""Workspace use-cases: the kept sandboxes of auto and tenant mode, push/pull, snapshots, fork.

The Service decides (plans, guards, records, events); providers with the ``workspace``
capability move tars. Everything that can be refused is refused before any mutation.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import posixpath
import tarfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hutch.actors import OWNER_ID
from hutch.checks import check_name, check_path
from hutch.errors import ConflictError, HutchError, InvalidError, NotFoundError, PolicyError
from hutch.models import LIVE_STATES, SandboxRecord, SandboxSpec, SandboxState, SnapshotRecord, new_id
from hutch.provider import WorkspaceProvider, transfer_provider, workspace_provider

if TYPE_CHECKING:
    from hutch.service import Service

log = logging.getLogger("hutch.service")
DELETE_MAX_FILES = 100
DELETE_MAX_SHARE = 0.2
MAX_FORK = 32
SETTLE_WAIT = 30.0
ENTRY_KEYS = ("type", "mode", "sha256", "target", "size")
# Not carried from a source sandbox to a fork or a restore: its reuse key or tenant, and values
# the store never holds (env values are redacted there, secrets are not stored at all).
UNCOPIED: dict[str, Any] = {
    "tenant": None, "reuse_key": None, "env": {}, "secrets": {}, "secret_names": [],
    "secret_hosts": {}, "secret_body": [], "no_intercept": [],
}  # fmt: skip


def root_archive(snapshot: Path) -> Path:
    """Where a snapshot keeps its sandbox's writable root (an image sandbox's), beside its workspace."""
    return snapshot.with_suffix(".root.tar")


def check_rel(path: str) -> str:
    """A manifest path: relative, normalised, inside the workspace."""
    check_path(path, "workspace path")
    norm = posixpath.normpath(path) if path else ""
    if not path or path.startswith("/") or norm != path or norm == "." or norm.split("/")[0] == "..":
        raise InvalidError(f"invalid workspace path {path!r}", hint="paths are relative to the workspace, without '..'")
    return path


class Workspaces:
    def __init__(self, service: Service) -> None:
        self.service = service
        self.store = service.store
        self._ensure_lock = asyncio.Lock()
        self._forks: set[asyncio.Task[Any]] = set()

    async def settle(self, timeout: float = SETTLE_WAIT) -> None:
        """Wait (bounded) for forks in flight to finish or clean up (the daemon is stopping)."""
        forks = {t for t in self._forks if not t.done()}
        if forks:
            await asyncio.wait(forks, timeout=timeout)

    def _provider(self, rec: SandboxRecord) -> WorkspaceProvider:
        return workspace_provider(self.service.provider(rec.provider))

    def tmp_path(self, suffix: str) -> Path:
        tmp = self.service.settings.home / "tmp"
        tmp.mkdir(mode=0o700, exist_ok=True)
        return tmp / f"{new_id('tmp')}{suffix}"

    # -- kept sandboxes ------------------------------------------------------------------

    async def ensure(self, spec: SandboxSpec) -> tuple[SandboxRecord, bool]:
        """Auto and tenant modes: the live sandbox of this reuse key or tenant, or a new one.

        A sandbox that is gone is marked lost and replaced; nothing is ever re-run here.
        """
        if not (spec.reuse_key or spec.tenant):
            raise InvalidError("ensure needs a reuse key or a tenant", hint="use --reuse or --tenant NAME")
        async with self._ensure_lock:
            return await self._ensure(spec)

    async def _ensure(self, spec: SandboxSpec) -> tuple[SandboxRecord, bool]:
        for rec in self._kept_sandboxes(spec):
            if rec.state == SandboxState.running and await self.service.provider(rec.provider).alive(rec):
                return rec, False
            if rec.state == SandboxState.running:
                self.store.runs.mark_lost(rec.id, "the sandbox disappeared")
                self.store.sandboxes.update(rec.id, state=SandboxState.lost, error="the sandbox disappeared")
                self.store.events.append("sandbox_lost", rec.id)
        return await self.service.create(spec), True

    def _kept_sandboxes(self, spec: SandboxSpec) -> list[SandboxRecord]:
        if spec.tenant:  # a tenant is its owner's own, an admin's too
            mine = self.store.sandboxes.all(LIVE_STATES, owner=self.service.access.owner())
            return [r for r in mine if r.spec.tenant == spec.tenant]
        live = self.store.sandboxes.all(LIVE_STATES, owner=self.service.access.owner_filter())
        return [r for r in live if r.spec.reuse_key == spec.reuse_key and r.spec.provider == spec.provider]

    def check_tenant(self, spec: SandboxSpec) -> str | None:
        """Before create: a tenant has at most one live sandbox; its provider must keep workspaces.
        The tenant is the actor's own (two keys may have one of the same name); its storage key."""
        if not spec.tenant:
            return None
        workspace_provider(self.service.provider(spec.provider))
        for rec in self._kept_sandboxes(spec):
            raise ConflictError(
                f"tenant {spec.tenant!r} already has a live sandbox {rec.id}",
                hint=f"use it (hutch exec {rec.id} -- ...), or destroy it first: hutch destroy {rec.id}",
            )
        return self.store.tenants.ensure(spec.tenant, spec.provider, self.service.access.owner())

    def tenants(self) -> list[dict[str, Any]]:
        live = {(r.owner, r.spec.tenant): r for r in self.store.sandboxes.all(LIVE_STATES) if r.spec.tenant}
        mine = [t for t in self.store.tenants.all() if self.service.access.visible(t.get("owner"))]
        out = []
        for t in mine:
            rec = live.get((t["owner"], t["name"]))
            out.append({k: v for k, v in t.items() if k != "storage"} | {"sandbox": rec.id if rec else None})
        return out

    async def delete_tenant(self, name: str) -> dict[str, Any]:
        """Idempotent teardown: an unknown tenant is a success that says so (``existed: false``)."""
        try:
            tenant = self.store.tenants.get(check_name(name, "tenant"))  # the actor's own (an admin: any)
            if not self.service.access.visible(tenant.get("owner")):
                raise NotFoundError(f"no tenant {name!r}")
        except NotFoundError:
            return {"tenant": name, "deleted": True, "existed": False, "destroyed": []}
        destroyed = []
        for rec in self.store.sandboxes.all(LIVE_STATES, owner=tenant["owner"]):
            if rec.spec.tenant == name:
                await self.service.destroy(rec.id)
                destroyed.append(rec.id)
        provider = workspace_provider(self.service.provider(tenant["provider"]))
        await provider.delete_tenant(tenant["storage"])
        self.store.tenants.delete(tenant["owner"], name)
        self.store.events.append("tenant_deleted", None, tenant=name, destroyed=destroyed)
        return {"tenant": name, "deleted": True, "existed": True, "destroyed": destroyed}

    # -- push / pull ---------------------------------------------------------------------

    def manifest(self, ref: str) -> dict[str, Any]:
        rec = self.service.live(ref)
        return {"sandbox": rec.id, "files": self.store.manifests.get(rec.id)}

    async def push(
        self,
        ref: str,
        manifest: dict[str, Any],
        tar_path: Path | None,
        *,
        delete: bool = False,
        force: bool = False,
        dry_run: bool = False,
        approval: str | None = None,
    ) -> dict[str, Any]:
        """Bring the workspace to ``manifest`` (what the client has). Only entries that
        differ from what hutch last put there travel; ``delete`` removes what an earlier
        push sent and the client no longer has (never files made in the sandbox)."""
        rec = self.service.live(ref)
        if rec.spec.workspace == "ro":
            raise PolicyError(
                f"sandbox {rec.id} is a sub-agent with a read-only view of its parent's workspace",
                hint=f"push to the parent instead: hutch push {rec.spec.parent}",
            )
        provider = transfer_provider(self.service.provider(rec.provider))
        entries = {check_rel(p): {k: e.get(k) for k in ENTRY_KEYS} for p, e in manifest.items()}
        kept = self.store.manifests.get(rec.id)
        send = sorted(p for p, e in entries.items() if kept.get(p) != e)
        deletes = sorted(p for p in kept if p not in entries) if delete else []
        too_many = len(deletes) > DELETE_MAX_FILES or len(deletes) > len(kept) * DELETE_MAX_SHARE
        if deletes and too_many and not force:
            raise PolicyError(
                f"--delete would remove {len(deletes)} of {len(kept)} files (more than {DELETE_MAX_FILES} or "
                f"{DELETE_MAX_SHARE:.0%} of the tree)",
                hint="check with --dry-run, then add --force to delete them",
            )
        size = sum(int(entries[p].get("size") or 0) for p in send)
        summary: dict[str, Any] = {
            "sandbox": rec.id,
            "files_sent": len(send),
            "bytes": size,
            "deleted": len(deletes),
            "skipped": len(entries) - len(send),
            "dry_run": dry_run,
        }
        if dry_run:
            return summary | {"send": send, "delete": deletes}
        if deletes:  # a sandbox may require a human's approval before a push deletes anything
            self.service.approvals.require(rec, "push.delete", approval)
        if send or deletes:
            names: set[str] = set()
            if tar_path is not None:
                with tarfile.open(tar_path) as tar:
                    names = {posixpath.normpath(m.name) for m in tar.getmembers()}
            missing = [p for p in send if p not in names]
            if missing:
                raise ConflictError(
                    f"{len(missing)} changed file(s) missing from the push (e.g. {missing[0]!r}): "
                    "the sandbox changed since the client looked",
                    hint="push again",
                )
            await self.service._guarded(rec, provider.import_workspace(rec, tar_path if send else None, deletes))
        new = {p: e for p, e in kept.items() if p not in deletes} | entries
        self.store.manifests.set(rec.id, new)
        self.store.events.append(
            "workspace_pushed", rec.id, files=len(send), bytes=size, deleted=len(deletes), skipped=summary["skipped"]
        )
        return summary

    async def pull(self, ref: str) -> Path:
        """The workspace as a tar file (the caller removes it)."""
        rec = self.service.live(ref)
        provider = transfer_provider(self.service.provider(rec.provider))
        dest = self.tmp_path(".tar")
        try:
            size = await self.service._guarded(rec, provider.export_workspace(rec, dest))
        except BaseException:
            dest.unlink(missing_ok=True)
            raise
        self.store.events.append("workspace_pulled", rec.id, bytes=size)
        return dest

    # -- snapshots -----------------------------------------------------------------------

    def _snapshot_dir(self) -> Path:
        path = self.service.settings.home / "snapshots"
        path.mkdir(mode=0o700, exist_ok=True)
        return path

    async def snapshot_save(self, ref: str, name: str) -> SnapshotRecord:
        check_name(name, "snapshot")
        rec = self.service.live(ref)
        provider = self._provider(rec)
        owner = self.service.access.owner()
        if self.store.snapshots.exists(owner, name):
            raise ConflictError(f"you already have a snapshot named {name!r}", hint=f"hutch snapshot delete {name}")
        # the local user's at snapshots/NAME.tar (as always); a key's in a directory of its own
        home = self._snapshot_dir() if owner == OWNER_ID else self._snapshot_dir() / owner
        home.mkdir(mode=0o700, exist_ok=True)
        final = home / f"{name}.tar"
        tmp = self.tmp_path(".tar")
        placed = False
        try:
            started = time.monotonic()
            size = await self.service._guarded(rec, provider.export_workspace(rec, tmp))
            root_tmp = tmp.with_suffix(".root.tar")
            try:  # an image sandbox's writable root, beside its workspace: the snapshot's size counts both
                if (root_size := await self.service._guarded(rec, provider.export_root(rec, root_tmp))) is not None:
                    os.replace(root_tmp, root_archive(final))
                    size += root_size
            finally:
                root_tmp.unlink(missing_ok=True)
            os.replace(tmp, final)
            placed = True
            snap = SnapshotRecord(
                name=name,
                sandbox_id=rec.id,
                provider=rec.provider,
                path=str(final),
                size=size,
                created_at=time.time(),
                owner=owner,
            )
            self.store.snapshots.insert(snap)
        except BaseException:
            tmp.unlink(missing_ok=True)
            if placed:
                final.unlink(missing_ok=True)
            root_archive(final).unlink(missing_ok=True)
            raise
        ms = round((time.monotonic() - started) * 1000, 1)
        self.store.events.append("snapshot_saved", rec.id, snapshot=name, bytes=size, duration_ms=ms)
        return snap

    def snapshots(self) -> list[SnapshotRecord]:
        return [s for s in self.store.snapshots.all() if self.service.access.visible(s.owner)]

    def _snapshot(self, name: str) -> SnapshotRecord:
        """A snapshot the actor may see (another key's does not exist for it)."""
        snap = self.store.snapshots.get(check_name(name, "snapshot"))  # the actor's own (an admin: any)
        if not self.service.access.visible(snap.owner):
            raise NotFoundError(f"no snapshot {name!r}", hint="list snapshots with: hutch snapshot list")
        return snap

    async def snapshot_restore(
        self, name: str, new_name: str | None = None, changes: dict[str, Any] | None = None
    ) -> SandboxRecord:
        """A new sandbox from snapshot ``name``: its source's spec (``changes``: these fields instead)."""
        snap = self._snapshot(name)
        if not Path(snap.path).is_file():
            raise NotFoundError(f"snapshot {name!r} has lost its archive {snap.path}", hint=f"hutch snapshot delete {name}")
        spec = SandboxSpec(name=new_name, provider=snap.provider)
        with contextlib.suppress(NotFoundError):
            spec = self.store.sandboxes.get(snap.sandbox_id).spec.model_copy(update={"name": new_name} | UNCOPIED)
        if changes:
            spec = SandboxSpec.model_validate(spec.model_dump(exclude_unset=True) | changes)
        workspace_provider(self.service.provider(spec.provider))
        root = root_archive(Path(snap.path))
        rec = await self.service.create(spec, root_seed={"tar": str(root)} if root.is_file() else None, provision=False)
        try:
            await self._provider(rec).import_workspace(rec, Path(snap.path), [])
        except BaseException:
            cleanup = self.service.destroy(rec.id, cause=f"restoring snapshot {name} failed", checked=True)
            await asyncio.shield(cleanup)
            raise
        self.store.events.append("snapshot_restored", rec.id, snapshot=name)
        return rec

    async def snapshot_delete(self, name: str) -> dict[str, Any]:
        try:
            snap = self._snapshot(name)
        except NotFoundError:
            return {"snapshot": name, "deleted": True, "existed": False}
        Path(snap.path).unlink(missing_ok=True)
        root_archive(Path(snap.path)).unlink(missing_ok=True)
        self.store.snapshots.delete(snap.owner or OWNER_ID, snap.name)
        self.store.events.append("snapshot_deleted", snap.sandbox_id, snapshot=name)
        return {"snapshot": name, "deleted": True, "existed": True}

    # -- fork ----------------------------------------------------------------------------

    async def fork(self, ref: str, count: int = 1, name_prefix: str | None = None) -> dict[str, Any]:
        """``count`` new sandboxes whose workspaces start as copies of ``ref``'s. Each child
        stands alone: one that fails is destroyed and reported, the others are kept. A fork
        whose source goes away (destroyed) while it runs fails as a whole with ``conflict``
        and keeps no child: a copy of a workspace being removed is no copy."""
        if not 1 <= count <= MAX_FORK:
            raise InvalidError(f"--count must be between 1 and {MAX_FORK}, got {count}")
        if name_prefix is not None:
            check_name(f"{name_prefix}{count}", "fork")
        src = self.service.live(ref)
        provider = self._provider(src)
        task = asyncio.current_task()
        if task is not None:
            self._forks.add(task)
        children: list[dict[str, Any]] = []
        made: list[str] = []  # children that exist now: all go if the fork fails as a whole
        try:
            for i in range(1, count + 1):
                self._check_source(src)
                name = f"{name_prefix}{i}" if name_prefix is not None else None
                spec = src.spec.model_copy(update={"name": name} | UNCOPIED)
                # its writable root too; on a cluster, its node (the child is placed beside it)
                seeded = src.data.get("image_id") or self.service.provider(src.provider).capabilities.nodes
                seed = {"sandbox": src.id, "data": src.data} if seeded else None
                try:
                    child = await self.service.create(spec, root_seed=seed, provision=False)
                except HutchError as exc:
                    children.append({"index": i, "sandbox": None, "name": name} | exc.to_dict())
                    continue
                made.append(child.id)
                try:
                    self._check_source(src)  # here to the copy's start nothing waits: a destroy from now on stops it
                    started = time.monotonic()
                    report = await self.service._guarded(src, provider.clone_workspace(src, child))
                    ms = round((time.monotonic() - started) * 1000, 1)
                    self._check_source(src)
                    if self.store.sandboxes.get(child.id).state != SandboxState.running:
                        raise ConflictError(f"sandbox {child.id} was destroyed while its workspace was being copied")
                except HutchError as exc:
                    self._check_source(src)  # the source went away: the whole fork fails
                    made.remove(child.id)
                    await self._drop_child(child.id, src.id)
                    children.append({"index": i, "sandbox": None, "name": name} | exc.to_dict())
                    continue
                self.store.manifests.set(child.id, self.store.manifests.get(src.id))
                copied: dict[str, Any] = {"method": report.method, "skipped": report.skipped, "notes": list(report.notes)}
                self.store.events.append("sandbox_forked", child.id, source=src.id, duration_ms=ms, **copied)
                children.append({"index": i, "sandbox": child.id, "name": child.name, "copy_ms": ms} | copied)
        except BaseException:
            # a failed fork keeps nothing, even when its request is cancelled meanwhile
            cleanup = asyncio.ensure_future(self._drop_children(made, src.id))
            self._forks.add(cleanup)
            cleanup.add_done_callback(self._forks.discard)
            await asyncio.shield(cleanup)
            raise
        finally:
            if task is not None:
                self._forks.discard(task)
        made_ok = sum(1 for c in children if c["sandbox"])
        return {"source": src.id, "requested": count, "created": made_ok, "failed": count - made_ok, "children": children}

    def _check_source(self, src: SandboxRecord) -> None:
        try:
            state = self.store.sandboxes.get(src.id).state
        except NotFoundError:
            raise NotFoundError(f"sandbox {src.id} was removed while it was being forked") from None
        if state not in (SandboxState.running, SandboxState.paused):
            became = "destroyed" if state in (SandboxState.destroying, SandboxState.destroyed) else state.value
            raise ConflictError(
                f"sandbox {src.id} was {became} while it was being forked: no child was kept",
                hint="fork a sandbox that stays alive until the fork returns",
            )

    async def _drop_child(self, child: str, source: str) -> None:
        try:
            await self.service.destroy(child, cause=f"its fork from {source} failed", checked=True)
        except HutchError as exc:  # a child that someone else is destroying already is fine
            log.warning("fork of %s: cannot destroy child %s: %s", source, child, exc.message)
        except Exception:
            log.exception("fork of %s: cannot destroy child %s", source, child)

    async def _drop_children(self, children: list[str], source: str) -> None:
        for child in children:
            await self._drop_child(child, source)
