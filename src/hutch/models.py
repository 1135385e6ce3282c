"""Specs, records and states: the vocabulary every layer speaks (pydantic)."""

from __future__ import annotations

import posixpath
import re
import secrets
import time
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from hutch.errors import InvalidError
from hutch.units import parse_size

DEFAULT_MEMORY = 1 << 30
DEFAULT_PIDS = 512
DEFAULT_OUTPUT_CAP = 1 << 20
NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$")


def new_id(prefix: str) -> str:
    """A sortable, random id: ``sbx_`` / ``run_`` + time + randomness."""
    return f"{prefix}_{int(time.time() * 1000):011x}{secrets.token_hex(4)}"


class SandboxState(StrEnum):
    creating = "creating"
    running = "running"
    destroying = "destroying"
    destroyed = "destroyed"
    failed = "failed"
    lost = "lost"


LIVE_STATES = (SandboxState.creating, SandboxState.running, SandboxState.destroying)


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


class SandboxSpec(BaseModel):
    """What the user asked for."""

    name: str | None = None
    provider: str = "local"
    limits: Limits = Field(default_factory=Limits)
    env: dict[str, str] = Field(default_factory=dict)
    mounts: list[Mount] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)
    workdir: str = "/workspace"

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
    data: dict[str, Any] = Field(default_factory=dict, exclude=True)


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
