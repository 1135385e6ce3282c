"""The wire contract: every body the HTTP API carries, defined once as TypedDicts.

The CLI, the SDK, the MCP server and the client read and write these shapes; the server
validates the requests with its pydantic models (hutch.models, hutch.server) and publishes
them in its OpenAPI document. tests/unit/test_wire.py holds all three to this package: the
pydantic models and the OpenAPI components have the keys, required keys and types of the
TypedDicts here, every route is in :data:`hutch.wire.routes.ROUTES`, and the bodies the
daemon sends validate against them.

- :mod:`hutch.wire.sandboxes`: the spec, the sandbox record, lifecycle and policy bodies
- :mod:`hutch.wire.runs`: the exec request and result, run records, stream frames, output, events
- :mod:`hutch.wire.oneshot`: ``hutch run`` in one request (``POST /v1/run``) and its frames
- :mod:`hutch.wire.workspaces`: files, push/pull, snapshots, fork, tenants
- :mod:`hutch.wire.system`: errors, health, doctor, approvals, claim reports
- :mod:`hutch.wire.keys`: a gateway's API keys
- :mod:`hutch.wire.images`: stored images, pull/import frames, rm, prune
- :mod:`hutch.wire.changes`: what a sandbox changed
- :mod:`hutch.wire.cluster`: a cluster gateway's nodes
- :mod:`hutch.wire.routes`: every route with the bodies it carries
- :mod:`hutch.wire.build`: the request bodies, built in one place for every edge
- :mod:`hutch.wire.pydantic`: these TypedDicts as pydantic types, for the server side only

Standard library only (but :mod:`hutch.wire.pydantic`, which no edge imports), and cheap:
the types are only for type checkers at the edges (``if TYPE_CHECKING: from hutch import
wire``), so the CLI's hot path loads just :mod:`hutch.wire.build`. Reading an attribute
here (``wire.ExecResult``) loads its module.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # (typing stays out of the CLI's start; the submodules load on first use)
if TYPE_CHECKING:
    from hutch.wire.changes import Change, ChangeKind, ChangeList, CommitChanges, CommitLayer, CommitRequest, ImageCommitted
    from hutch.wire.cluster import (
        ClusterStatus,
        Drained,
        DrainRequest,
        MovedSandbox,
        NodeRecord,
        NodeRoom,
        NodeState,
        StayedSandbox,
    )
    from hutch.wire.gateway import (
        CertificateIssued,
        CertificateKey,
        CertificateRecord,
        CertificateRequest,
        CertificateState,
        ExposedPort,
        ExposeRequest,
        ProfileBundle,
        Unexposed,
    )
    from hutch.wire.images import (
        ImageConfigBody,
        ImageDoneFrame,
        ImageErrorFrame,
        ImageLayer,
        ImageLayerFrame,
        ImageProgressFrame,
        ImagePruned,
        ImagePullFrame,
        ImagePullRequest,
        ImageReceivedFrame,
        ImageRecord,
        ImageRemoved,
        ImageResolvedFrame,
    )
    from hutch.wire.keys import (
        KeyCreated,
        KeyQuotas,
        KeyRecord,
        KeyRequest,
        KeyRevoked,
        KeyScope,
        KeyState,
        RotateRequest,
        UiLink,
    )
    from hutch.wire.oneshot import (
        DoneFrame,
        InputFrame,
        PullFrame,
        PushedFrame,
        RunOnceFrame,
        RunOnceRequest,
        SandboxFrame,
        UploadFile,
    )
    from hutch.wire.runs import (
        AttachEof,
        AttachMessage,
        AttachResize,
        AttachStart,
        AttachStdin,
        ErrorFrame,
        Event,
        ExecFrame,
        ExecRequest,
        ExecResult,
        ExecSummary,
        ExitFrame,
        KillRequest,
        KillResult,
        OutputFrame,
        OutputPage,
        Process,
        RunFrame,
        RunRecord,
        RunStatus,
        StreamName,
        StreamPage,
        Transcript,
        TranscriptRecord,
    )
    from hutch.wire.sandboxes import (
        Deadlines,
        DestroyResult,
        GitSource,
        KeepaliveRequest,
        LabelRequest,
        Limits,
        Mount,
        NetworkMode,
        NetworkPolicy,
        OnExpire,
        PolicyChange,
        SandboxRecord,
        SandboxSpec,
        SandboxState,
        SandboxStatus,
        SeedFile,
        Session,
        SshEndpoint,
        StateChange,
        StatusClaim,
        SubagentRequest,
        WorkspaceView,
    )
    from hutch.wire.system import (
        AccountCredential,
        ApprovalDecision,
        ApprovalRecord,
        ApprovalRequest,
        ApprovalStatus,
        Check,
        CleanupAction,
        CleanupReport,
        CleanupRequest,
        Credentials,
        CredentialStatus,
        Doctor,
        Error,
        ErrorDetail,
        ErrorKind,
        Health,
        Inventory,
        InventoryItem,
        PoolDrained,
        PoolDrainRequest,
        PoolSetRequest,
        PoolShape,
        PoolStatus,
        ProviderCleanup,
        Shutdown,
    )
    from hutch.wire.workspaces import (
        FileEntry,
        FileWritten,
        ForkChild,
        ForkRequest,
        ForkResult,
        Manifest,
        ManifestEntry,
        PullSummary,
        PushManifest,
        PushResult,
        PushSummary,
        RestoreRequest,
        SnapshotDeleted,
        SnapshotRecord,
        SnapshotRequest,
        Tenant,
        TenantDeleted,
    )

MODULES = ("sandboxes", "runs", "oneshot", "workspaces", "system", "keys", "images", "changes", "gateway", "cluster")

__all__ = [
    "AccountCredential",
    "ApprovalDecision",
    "ApprovalRecord",
    "ApprovalRequest",
    "ApprovalStatus",
    "AttachEof",
    "AttachMessage",
    "AttachResize",
    "AttachStart",
    "AttachStdin",
    "CertificateIssued",
    "CertificateKey",
    "CertificateRecord",
    "CertificateRequest",
    "CertificateState",
    "Change",
    "ChangeKind",
    "ChangeList",
    "Check",
    "CleanupAction",
    "CleanupReport",
    "CleanupRequest",
    "ClusterStatus",
    "CommitChanges",
    "CommitLayer",
    "CommitRequest",
    "CredentialStatus",
    "Credentials",
    "Deadlines",
    "DestroyResult",
    "Doctor",
    "DoneFrame",
    "DrainRequest",
    "Drained",
    "Error",
    "ErrorDetail",
    "ErrorFrame",
    "ErrorKind",
    "Event",
    "ExecFrame",
    "ExecRequest",
    "ExecResult",
    "ExecSummary",
    "ExitFrame",
    "ExposeRequest",
    "ExposedPort",
    "FileEntry",
    "FileWritten",
    "ForkChild",
    "ForkRequest",
    "ForkResult",
    "GitSource",
    "Health",
    "ImageCommitted",
    "ImageConfigBody",
    "ImageDoneFrame",
    "ImageErrorFrame",
    "ImageLayer",
    "ImageLayerFrame",
    "ImageProgressFrame",
    "ImagePruned",
    "ImagePullFrame",
    "ImagePullRequest",
    "ImageReceivedFrame",
    "ImageRecord",
    "ImageRemoved",
    "ImageResolvedFrame",
    "InputFrame",
    "Inventory",
    "InventoryItem",
    "KeepaliveRequest",
    "KeyCreated",
    "KeyQuotas",
    "KeyRecord",
    "KeyRequest",
    "KeyRevoked",
    "KeyScope",
    "KeyState",
    "KillRequest",
    "KillResult",
    "LabelRequest",
    "Limits",
    "Manifest",
    "ManifestEntry",
    "Mount",
    "MovedSandbox",
    "NetworkMode",
    "NetworkPolicy",
    "NodeRecord",
    "NodeRoom",
    "NodeState",
    "OnExpire",
    "OutputFrame",
    "OutputPage",
    "PolicyChange",
    "PoolDrainRequest",
    "PoolDrained",
    "PoolSetRequest",
    "PoolShape",
    "PoolStatus",
    "Process",
    "ProfileBundle",
    "ProviderCleanup",
    "PullFrame",
    "PullSummary",
    "PushManifest",
    "PushResult",
    "PushSummary",
    "PushedFrame",
    "RestoreRequest",
    "RotateRequest",
    "RunFrame",
    "RunOnceFrame",
    "RunOnceRequest",
    "RunRecord",
    "RunStatus",
    "SandboxFrame",
    "SandboxRecord",
    "SandboxSpec",
    "SandboxState",
    "SandboxStatus",
    "SeedFile",
    "Session",
    "Shutdown",
    "SnapshotDeleted",
    "SnapshotRecord",
    "SnapshotRequest",
    "SshEndpoint",
    "StateChange",
    "StatusClaim",
    "StayedSandbox",
    "StreamName",
    "StreamPage",
    "SubagentRequest",
    "Tenant",
    "TenantDeleted",
    "Transcript",
    "TranscriptRecord",
    "UiLink",
    "Unexposed",
    "UploadFile",
    "WorkspaceView",
]


def __getattr__(name: str) -> object:
    """``wire.ExecResult`` at run time: loaded from its module on first use."""
    if name not in __all__:  # a submodule (``from hutch.wire import build``), or nothing
        raise AttributeError(f"module 'hutch.wire' has no attribute {name!r}")
    for module in MODULES:
        __import__(f"hutch.wire.{module}")
        found = sys.modules[f"hutch.wire.{module}"]
        if name in found.__all__:
            value = getattr(found, name)
            globals()[name] = value
            return value
    raise AttributeError(f"module 'hutch.wire' has no attribute {name!r}")
