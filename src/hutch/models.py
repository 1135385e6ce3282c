"""Specs, records and states: the vocabulary every layer speaks (pydantic)."""

from __future__ import annotations

import ipaddress
import posixpath
import re
import secrets
import time
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from hutch.errors import InvalidError
from hutch.units import parse_duration, parse_size

DEFAULT_MEMORY = 1 << 30
DEFAULT_PIDS = 512
DEFAULT_OUTPUT_CAP = 1 << 20
NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$")
LABEL_KEY_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_./-]{0,62}$")
MAX_TTL = 365 * 86400.0
APPROVAL_ACTIONS = ("destroy", "network.change", "push.delete")  # and exec:PATTERN


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
        return v

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
    memory: int = DEFAULT_MEMORY
    pids: int = DEFAULT_PIDS
    cpus: float | None = None

    @field_validator("memory", mode="before")
    @classmethod
    def _memory(cls, v: Any) -> int:
        return parse_size(v)

    @field_validator("pids")
    @classmethod
    def _pids(cls, v: int) -> int:
        if v < 1:
            raise InvalidError(f"--pids must be at least 1, got {v}")
        return v

    @field_validator("cpus")
    @classmethod
    def _cpus(cls, v: float | None) -> float | None:
        if v is not None and not 0.01 <= v <= 1024:
            raise InvalidError(f"--cpus must be between 0.01 and 1024, got {v}")
        return v


HOST_LABEL_RE = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")
SECRET_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
DEFAULT_PORTS = (80, 443)


def normalize_host(text: str, *, pattern: bool = False) -> str:
    """A host name as the policy compares it: lower case, no trailing dot, ASCII (IDNA).

    With ``pattern``, a leading ``*.`` is kept (it matches every name below the suffix).
    IP literals are refused: addresses are allowed with --allow-cidr.
    """
    raw = text.strip()
    wild = pattern and raw.startswith("*.")
    name = raw[2:] if wild else raw
    name = name.rstrip(".").lower()
    try:
        ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        pass
    else:
        raise InvalidError(f"{text!r} is an IP address, not a host name", hint=f"use --allow-cidr {name.strip('[]')}/32")
    try:
        name = name.encode("idna").decode("ascii") if not name.isascii() else name
    except UnicodeError as exc:
        raise InvalidError(f"invalid host name {text!r}", hint="use a name like example.com or *.example.org") from exc
    labels = name.split(".")
    if not name or len(name) > 253 or not all(HOST_LABEL_RE.match(label) for label in labels):
        raise InvalidError(f"invalid host name {text!r}", hint="use a name like example.com or *.example.org")
    if wild and len(labels) < 2:
        raise InvalidError(f"{text!r} is too wide a pattern", hint="name at least a domain: *.example.org")
    return ("*." if wild else "") + name


class NetworkPolicy(BaseModel):
    """Egress of one sandbox. ``none``: loopback only. ``allowlist``: named hosts through hutch's
    proxy. ``open``: any public address through the proxy; private ranges only by CIDR."""

    mode: Literal["none", "allowlist", "open"] = "none"
    allow_hosts: list[str] = Field(default_factory=list)
    deny_hosts: list[str] = Field(default_factory=list)
    ports: list[int] = Field(default_factory=list)  # empty: 80 and 443 (allowlist), any (open)
    cidrs: list[str] = Field(default_factory=list)

    @field_validator("allow_hosts", "deny_hosts")
    @classmethod
    def _hosts(cls, v: list[str]) -> list[str]:
        return sorted({normalize_host(h, pattern=True) for h in v})

    @field_validator("ports")
    @classmethod
    def _ports(cls, v: list[int]) -> list[int]:
        for port in v:
            if not 1 <= port <= 65535:
                raise InvalidError(f"invalid port {port}", hint="ports are 1-65535, e.g. --allow-port 443")
        return sorted(set(v))

    @field_validator("cidrs")
    @classmethod
    def _cidrs(cls, v: list[str]) -> list[str]:
        out = set()
        for text in v:
            try:
                out.add(str(ipaddress.ip_network(text.strip(), strict=False)))
            except ValueError as exc:
                raise InvalidError(f"invalid CIDR {text!r}", hint="e.g. --allow-cidr 203.0.113.0/24") from exc
        return sorted(out)

    @classmethod
    def build(
        cls,
        mode: str | None = None,
        allow_hosts: list[str] | tuple[str, ...] = (),
        ports: list[int] | tuple[int, ...] = (),
        cidrs: list[str] | tuple[str, ...] = (),
    ) -> NetworkPolicy:
        """A new sandbox's policy: allow rules without a mode mean an allowlist."""
        has_rules = bool(allow_hosts or ports or cidrs)
        chosen = mode or ("allowlist" if has_rules else "none")
        if chosen == "none" and has_rules:
            raise InvalidError(
                "--allow-host, --allow-port and --allow-cidr need a network, but --network none was given",
                hint="use --network allowlist with them, or drop them",
            )
        data = {"mode": chosen, "allow_hosts": list(allow_hosts), "ports": list(ports), "cidrs": list(cidrs)}
        return cls.model_validate(data).check()

    def check(self) -> NetworkPolicy:
        if self.mode == "none" and (self.allow_hosts or self.ports or self.cidrs):
            raise InvalidError(
                "--allow-host, --allow-port and --allow-cidr need a network",
                hint="add --network allowlist (or drop --network none)",
            )
        return self

    @property
    def effective_ports(self) -> list[int] | None:
        """Allowed ports; None means any."""
        if self.ports:
            return self.ports
        return list(DEFAULT_PORTS) if self.mode == "allowlist" else None


