"""Sandbox bodies: the spec a sandbox is created from, its record, and what the lifecycle
routes (destroy, pause/resume, keepalive, status, labels, sub-agents, policy) carry."""

# No "from __future__ import annotations": Python 3.11 sees NotRequired/Required only in evaluated annotations.
from typing import Literal, NotRequired, Required, TypedDict

from hutch.wire.system import CredentialStatus

__all__ = [
    "Deadlines",
    "DestroyResult",
    "GitSource",
    "KeepaliveRequest",
    "LabelRequest",
    "Limits",
    "Mount",
    "NetworkMode",
    "NetworkPolicy",
    "OnExpire",
    "PolicyChange",
    "SandboxRecord",
    "SandboxSpec",
    "SandboxState",
    "SandboxStatus",
    "SeedFile",
    "Session",
    "SshEndpoint",
    "StateChange",
    "StatusClaim",
    "SubagentRequest",
    "WorkspaceView",
]

SandboxState = Literal["creating", "running", "paused", "destroying", "destroyed", "failed", "lost"]
NetworkMode = Literal["none", "allowlist", "open"]
OnExpire = Literal["destroy", "pause"]
WorkspaceView = Literal["rw", "ro"]  # how a sub-agent sees its parent's /workspace


class Limits(TypedDict, total=False):
    """A sandbox's resources. A request may give ``memory`` as text with a unit (``"512M"``);
    records always carry bytes (an int)."""

    memory: int | str
    pids: int
    cpus: float | None  # cores; None: no cpu limit
    disk: int | str | None  # what the sandbox may write (its writable root and /workspace); None: no cap


class Mount(TypedDict):
    """A host path bound into the sandbox (``HOST:SANDBOX[:ro]`` on the command line)."""

    source: str  # absolute host path
    target: str  # path in the sandbox
    readonly: NotRequired[bool]


class NetworkPolicy(TypedDict, total=False):
    """Egress of one sandbox: ``none`` (loopback only), ``allowlist`` (named hosts through hutch's
    proxy) or ``open`` (any public address through the proxy). Empty ``ports``: 80 and 443 in
    an allowlist, any when open."""

    mode: NetworkMode
    allow_hosts: list[str]  # example.com, *.example.org
    deny_hosts: list[str]
    ports: list[int]
    cidrs: list[str]


class SeedFile(TypedDict):
    """A file written into a new sandbox before its setup commands (``files`` of a manifest)."""

    path: str  # absolute, or relative to the workdir
    content: str  # base64 of its bytes
    mode: NotRequired[int]  # default 0o644


class GitSource(TypedDict, total=False):
    """Where a new sandbox's /workspace comes from (``--git-repo URL[#REF]``, ``[git]`` of a manifest).
    A local path or ``file://`` URL is cloned on the daemon's host and pushed in; any other URL is
    cloned inside the sandbox through the egress proxy, its host allowed for the clone only."""

    url: Required[str]  # https://git.example.com/org/repo.git, file:///srv/repo (never with a password in it)
    ref: str | None  # a branch, a tag or a commit; None: the default branch
    depth: int | None  # commits of history (default 1); None: the full history
    secret: str | None  # the sandbox secret whose value is the password (a token), given to git by a credential helper
    username: str | None  # the user name sent with it (default x-access-token)
    max_size: int | str | None  # the clone fails past this many bytes (default 1G)


class PolicyChange(TypedDict, total=False):
    """``POST /v1/sandboxes/{ref}/policy``: what to add to (or take from) a live sandbox's policy."""

    mode: NetworkMode | None
    allow_hosts: list[str] | None
    deny_hosts: list[str] | None
    remove_hosts: list[str] | None  # dropped from both lists
    ports: list[int] | None
    cidrs: list[str] | None
    remove_ports: list[int] | None  # no longer allowed (none left: the mode's default ports again)
    remove_cidrs: list[str] | None  # no longer allowed


