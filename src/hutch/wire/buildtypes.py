"""The argument types of :mod:`hutch.wire.build` (``typing`` classes: kept apart so that
the builder itself, on the CLI's plain paths, does not import ``typing``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol, TypedDict

__all__ = ["ExecOptions", "Shape", "SpecDefaults"]


class SpecDefaults(Protocol):
    """Where unset limits and the provider come from: the caller's :class:`hutch.config.Settings`."""

    @property
    def provider(self) -> str: ...
    @property
    def memory(self) -> int | str: ...
    @property
    def pids(self) -> int: ...
    @property
    def cpus(self) -> float | None: ...
    def default_image(self, provider: str) -> str | None: ...
    def default_runtime(self, provider: str) -> str | None: ...


class Shape(TypedDict, total=False):
    """The keywords a sandbox spec and a sub-agent request share: limits (unset: the caller's
    settings), environment, labels, and the network (allow rules without a mode: an allowlist)."""

    memory: int | str | None
    pids: int | None
    cpus: float | None
    disk: int | str | None
    env: Mapping[str, str] | None
    labels: Mapping[str, str] | None
    network: str | None
    allow_hosts: Iterable[str]
    allow_ports: Iterable[int]
    allow_cidrs: Iterable[str]


class ExecOptions(TypedDict, total=False):
    """The keywords of an exec beside its command and ``background`` (``Sandbox.exec`` and
    ``AsyncSandbox.exec`` take them as they are)."""

    env: Mapping[str, str] | None  # added to the sandbox's environment
    cwd: str | None  # default: the sandbox's workdir
    timeout: float | None  # wall seconds
    idle_timeout: float | None  # seconds without output
    stdin: bytes | str | None  # the command's whole standard input
    max_output: int | None  # bytes kept per stream
    secrets: Mapping[str, str] | None  # in the environment, redacted from output
    redact: bool  # False: no redaction at all (default True)
    approval: str | None  # an approval id, when the sandbox's policy requires one
    user: str | None  # run as this user of the sandbox (NAME, UID, NAME:GROUP, UID:GID); None: its own