class PolicyChange(BaseModel):
    """``hutch policy``: what to add to (or take from) a live sandbox's network policy."""

    mode: Literal["none", "allowlist", "open"] | None = None
    allow_hosts: list[str] | None = None
    deny_hosts: list[str] | None = None
    remove_hosts: list[str] | None = None
    ports: list[int] | None = None
    cidrs: list[str] | None = None


def check_secrets(v: dict[str, str]) -> dict[str, str]:
    for name in v:
        if not SECRET_NAME_RE.match(name):
            raise InvalidError(f"invalid secret name {name!r}", hint="a secret name is an env variable name, e.g. API_TOKEN")
    return v


class SandboxSpec(BaseModel):
    """What the user asked for."""

    name: str | None = None
    provider: str = "local"
    limits: Limits = Field(default_factory=Limits)
    env: dict[str, str] = Field(default_factory=dict)
    mounts: list[Mount] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)
    workdir: str = "/workspace"
    network: NetworkPolicy = Field(default_factory=NetworkPolicy)
    image: str | None = None  # providers that boot images (unikraft): the OCI image
    provider_options: dict[str, str] = Field(default_factory=dict)  # e.g. {"metro": "fra"} for unikraft
    # Secret values travel in the request only: never serialized, stored or returned.
    secrets: dict[str, str] = Field(default_factory=dict, exclude=True, repr=False)
    secret_names: list[str] = Field(default_factory=list)

    @field_validator("network")
    @classmethod
    def _network(cls, v: NetworkPolicy) -> NetworkPolicy:
        return v.check()

    @field_validator("secrets")
    @classmethod
    def _secrets(cls, v: dict[str, str]) -> dict[str, str]:
        return check_secrets(v)

    def model_post_init(self, _context: Any) -> None:
        if self.secrets:
            self.secret_names = sorted(set(self.secret_names) | set(self.secrets))

    tenant: str | None = None  # a persistent sandbox line: its /workspace outlives the sandbox
    session: str | None = None  # auto mode: the reuse key (profile + working directory)

    @field_validator("tenant")
    @classmethod
    def _tenant(cls, v: str | None) -> str | None:
        if v is not None and not NAME_RE.match(v):
            raise InvalidError(f"invalid tenant name {v!r}", hint="tenant names are 1-63 letters, digits, '.', '_' or '-'")
        return v

    ttl: float | None = None  # seconds from creation (or the last keepalive --ttl) until expiry
    idle_timeout: float | None = None  # seconds without a run or API activity until expiry
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
        for key, value in v.items():
            check_label(key, value)
        return v

    @field_validator("require_approval")
    @classmethod
    def _require_approval(cls, v: list[str]) -> list[str]:
        for action in v:
            check_action(action)
        return sorted(set(v))

    @field_validator("name")
    @classmethod
    def _name(cls, v: str | None) -> str | None:
        if v is not None and (not NAME_RE.match(v) or v.startswith(("sbx_", "run_"))):
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
        return v


def check_label(key: str, value: str) -> None:
    if not LABEL_KEY_RE.match(key):
        raise InvalidError(
            f"invalid label key {key!r}", hint="keys are 1-63 letters, digits, '.', '_', '/' or '-', e.g. team=infra"
        )
    if len(value) > 256 or "\n" in value:
        raise InvalidError(f"invalid value for label {key!r}", hint="label values are one line of at most 256 characters")


def check_action(action: str) -> None:
    """An action that can require approval: one of APPROVAL_ACTIONS, or ``exec:PATTERN``."""
    if action in APPROVAL_ACTIONS or (action.startswith("exec:") and len(action) > len("exec:")):
        return
    raise InvalidError(
        f"unknown action {action!r}",
        hint=f"use {', '.join(APPROVAL_ACTIONS)} or exec:PATTERN (a shell glob over the command, e.g. 'exec:git push*')",
    )


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
    data: dict[str, Any] = Field(default_factory=dict, exclude=True)
    ssh: dict[str, Any] | None = None  # where `hutch ssh` connects (unikraft --ssh): fqdn, port, user; from data

    @model_validator(mode="after")
    def _ssh(self) -> SandboxRecord:
        if self.ssh is None and isinstance(self.data.get("ssh"), dict):
            self.ssh = dict(self.data["ssh"])
        return self


class ExecRequest(BaseModel):
    command: list[str] | str
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    timeout: float | None = Field(default=None, gt=0, le=7 * 86400)
    idle_timeout: float | None = Field(default=None, gt=0, le=7 * 86400)
    background: bool = False
    stdin: str | None = None
    stdin_base64: bool = False
    max_output: int = Field(default=DEFAULT_OUTPUT_CAP, ge=0)
    secrets: dict[str, str] = Field(default_factory=dict, exclude=True, repr=False)
    redact: bool = True  # secret values in the output become [redacted:NAME]

    @field_validator("secrets")
    @classmethod
    def _secrets(cls, v: dict[str, str]) -> dict[str, str]:
        return check_secrets(v)

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
    truncated: bool = False
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


class ApprovalRequest(BaseModel):
    action: str = Field(min_length=1, max_length=200)
    sandbox: str | None = None
    reason: str | None = Field(default=None, max_length=2000)
    timeout: float | None = Field(default=None, gt=0, le=7 * 86400)


class ApprovalDecision(BaseModel):
    approve: bool = True
    reason: str | None = Field(default=None, max_length=2000)
    by: str | None = Field(default=None, max_length=200)
