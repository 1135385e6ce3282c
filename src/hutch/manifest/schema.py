"""The keys of a manifest file and their types: strict (a number where text is asked is
refused, and the other way round), and no key the schema does not name."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from hutch.manifest.refs import is_ref

INLINE = "inline secret values are refused: give where the value is read, env:VAR or file:PATH"


class Table(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Limits(Table):
    memory: str | int | None = None  # 512M, 1G or bytes
    pids: int | None = None
    cpus: float | None = None
    disk: str | int | None = None


class Network(Table):
    mode: Literal["none", "allowlist", "open"] | None = None  # hosts without a mode: allowlist
    hosts: list[str] = Field(default_factory=list)  # example.com, *.example.org
    ports: list[int] = Field(default_factory=list)  # default 80 and 443
    cidrs: list[str] = Field(default_factory=list)


class MountEntry(Table):
    source: str  # a host path; relative: to the manifest's directory
    target: str
    readonly: bool = False


class FileEntry(Table):
    """One of ``content`` (text), ``content_base64`` or ``source`` (a file on the caller's machine)."""

    path: str
    content: str | None = None
    content_base64: str | None = None
    source: str | None = None
    mode: int | str = "644"  # octal: "644", "0o755", or 0o644 in TOML

    @model_validator(mode="after")
    def _one(self) -> FileEntry:
        given = [k for k in ("content", "content_base64", "source") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of content, content_base64 or source")
        return self


class Git(Table):
    repo: str  # https://git.example.com/org/repo.git, file:///srv/repo, ./repo; may end in #REF
    ref: str | None = None  # a branch, a tag or a commit
    depth: int | Literal["full"] | None = None  # default 1
    secret: str | None = None  # a secret of [secrets] holding the token
    username: str | None = None  # default x-access-token
    max_size: str | int | None = None  # default 1G


class Manifest(Table):
    version: Literal[1] = 1
    name: str | None = None
    provider: str | None = None
    image: str | None = None
    runtime: Literal["bwrap", "gvisor"] | None = None  # local: how it isolates
    user: str | None = None
    workdir: str | None = None
    host_ca: bool | None = None
    tenant: str | None = None
    unikraft_metro: str | None = None
    ssh: bool | None = None
    placement: Literal["spread", "pack"] | None = None  # on a cluster's gateway: how it picks the node
    node: str | None = None  # on a cluster's gateway: the node to place it on when it has room
    limits: Limits | None = None
    env: dict[str, str] = Field(default_factory=dict)
    pass_env: list[str] = Field(default_factory=list)  # copied from the caller's environment at create
    secrets: dict[str, str] | list[str] = Field(default_factory=dict)  # NAME = "env:VAR" | "file:PATH"; [NAME]: env:NAME
    secret_hosts: dict[str, list[str]] = Field(default_factory=dict)  # NAME = [HOST]: the sandbox holds a placeholder
    secret_body: list[str] = Field(default_factory=list)  # secrets whose placeholder is also replaced in request bodies
    no_intercept: list[str] = Field(default_factory=list)  # hosts whose HTTPS is relayed unopened
    network: Network | None = None
    mounts: list[MountEntry | str] = Field(default_factory=list)  # tables, or HOST:SANDBOX[:ro]
    labels: dict[str, str] = Field(default_factory=dict)
    ttl: str | float | None = None  # 30m, 2h, or seconds
    idle_timeout: str | float | None = None
    on_expire: Literal["destroy", "pause"] | None = None
    require_approval: list[str] = Field(default_factory=list)  # destroy, network.change, push.delete, exec:PATTERN
    files: list[FileEntry] = Field(default_factory=list)
    setup: list[str | list[str]] = Field(default_factory=list)  # run once at create, in order
    git: Git | str | None = None  # a table, or URL[#REF]

    @field_validator("secrets")
    @classmethod
    def _references(cls, v: dict[str, str] | list[str]) -> dict[str, str] | list[str]:
        """Never a value: each entry says where the value is read (the value is not echoed)."""
        if isinstance(v, list):
            for item in v:
                name, sep, source = item.partition("=")
                if not name or (sep and not is_ref(source)):
                    raise ValueError(f"secret {name or '?'}: {INLINE}")
            return v
        for name, source in v.items():
            if not is_ref(source):
                raise ValueError(f"secret {name}: {INLINE}")
        return v

    def secret_names(self) -> list[str]:
        if isinstance(self.secrets, dict):
            return list(self.secrets)
        return [item.partition("=")[0] for item in self.secrets]

    def secret_sources(self) -> dict[str, str]:
        if isinstance(self.secrets, dict):
            return dict(self.secrets)
        return {name: source or f"env:{name}" for name, _, source in (i.partition("=") for i in self.secrets)}