class SandboxSpec(TypedDict, total=False):
    """What the user asked for: the body of ``POST /v1/sandboxes`` and ``POST /v1/sessions``,
    and ``spec`` in every record. Built by :func:`hutch.wire.build.sandbox_spec` on the
    client side. Durations may be given as text with a unit (``"30m"``); records carry seconds."""

    name: str | None
    provider: str
    limits: Limits
    env: dict[str, str]  # records show the keys only (values "***")
    mounts: list[Mount]
    labels: dict[str, str]
    workdir: str
    network: NetworkPolicy
    image: str | None  # providers that boot images (unikraft): the OCI image
    user: str | None  # who runs inside: root, NAME, UID, NAME:GROUP or UID:GID (local: a range of uids mapped)
    runtime: Literal["bwrap", "gvisor"] | None  # local: how it isolates, bwrap (default) or gvisor (a user-space kernel)
    host_ca: bool  # local: the host's CA bundle trusted inside (SSL_CERT_FILE, REQUESTS_CA_BUNDLE, PIP_CERT ...)
    provider_options: dict[str, str]  # {"metro": "fra", "ssh": "true"} for unikraft
    secrets: dict[str, str]  # request only: never stored or returned
    secret_names: list[str]
    secret_hosts: dict[str, list[str]]  # secret -> hosts (--allow-host grammar): the sandbox holds a placeholder
    secret_body: list[str]  # secrets whose placeholder is also replaced in request bodies (--secret-body)
    no_intercept: list[str]  # hosts whose HTTPS is not intercepted in a sandbox holding placeholders
    secret_sources: dict[str, str]  # NAME -> env:VAR or file:PATH: where the caller read each secret (never a value)
    files: list[SeedFile]  # written at create, before the setup commands
    setup: list[str | list[str]]  # run once at create, in order (output in setup_command events)
    git: GitSource | None  # the workspace starts as a clone of this repository
    tenant: str | None  # a persistent sandbox line: its /workspace outlives the sandbox
    reuse_key: str | None  # auto mode (hutch run --reuse): one sandbox per key; "session" is its old name, still read
    ttl: float | str | None
    idle_timeout: float | str | None
    on_expire: OnExpire
    require_approval: list[str]  # destroy, network.change, push.delete, exec:PATTERN
    parent: str | None  # a sub-agent's parent sandbox id
    workspace: WorkspaceView | None


class SshEndpoint(TypedDict):
    """Where ``hutch ssh`` connects (a unikraft sandbox created with ``--ssh``)."""

    fqdn: str
    port: int
    user: str


class SandboxRecord(TypedDict):
    """What hutch knows about a sandbox: the answer of create, get, list, policy, labels,
    sub-agents and snapshot restore."""

    id: str  # sbx_...
    name: NotRequired[str | None]
    provider: str
    state: SandboxState
    spec: SandboxSpec
    created_at: float
    updated_at: float
    error: NotRequired[str | None]
    enforcement: NotRequired[dict[str, str]]  # limit -> how it is enforced (cgroup v1, rlimit ...)
    egress: NotRequired[dict[str, int] | None]  # allowed / denied decisions so far, when it has a network
    expires_at: NotRequired[float | None]
    last_active_at: NotRequired[float | None]
    owner: NotRequired[str | None]  # the key that made it (key_...), owner (the local user) or token
    ssh: NotRequired[SshEndpoint | None]
    node: NotRequired[str | None]  # the cluster node it lives on (a cluster gateway's sandboxes)
    credential: NotRequired[CredentialStatus | None]  # providers whose resources need one (unikraft)


class DestroyResult(TypedDict):
    """``DELETE /v1/sandboxes/{ref}``: idempotent, so ``existed`` says whether there was anything."""

    sandbox: str
    name: NotRequired[str | None]
    destroyed: bool
    existed: bool
    message: str
    children: NotRequired[list[str] | None]  # sub-agents destroyed with it (only when there were any)


class StatusClaim(TypedDict):
    """The claim of a sandbox whose resource can outlive hutch (unikraft)."""

    id: str
    name: str
    state: str  # intent, ready, delete_attempt, delete_accepted
    resource_id: str | None
    error: str | None


class SandboxStatus(TypedDict):
    """``GET /v1/sandboxes/{ref}/status`` (``?wait=true``: once it runs)."""

    sandbox: str
    name: str | None
    provider: str
    state: SandboxState
    claim: NotRequired[StatusClaim]
    instance: NotRequired[Literal["running", "gone"]]


class StateChange(TypedDict):
    """``POST .../pause`` and ``.../resume``."""

    sandbox: str
    name: str | None
    state: SandboxState
    changed: bool  # false: it already was
    message: str


class Deadlines(TypedDict):
    """``POST .../keepalive``: when the sandbox expires now."""

    sandbox: str
    name: str | None
    state: SandboxState
    expires_at: float | None
    idle_expires_at: float | None
    on_expire: OnExpire


class KeepaliveRequest(TypedDict, total=False):
    ttl: float | str | None  # a new deadline this long from now


class SubagentRequest(TypedDict, total=False):
    """``POST /v1/sandboxes/{ref}/subagents``: a child sharing the parent's /workspace. Built by
    :func:`hutch.wire.build.subagent_request`. Its network is the parent's unless given, never wider."""

    name: str | None
    workspace: WorkspaceView | None
    limits: Limits
    env: dict[str, str]
    labels: dict[str, str]
    ttl: float | str | None
    idle_timeout: float | str | None
    on_expire: OnExpire
    require_approval: list[str]
    network: NetworkPolicy | None


class LabelRequest(TypedDict, total=False):
    set: dict[str, str]  # labels to set
    remove: list[str]  # labels to remove


class Session(TypedDict):
    """``POST /v1/sessions``: the live sandbox of an auto-mode key or a tenant, or a new one."""

    sandbox: SandboxRecord
    created: bool
