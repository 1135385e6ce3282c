"""Specs, records and states as pydantic models: what the server validates requests into and
the Service, the store and the providers work with. The edges never import this module (the
CLI's import budget): they speak the same bodies as :mod:`hutch.wire` TypedDicts, and
tests/unit/test_wire.py holds each model here to its wire body of the same name."""

from __future__ import annotations

import posixpath
import secrets
import time
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, Literal, cast

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from hutch import secretpolicy, wire
from hutch.checks import (
    MAX_DISK,
    MAX_ITEMS,
    MAX_MEMORY,
    MAX_MOUNTS,
    MAX_OUTPUT,
    MAX_PIDS,
    MIN_DISK,
    MIN_MEMORY,
    MIN_PIDS,
    NAME_HINT,
    check_action,
    check_command,
    check_count,
    check_env,
    check_labels,
    check_path,
    check_secrets,
    check_user,
    is_name,
    size_between,
)
from hutch.errors import InvalidError
from hutch.netpolicy import NetworkPolicy as NetworkPolicy
from hutch.netpolicy import PolicyChange as PolicyChange
from hutch.netpolicy import normalize_host as normalize_host
from hutch.seeds import GitSource, SeedFile, check_seeds
from hutch.units import format_size, parse_duration
from hutch.wire.pydantic import typeddict

DEFAULT_MEMORY = 1 << 30
DEFAULT_PIDS = 512
DEFAULT_OUTPUT_CAP = 1 << 20
MAX_TTL = 365 * 86400.0


if TYPE_CHECKING:  # the wire's own types for the type checker; pydantic gets their clones
    SshEndpoint = wire.SshEndpoint
    CredentialStatus = wire.CredentialStatus
else:
    SshEndpoint = typeddict(wire.SshEndpoint)
    CredentialStatus = typeddict(wire.CredentialStatus)

# What a request may send where a record has a number: a size or a duration as text with a unit.
Size = Annotated[int, WithJsonSchema({"anyOf": [{"type": "integer"}, {"type": "string"}]})]
Duration = Annotated[float | None, WithJsonSchema({"anyOf": [{"type": "number"}, {"type": "string"}, {"type": "null"}]})]


def new_id(prefix: str) -> str:
    """A sortable, random id: ``sbx_`` / ``run_`` + time + randomness."""
    return f"{prefix}_{int(time.time() * 1000):011x}{secrets.token_hex(4)}"


class SandboxState(StrEnum):
    creating = "creating"
    running = "running"
    paused = "paused"
    destroying = "destroying"
    destroyed = "destroyed"
    failed = "failed"
    lost = "lost"


LIVE_STATES = (SandboxState.creating, SandboxState.running, SandboxState.paused, SandboxState.destroying)


class RunStatus(StrEnum):
    running = "running"
    completed = "completed"
    failed = "failed"
    timed_out = "timed_out"
    killed = "killed"
    oom_killed = "oom_killed"
    lost = "lost"


class Mount(BaseModel):
    model_config = ConfigDict(frozen=True)
    source: str
    target: str
    readonly: bool = False

    @field_validator("source", "target")
    @classmethod
    def _non_empty(cls, v: str) -> str:
        if not v:
            raise InvalidError("a mount needs a host path and a sandbox path", hint="use HOST:SANDBOX or HOST:SANDBOX:ro")
        return check_path(v, "mount path")

    @field_validator("target")
    @classmethod
    def _normalised(cls, v: str) -> str:
        if v.startswith("/") and ".." not in v.split("/"):
            return "/" + posixpath.normpath(v).lstrip("/")
        return v  # refused with a clear message by the provider

    @staticmethod
    def parse(text: str) -> Mount:
        parts = text.split(":")
        if len(parts) == 3 and parts[2] in ("ro", "rw"):
            return Mount(source=parts[0], target=parts[1], readonly=parts[2] == "ro")
        if len(parts) == 2:
            return Mount(source=parts[0], target=parts[1])
        raise InvalidError(f"invalid mount {text!r}", hint="use HOST:SANDBOX or HOST:SANDBOX:ro")


