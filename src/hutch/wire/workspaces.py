"""Workspace bodies: files, push/pull, snapshots, fork and tenants."""

# No "from __future__ import annotations": Python 3.11 sees NotRequired/Required only in evaluated annotations.
from typing import Literal, NotRequired, TypedDict

from hutch.wire.system import ErrorDetail

__all__ = [
    "FileEntry",
    "FileWritten",
    "ForkChild",
    "ForkRequest",
    "ForkResult",
    "Manifest",
    "ManifestEntry",
    "PullSummary",
    "PushManifest",
    "PushResult",
    "PushSummary",
    "RestoreRequest",
    "SnapshotDeleted",
    "SnapshotRecord",
    "SnapshotRequest",
    "Tenant",
    "TenantDeleted",
]


class FileEntry(TypedDict):
    """One entry of ``GET /v1/sandboxes/{ref}/ls``."""

    name: str
    type: str  # file, dir, symlink, other
    size: int
    mode: int
    mtime: float


class FileWritten(TypedDict):
    """``PUT /v1/sandboxes/{ref}/files?path=...`` (the body is the file's bytes)."""

    sandbox: str
    path: str  # absolute, in the sandbox
    size: int


class ManifestEntry(TypedDict):
    type: Literal["file", "symlink"]
    mode: int
    sha256: str | None  # files
    target: str | None  # symlinks
    size: int


class Manifest(TypedDict):
    """``GET /v1/sandboxes/{ref}/manifest``: what hutch last pushed there."""

    sandbox: str
    files: dict[str, ManifestEntry]


class PushManifest(TypedDict):
    """The head of a push body (``application/x-hutch-push``): ``<length>\\n<this JSON><tar>``."""

    files: dict[str, ManifestEntry]


class PushResult(TypedDict):
    """``POST /v1/sandboxes/{ref}/push``."""

    sandbox: str
    files_sent: int
    bytes: int
    deleted: int
    skipped: int  # unchanged
    dry_run: bool
    send: NotRequired[list[str]]  # with dry_run: what would be sent
    delete: NotRequired[list[str]]  # with dry_run: what would be deleted


class PushSummary(PushResult):
    """What the client's push returns: the daemon's answer and what stayed behind locally."""

    skipped_paths: list[str]
    warnings: list[str]


class PullSummary(TypedDict):
    """What the client's pull returns (the daemon sends a tar: ``GET .../pull``)."""

    directory: str
    files_received: int
    bytes: int
    overwritten: int
    skipped: int
    dry_run: bool
    receive: NotRequired[list[str]]  # with dry_run
    overwrite: NotRequired[list[str]]  # with dry_run


class SnapshotRequest(TypedDict):
    name: str


class RestoreRequest(TypedDict, total=False):
    name: str | None  # the new sandbox's


class SnapshotRecord(TypedDict):
    """A saved workspace: a tar (owners, modes, symlinks, xattrs) under the state dir."""

    name: str
    sandbox_id: str
    provider: str
    path: str
    size: int  # bytes kept: the workspace's tar, plus an image sandbox's writable root's
    created_at: float
    owner: NotRequired[str | None]  # the key that saved it


class SnapshotDeleted(TypedDict):
    snapshot: str
    deleted: bool
    existed: bool


class ForkRequest(TypedDict, total=False):
    count: int
    name_prefix: str | None


class ForkChild(TypedDict):
    """One child of a fork: a sandbox, or (``sandbox`` None) the error that stopped it."""

    index: int
    sandbox: str | None
    name: str | None
    copy_ms: NotRequired[float]
    method: NotRequired[str]  # how the workspace was copied: reflink, tar ...
    skipped: NotRequired[int]  # entries it could not copy as they were
    notes: NotRequired[list[str]]
    error: NotRequired[ErrorDetail]


class ForkResult(TypedDict):
    source: str
    requested: int
    created: int
    failed: int
    children: list[ForkChild]


class Tenant(TypedDict):
    name: str
    provider: str
    created_at: float
    sandbox: str | None  # its live sandbox
    owner: NotRequired[str | None]  # the key that made it


class TenantDeleted(TypedDict):
    tenant: str
    deleted: bool
    existed: bool
    destroyed: list[str]
