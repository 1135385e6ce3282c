"""Errors, health, doctor, approvals and the claim reports (inventory, cleanup)."""

# No "from __future__ import annotations": Python 3.11 sees NotRequired/Required only in evaluated annotations.
from typing import Literal, NotRequired, TypedDict

__all__ = [
    "AccountCredential",
    "ApprovalDecision",
    "ApprovalRecord",
    "ApprovalRequest",
    "ApprovalStatus",
    "Check",
    "CleanupAction",
    "CleanupReport",
    "CleanupRequest",
    "CredentialStatus",
    "Credentials",
    "Doctor",
    "Error",
    "ErrorDetail",
    "ErrorKind",
    "Health",
    "Inventory",
    "InventoryItem",
    "PoolDrainRequest",
    "PoolDrained",
    "PoolSetRequest",
    "PoolShape",
    "PoolStatus",
    "ProviderCleanup",
    "Shutdown",
]

ApprovalStatus = Literal["pending", "approved", "rejected", "expired"]


ErrorKind = Literal[
    "approval_required",
    "capacity",
    "conflict",
    "internal",
    "invalid",
    "not_found",
    "permission_denied",
    "policy",
    "rate_limited",
    "timeout",
    "unauthorized",
    "unavailable",
]  # hutch.errors.KINDS; a client reads an unknown one as internal


class ErrorDetail(TypedDict):
    kind: ErrorKind
    message: str
    hint: NotRequired[str]
    approval_id: NotRequired[str]  # kind approval_required: the request a human must approve
    retry_after: NotRequired[float]  # kind rate_limited: seconds to wait (also the Retry-After header)


class Error(TypedDict):
    """Every failure: a stable kind, a message, and a hint saying what to do next; the HTTP
    status is its kind's."""

    error: ErrorDetail


class Health(TypedDict):
    ok: bool
    version: str
    pid: int
    home: str
    tasks: int  # the daemon's asyncio tasks
    approval_waits: int


class Shutdown(TypedDict):
    ok: bool
    stopping: bool
    pid: int


class Check(TypedDict):
    """One line of ``hutch doctor``."""

    name: str
    ok: bool
    detail: str
    fix: str | None


class Doctor(TypedDict):
    ok: bool
    version: str
    checks: list[Check]


class ApprovalRequest(TypedDict):
    """``POST /v1/approvals``: ask a human to approve an action."""

    action: str  # destroy, network.change, push.delete, exec:PATTERN, or free text
    sandbox: NotRequired[str | None]
    reason: NotRequired[str | None]
    timeout: NotRequired[float | None]  # seconds it stays open


class ApprovalDecision(TypedDict, total=False):
    approve: bool
    reason: str | None
    by: str | None


class ApprovalRecord(TypedDict):
    id: str  # apr_...
    sandbox_id: NotRequired[str | None]
    action: str
    detail: NotRequired[str | None]
    reason: NotRequired[str | None]
    status: ApprovalStatus
    created_at: float
    expires_at: NotRequired[float | None]
    decided_at: NotRequired[float | None]
    decided_by: NotRequired[str | None]
    decision_reason: NotRequired[str | None]
    used_at: NotRequired[float | None]
    owner: NotRequired[str | None]  # the key whose request it is


class PoolShape(TypedDict):
    """One shape's warm pool: its size, what memory lets it have, its members now."""

    provider: str
    image: str | None  # None: the host's /usr
    shape: str  # the image, or "host"
    size: int  # asked for
    source: str  # the pool_size setting, or hutch pool set
    target: int  # the size, capped by memory
    capped: str | None  # why it is capped (None: it is not)
    ready: int  # members ready to be handed out
    starting: int
    memory: int  # bytes the ready members hold


class PoolStatus(TypedDict):
    """``GET /v1/pool``: the warm pools and their members (members are not sandboxes)."""

    refilling: bool  # the daemon refills them (an in-process service may not)
    members: int
    memory: int
    pools: list[PoolShape]


class PoolSetRequest(TypedDict):
    """``POST /v1/pool``: the size of one shape's pool (0 empties it)."""

    image: NotRequired[str | None]  # None: the host's /usr
    size: int


class PoolDrainRequest(TypedDict):
    """``POST /v1/pool/drain``: destroy the members of one shape (or of all) and keep it empty."""

    image: NotRequired[str | None]
    all: NotRequired[bool]


class PoolDrained(PoolStatus):
    drained: dict[str, int]  # members destroyed, per shape


class CredentialStatus(TypedDict):
    """Which credential an account has in the daemon's memory (the token itself never shows)."""

    provider: str
    endpoint: str
    account: str
    state: Literal["in_memory", "missing"]
    origin: NotRequired[str]  # caller, credentials file, daemon environment
    source: NotRequired[str]  # where it was found: a variable's name, a file
    fingerprint: NotRequired[str]
    since: NotRequired[float]


class AccountCredential(CredentialStatus):
    sandboxes: list[str]  # the sandboxes that need it


class Credentials(TypedDict):
    """``GET /v1/credentials``: per account, which credential the daemon holds, and the checks."""

    accounts: list[AccountCredential]
    checks: list[Check]


class InventoryItem(TypedDict):
    """A claimed instance (pending intents and missing ones too) or, with ``all``, an unclaimed one."""

    claimed: bool
    claim: NotRequired[str]
    claim_state: NotRequired[str]
    sandbox: NotRequired[str | None]
    name: str | None
    uuid: str | None
    instance_state: str | None  # the provider's, or "missing"
    missing: bool
    error: NotRequired[str | None]


class Inventory(TypedDict):
    """``GET /v1/providers/{name}/inventory``: claim-first."""

    endpoint: str
    account: str
    items: list[InventoryItem]


class CleanupRequest(TypedDict, total=False):
    provider: str | None
    metro: str | None
    dry_run: bool
    keep: list[str]  # claims, names or sandbox ids to leave alone
    forget_missing: bool


class CleanupAction(TypedDict):
    claim: str
    name: str
    sandbox: str | None
    state: str
    action: str  # destroy, forget, keep, skip-live, skip-creating, report-missing
    result: NotRequired[str]
    error: NotRequired[ErrorDetail]


class ProviderCleanup(TypedDict):
    provider: str
    endpoint: str
    account: str
    dry_run: bool
    ok: bool
    actions: list[CleanupAction]


class CleanupReport(TypedDict):
    """``POST /v1/cleanup``."""

    ok: bool
    dry_run: bool
    providers: list[ProviderCleanup]