class Limits(BaseModel):
    memory: Size = Field(default=DEFAULT_MEMORY, description="bytes, or a size with a unit: 512M, 1G")
    pids: int = DEFAULT_PIDS
    cpus: StrictFloat | None = None
    disk: Size | None = Field(default=None, description="what the sandbox may write (bytes or 1G); None: no cap")

    @field_validator("disk", mode="before")
    @classmethod
    def _disk(cls, v: Any) -> int | None:
        return None if v is None else size_between(v, MIN_DISK, MAX_DISK, "--disk", "e.g. --disk 2G")

    @field_validator("memory", mode="before")
    @classmethod
    def _memory(cls, v: Any) -> int:
        hint = f"a sandbox needs at least {format_size(MIN_MEMORY)} to start, e.g. --memory 512M"
        return size_between(v, MIN_MEMORY, MAX_MEMORY, "--memory", hint)

    @field_validator("pids")
    @classmethod
    def _pids(cls, v: int) -> int:
        if not MIN_PIDS <= v <= MAX_PIDS:
            raise InvalidError(
                f"--pids must be between {MIN_PIDS} and {MAX_PIDS}, got {v}",
                hint=f"a sandbox needs {MIN_PIDS} processes to start and run a command, e.g. --pids 512",
            )
        return v

    @field_validator("cpus")
    @classmethod
    def _cpus(cls, v: float | None) -> float | None:
        if v is not None and not 0.01 <= v <= 1024:
            raise InvalidError(f"--cpus must be between 0.01 and 1024, got {v}")
        return v


