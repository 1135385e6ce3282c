"""Every route of the HTTP API with the bodies it carries, in one table.

``request`` is the JSON body a route takes (None: none, or bytes of type ``request_media``);
``response`` what it answers with status ``status`` (None: bytes of type ``media``); ``stream``
the NDJSON frames of a streamed answer. Failures answer :class:`~hutch.wire.system.Error`.
tests/unit/test_wire.py holds the daemon's OpenAPI document to this table.
"""

from __future__ import annotations

from typing import NamedTuple

from hutch.wire.changes import ChangeList, CommitRequest, ImageCommitted
from hutch.wire.cluster import ClusterStatus, Drained, DrainRequest, NodeRecord
from hutch.wire.gateway import CertificateIssued, CertificateRecord, CertificateRequest, ExposedPort, ExposeRequest, Unexposed
from hutch.wire.images import ImagePruned, ImagePullFrame, ImagePullRequest, ImageRecord, ImageRemoved
from hutch.wire.keys import KeyCreated, KeyRecord, KeyRequest, KeyRevoked, RotateRequest, UiLink
from hutch.wire.oneshot import RunOnceFrame, RunOnceRequest
from hutch.wire.runs import (
    Event,
    ExecFrame,
    ExecRequest,
    ExecResult,
    KillRequest,
    KillResult,
    OutputPage,
    Process,
    RunRecord,
    Transcript,
)
from hutch.wire.sandboxes import (
    Deadlines,
    DestroyResult,
    KeepaliveRequest,
    LabelRequest,
    PolicyChange,
    SandboxRecord,
    SandboxSpec,
    SandboxStatus,
    Session,
    StateChange,
    SubagentRequest,
)
from hutch.wire.system import (
    ApprovalDecision,
    ApprovalRecord,
    ApprovalRequest,
    CleanupReport,
    CleanupRequest,
    Credentials,
    Doctor,
    Health,
    Inventory,
    PoolDrained,
    PoolDrainRequest,
    PoolSetRequest,
    PoolStatus,
    Shutdown,
)
from hutch.wire.workspaces import (
    FileEntry,
    FileWritten,
    ForkRequest,
    ForkResult,
    Manifest,
    PushResult,
    RestoreRequest,
    SnapshotDeleted,
    SnapshotRecord,
    SnapshotRequest,
    Tenant,
    TenantDeleted,
)

__all__ = ["ROUTES", "Route"]


class Route(NamedTuple):
    method: str
    path: str
    request: object  # a TypedDict, or None
    response: object  # a TypedDict, list[TypedDict], a union of them, or None (bytes)
    status: int = 200
    stream: object = None  # the NDJSON frames (?stream=true)
    media: str = "application/json"
    request_media: str | None = None  # a body that is not JSON


BYTES = "application/octet-stream"
TAR = "application/x-tar"
PUSH = "application/x-hutch-push"
RUN_FRAMED = "application/x-hutch-run"
NDJSON = "application/x-ndjson"
SBX = "/v1/sandboxes/{ref}"
RUN = "/v1/runs/{run_id}"
APR = "/v1/approvals/{approval_id}"