class SandboxSpec(secretpolicy.PlaceholderFields):
    """What the user asked for (its placeholder secrets: :mod:`hutch.secretpolicy`)."""

    name: str | None = None
    provider: str = "local"
    limits: Limits = Field(default_factory=Limits)
    env: dict[str, str] = Field(default_factory=dict)
    mounts: list[Mount] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)
    workdir: str = "/workspace"
    network: NetworkPolicy = Field(default_factory=NetworkPolicy)
    image: str | None = None  # providers that boot images (unikraft): the OCI image
    user: str | None = None  # who runs inside: root, NAME, UID, NAME:GROUP, UID:GID (local: a range of uids)
    host_ca: bool = False  # local: the host's CA bundle trusted inside (SSL_CERT_FILE and friends)
    runtime: Literal["bwrap", "gvisor"] | None = None  # local (None: the provider's default, bwrap)
    provider_options: dict[str, str] = Field(default_factory=dict)  # e.g. {"metro": "fra"} for unikraft
    # Secret values travel in the request only: never serialized, stored or returned.
    secrets: dict[str, str] = Field(default_factory=dict, exclude=True, repr=False)
    secret_names: list[str] = Field(default_factory=list)
    secret_sources: dict[str, str] = Field(default_factory=dict)  # NAME -> env:VAR | file:PATH (never a value)
    files: list[SeedFile] = Field(default_factory=list)  # written at create, before setup
    setup: list[list[str] | str] = Field(default_factory=list)  # run once at create, in order
    git: GitSource | None = None  # the workspace starts as a clone of it

    @model_validator(mode="after")
    def _seeds(self) -> SandboxSpec:
        check_seeds(self.files, self.setup, self.secret_sources)
        return self

    @field_validator("network")
    @classmethod
    def _network(cls, v: NetworkPolicy) -> NetworkPolicy:
        return v.check()

    @field_validator("user")
    @classmethod
    def _user(cls, v: str | None) -> str | None:
        return check_user(v)

    @field_validator("secrets")
    @classmethod
    def _secrets(cls, v: dict[str, str]) -> dict[str, str]:
        return check_secrets(v)

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        return check_env(v)

    @field_validator("mounts")
    @classmethod
    def _mounts(cls, v: list[Mount]) -> list[Mount]:
        check_count(v, MAX_MOUNTS, "mounts")
        return v

    @field_validator("provider_options")
    @classmethod
    def _options(cls, v: dict[str, str]) -> dict[str, str]:
        check_count(v, MAX_ITEMS, "provider options")
        return v

    def model_post_init(self, _context: Any) -> None:
        if self.secrets:
            self.secret_names = sorted(set(self.secret_names) | set(self.secrets))

    tenant: str | None = None  # a persistent sandbox line: its /workspace outlives the sandbox
    # auto mode (hutch run --reuse): one sandbox per key (provider + working directory). Stored records
    # and requests of earlier releases call it "session", still read.
    reuse_key: str | None = Field(
        default=None,
        validation_alias=AliasChoices("reuse_key", "session"),
        description="auto mode (hutch run --reuse): one sandbox per key; its old name session is still accepted",
    )

    @field_validator("tenant")
    @classmethod
    def _tenant(cls, v: str | None) -> str | None:
        if v is not None and not is_name(v):
            raise InvalidError(f"invalid tenant name {v!r}", hint=NAME_HINT)
        return v

    ttl: Duration = None  # seconds from creation (or the last keepalive --ttl) until expiry; or text: 30m
    idle_timeout: Duration = None  # seconds without a run or API activity until expiry
    on_expire: Literal["destroy", "pause"] = "destroy"
    require_approval: list[str] = Field(default_factory=list)  # destroy, network.change, push.delete, exec:PATTERN
    parent: str | None = None  # a sub-agent's parent sandbox id (set by hutch subagent)
    workspace: Literal["rw", "ro"] | None = None  # a sub-agent's view of the parent's /workspace

    @field_validator("ttl", "idle_timeout", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> float | None:
        if v is None:
            return None
        seconds = parse_duration(v)
        if seconds > MAX_TTL:
            raise InvalidError(f"duration {v!r} is longer than a year", hint="use at most 365d")
        return seconds

    @field_validator("labels")
    @classmethod
    def _labels(cls, v: dict[str, str]) -> dict[str, str]:
        return check_labels(v)

    @field_validator("require_approval")
    @classmethod
    def _require_approval(cls, v: list[str]) -> list[str]:
        check_count(v, MAX_ITEMS, "approval actions")
        for action in v:
            check_action(action)
        return sorted(set(v))

    @field_validator("name")
    @classmethod
    def _name(cls, v: str | None) -> str | None:
        if v is not None and (not is_name(v) or v.startswith(("sbx_", "run_"))):
            raise InvalidError(
                f"invalid sandbox name {v!r}",
                hint="names are 1-63 letters, digits, '.', '_' or '-', and may not start with sbx_",
            )
        return v

    @field_validator("workdir")
    @classmethod
    def _workdir(cls, v: str) -> str:
        if not v.startswith("/"):
            raise InvalidError(f"--workdir must be an absolute path, got {v!r}")
        return check_path(v, "--workdir")


class SandboxRecord(BaseModel):
    """What hutch knows about a sandbox; stored, and returned by every edge."""

    id: str
    name: str | None = None
    provider: str
    state: SandboxState
    spec: SandboxSpec
    created_at: float
    updated_at: float
    error: str | None = None
    enforcement: dict[str, str] = Field(default_factory=dict)
    egress: dict[str, int] | None = None  # decisions so far (allowed / denied), when it has a network
    expires_at: float | None = None  # the TTL deadline (stored: the daemon enforces it after a restart)
    last_active_at: float | None = None  # the last run or API activity (for --idle-timeout)
    owner: str | None = None  # the key that made it (key_...), owner (the local user) or token (hutch serve --token-file)
    data: SkipJsonSchema[dict[str, Any]] = Field(default_factory=dict, exclude=True)  # the provider's, never sent
    ssh: SshEndpoint | None = None  # where `hutch ssh` connects (unikraft --ssh); from data
    node: str | None = None  # the cluster node it lives on (hutch serve --cluster); from data
    # which credential its account has in the daemon's memory (providers whose resources
    # need one: state in_memory with origin, source and fingerprint, or missing); never stored
    credential: CredentialStatus | None = None

    @model_validator(mode="after")
    def _ssh(self) -> SandboxRecord:
        if self.ssh is None and isinstance(self.data.get("ssh"), dict):
            self.ssh = cast(SshEndpoint, dict(self.data["ssh"]))
        if self.node is None and isinstance(self.data.get("node"), str):
            self.node = self.data["node"]
        return self


class ExecRequest(BaseModel):
    command: list[str] | str
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    timeout: StrictFloat | None = Field(default=None, gt=0, le=7 * 86400)  # strict: true is not a number
    idle_timeout: StrictFloat | None = Field(default=None, gt=0, le=7 * 86400)
    background: bool = False
    stdin: str | None = None
    stdin_base64: bool = False
    max_output: StrictInt = Field(default=DEFAULT_OUTPUT_CAP, ge=0, le=MAX_OUTPUT)
    secrets: dict[str, str] = Field(default_factory=dict, exclude=True, repr=False)
    redact: bool = True  # secret values in the output become [redacted:NAME]
    user: str | None = None  # run as this user of the sandbox (NAME, UID, NAME:GROUP, UID:GID); None: its own

    @field_validator("user")
    @classmethod
    def _user(cls, v: str | None) -> str | None:
        return check_user(v)

    @field_validator("secrets")
    @classmethod
    def _secrets(cls, v: dict[str, str]) -> dict[str, str]:
        return check_secrets(v)

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        return check_env(v, "exec env")

    @field_validator("command")
    @classmethod
    def _command(cls, v: list[str] | str) -> list[str] | str:
        return check_command(v)

    @field_validator("cwd")
    @classmethod
    def _cwd(cls, v: str | None) -> str | None:
        return None if v is None else check_path(v, "--cwd")

    approval: str | None = None  # an approved request (apr_...) for a command the sandbox's policy gates

    def argv(self) -> list[str]:
        if isinstance(self.command, str):
            return ["/bin/sh", "-c", self.command]
        if not self.command:
            raise InvalidError("empty command", hint="give a command after --, e.g. hutch exec SBX -- ls")
        return list(self.command)


class ExecResult(BaseModel):
    run_id: str
    sandbox_id: str
    exit_code: int
    status: RunStatus
    stdout: str
    stderr: str
    stdout_base64: bool = False
    stderr_base64: bool = False
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    truncated: bool = Field(default=False, description="This result (or stream) holds less than the command wrote: a cap cut it.")
    stored_truncated: bool = Field(
        default=False, description="The run's output kept in the sandbox (what poll and logs read) stops at the disk cap."
    )
    duration_ms: float
    signal: int | None = None
    error: str | None = None


class RawOutput(BaseModel):
    """A provider's exec outcome before the Service turns it into a run."""

    exit_code: int
    signal: int = 0
    stdout: bytes = b""
    stderr: bytes = b""
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    truncated_on_disk: bool = False
    timed_out: bool = False
    reason: str | None = None  # timeout | idle_timeout | killed | spawn
    finished_at: float | None = None
    killed: bool = False
    oom_killed: bool = False
    spawn_error: str | None = None


class FileEntry(BaseModel):
    name: str
    type: str
    size: int
    mode: int
    mtime: float


class SnapshotRecord(BaseModel):
    """A saved workspace: a tar (ownership, modes, symlinks, xattrs) under the state dir."""

    name: str
    sandbox_id: str
    provider: str
    path: str
    size: int
    created_at: float
    owner: str | None = None  # the key that saved it


class ApprovalStatus(StrEnum):
    pending = "pending"
    approved = "approved"
    rejected = "rejected"
    expired = "expired"


class ApprovalRecord(BaseModel):
    """A durable request for a human's decision (``hutch confirm`` / a policy-gated action)."""

    id: str
    sandbox_id: str | None = None
    action: str
    detail: str | None = None  # what exactly (the command of exec:PATTERN ...)
    reason: str | None = None
    status: ApprovalStatus
    created_at: float
    expires_at: float | None = None
    decided_at: float | None = None
    decided_by: str | None = None
    decision_reason: str | None = None
    used_at: float | None = None  # a policy approval is good for one performance of its action
    owner: str | None = None  # the key whose request (or sandbox) it is about


class ApprovalRequest(BaseModel):
    action: str = Field(min_length=1, max_length=200)
    sandbox: str | None = None
    reason: str | None = Field(default=None, max_length=2000)
    timeout: StrictFloat | None = Field(default=None, gt=0, le=7 * 86400)


class ApprovalDecision(BaseModel):
    approve: bool = True
    reason: str | None = Field(default=None, max_length=2000)
    by: str | None = Field(default=None, max_length=200)


class RunRecord(BaseModel):
    """A run as the store keeps it (``GET /v1/runs/ID``, a background exec's answer): every
    field is always there (None until it applies)."""

    model_config = ConfigDict(extra="allow")

    id: str
    sandbox_id: str
    command: list[str]
    status: RunStatus
    exit_code: int | None
    started_at: float
    finished_at: float | None
    duration_ms: float | None
    stdout_bytes: int
    stderr_bytes: int
    truncated: bool = Field(description="The output kept in the sandbox (what poll and logs read) stops at the disk cap.")
    background: bool
    cwd: str | None
    env_keys: list[str]  # the names only: values are never stored
    timeout: float | None
    idle_timeout: float | None
    signal: int | None
    error: str | None