ROUTES: tuple[Route, ...] = (
    Route("GET", "/v1/health", None, Health),
    Route("POST", "/v1/shutdown", None, Shutdown),
    Route("GET", "/v1/doctor", None, Doctor),
    # sandboxes
    Route("POST", "/v1/sandboxes", SandboxSpec, SandboxRecord, 201),
    Route("GET", "/v1/sandboxes", None, list[SandboxRecord]),
    Route("GET", SBX, None, SandboxRecord),
    Route("DELETE", SBX, None, DestroyResult),
    Route("GET", SBX + "/status", None, SandboxStatus),
    Route("POST", SBX + "/policy", PolicyChange, SandboxRecord),
    Route("POST", SBX + "/pause", None, StateChange),
    Route("POST", SBX + "/resume", None, StateChange),
    Route("POST", SBX + "/keepalive", KeepaliveRequest, Deadlines),
    Route("POST", SBX + "/subagents", SubagentRequest, SandboxRecord, 201),
    Route("POST", SBX + "/labels", LabelRequest, SandboxRecord),
    Route("POST", "/v1/sessions", SandboxSpec, Session),
    # runs
    Route("POST", SBX + "/exec", ExecRequest, ExecResult | RunRecord, stream=ExecFrame),
    Route("GET", SBX + "/runs", None, list[RunRecord]),
    Route("GET", RUN, None, RunRecord),
    Route("POST", RUN + "/wait", None, RunRecord),
    Route("POST", RUN + "/kill", KillRequest, KillResult),
    Route("GET", RUN + "/output", None, OutputPage),
    Route("GET", SBX + "/logs", None, Transcript),
    Route("GET", "/v1/events", None, list[Event]),
    Route("GET", SBX + "/events", None, list[Event]),
    Route("GET", SBX + "/ps", None, list[Process]),
    # hutch run: <length>\n<RunOnceRequest JSON>[push body][input] when bytes travel with it (wire.oneshot)
    Route("POST", "/v1/run", RunOnceRequest, None, stream=RunOnceFrame, media=NDJSON, request_media=RUN_FRAMED),
    # files and workspaces
    Route("GET", SBX + "/files", None, None, media=BYTES),
    Route("PUT", SBX + "/files", None, FileWritten, request_media=BYTES),
    Route("GET", SBX + "/ls", None, list[FileEntry]),
    Route("GET", SBX + "/manifest", None, Manifest),
    Route("GET", SBX + "/diff", None, ChangeList),
    Route("POST", SBX + "/push", None, PushResult, request_media=PUSH),  # <length>\n<PushManifest JSON><tar>
    Route("GET", SBX + "/pull", None, None, media=TAR),
    Route("POST", SBX + "/snapshots", SnapshotRequest, SnapshotRecord, 201),
    Route("GET", "/v1/snapshots", None, list[SnapshotRecord]),
    Route("POST", "/v1/snapshots/{name}/restore", RestoreRequest, SandboxRecord, 201),
    Route("DELETE", "/v1/snapshots/{name}", None, SnapshotDeleted),
    Route("POST", SBX + "/fork", ForkRequest, ForkResult, 201),
    Route("GET", "/v1/tenants", None, list[Tenant]),
    Route("DELETE", "/v1/tenants/{name}", None, TenantDeleted),
    # approvals
    Route("POST", "/v1/approvals", ApprovalRequest, ApprovalRecord, 201),
    Route("GET", "/v1/approvals", None, list[ApprovalRecord]),
    Route("GET", APR, None, ApprovalRecord),
    Route("POST", APR + "/wait", None, ApprovalRecord),
    Route("POST", APR + "/decision", ApprovalDecision, ApprovalRecord),
    # claimed providers (unikraft)
    Route("GET", "/v1/providers/{name}/inventory", None, Inventory),
    Route("POST", "/v1/cleanup", CleanupRequest, CleanupReport),
    Route("GET", "/v1/credentials", None, Credentials),
    # API keys of a gateway (admin scope)
    Route("POST", "/v1/keys", KeyRequest, KeyCreated, 201),
    Route("GET", "/v1/keys", None, list[KeyRecord]),
    Route("GET", "/v1/keys/{ref}", None, KeyRecord),
    Route("DELETE", "/v1/keys/{ref}", None, KeyRevoked),
    Route("POST", "/v1/keys/{ref}/rotate", RotateRequest, KeyCreated),
    # images (the registry login of a pull travels in the x-hutch-registry-auth header)
    Route("POST", "/v1/images/pull", ImagePullRequest, None, stream=ImagePullFrame, media=NDJSON),
    Route("POST", "/v1/images/import", None, None, stream=ImagePullFrame, media=NDJSON, request_media=TAR),
    Route("POST", "/v1/images/commit", CommitRequest, ImageCommitted, 201),
    Route("GET", "/v1/images", None, list[ImageRecord]),
    Route("GET", "/v1/images/inspect", None, ImageRecord),
    Route("DELETE", "/v1/images", None, ImageRemoved),
    Route("POST", "/v1/images/prune", None, ImagePruned),
    # exposed ports (preview URLs)
    Route("POST", SBX + "/ports", ExposeRequest, ExposedPort, 201),
    Route("GET", SBX + "/ports", None, list[ExposedPort]),
    Route("DELETE", SBX + "/ports/{port}", None, Unexposed),
    # the gateway's client certificates (admin)
    Route("POST", "/v1/gateway/certificates", CertificateRequest, CertificateIssued, 201),
    Route("GET", "/v1/gateway/certificates", None, list[CertificateRecord]),
    Route("DELETE", "/v1/gateway/certificates/{ref}", None, list[CertificateRecord]),
    # the dashboard: a one-time login link (hutch ui)
    Route("POST", "/v1/ui/links", None, UiLink, 201),
    # the warm pool
    Route("GET", "/v1/pool", None, PoolStatus),
    Route("POST", "/v1/pool", PoolSetRequest, PoolStatus),
    Route("POST", "/v1/pool/drain", PoolDrainRequest, PoolDrained),
    # a cluster gateway (hutch serve --cluster)
    Route("GET", "/v1/cluster", None, ClusterStatus),
    Route("GET", "/v1/cluster/nodes", None, list[NodeRecord]),
    Route("POST", "/v1/cluster/nodes/{name}/drain", DrainRequest, Drained),
)
