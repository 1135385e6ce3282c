"""The Provider protocol, its capabilities, and the registry.

A provider does provider-specific I/O and nothing else; ids, states, runs, events and
timeouts belong to the Service. Built-in providers are found first, then the
``hutch.providers`` entry-point group (each entry point names a factory taking
:class:`~hutch.config.Settings`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from importlib import import_module
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from hutch.errors import InvalidError
from hutch.models import FileEntry, RawOutput, SandboxRecord

OnOutput = Callable[[str, bytes], Awaitable[None]]
OnStart = Callable[[], None]


@dataclass
class Interactive:
    """A run that takes input while it runs: ``inbox`` carries ``{"stdin": bytes}``,
    ``{"resize": (rows, cols)}`` and ``{"eof": True}``; ``tty`` gives it a terminal."""

    inbox: asyncio.Queue[dict[str, Any]]
    tty: bool = False
    rows: int = 24
    cols: int = 80


if TYPE_CHECKING:
    from hutch.config import Settings


@dataclass(frozen=True, kw_only=True)
class ExecSpec:
    """One run, as the Service hands it to :meth:`Provider.exec`: everything a provider
    needs to start, feed, bound and report it.

    ``env`` holds only the run's own variables (the command's ``--env`` and secrets): the
    sandbox's environment is the provider's to add, from what it kept at create. ``stdin``
    None means ``/dev/null``. ``timeout`` is the wall limit and ``idle_timeout`` the limit
    without output (None: none); the provider kills the whole process tree and reports
    which one fired. ``redact`` maps secret names to values to replace by
    ``[redacted:NAME]`` in the output (None: no redaction for this run). ``stream`` False
    is a background run nobody watches live."""

    run_id: str
    argv: list[str]
    cwd: str
    max_output: int
    env: dict[str, str] = field(default_factory=dict)
    stdin: bytes | None = None
    timeout: float | None = None
    idle_timeout: float | None = None
    stream: bool = True
    on_output: OnOutput | None = None
    on_start: OnStart | None = None
    interactive: Interactive | None = None
    redact: dict[str, str] | None = None


@dataclass(frozen=True)
class Capabilities:
    mounts: bool = False
    limits: frozenset[str] = field(default_factory=frozenset)  # memory, pids, cpus
    files: bool = True
    survives_daemon: bool = False
    transfer: bool = False  # push / pull only (export and import of the workspace), without snapshots or forks
    network: bool = False  # egress policies (allowlist / open) beyond "none"
    secrets: bool = False  # sandbox-level secrets held outside the store
    workspace: bool = False  # the WorkspaceProvider methods: push/pull, snapshots, fork, tenants
    pause: bool = False  # pause/resume freeze and thaw every process
    shared_workspace: bool = False  # sub-agents: a child binds its parent's /workspace
    images: bool = False  # boots an OCI image (--image)
    interactive: bool = False  # live stdin and a terminal while a run runs (exec -i/-t, shell)
    watch: bool = False  # notices on its own when a sandbox dies (WatchingProvider)


@dataclass
class CheckResult:
    """One line of ``hutch doctor``."""

    name: str
    ok: bool
    detail: str
    fix: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail, "fix": self.fix}


@runtime_checkable
class Provider(Protocol):
    name: str
    capabilities: Capabilities

    async def check(self) -> list[CheckResult]: ...

    async def create(self, rec: SandboxRecord) -> tuple[dict[str, Any], dict[str, str]]:
        """Create the sandbox; return (private data to store, enforcement summary)."""
        ...

    async def alive(self, rec: SandboxRecord) -> bool:
        """Re-adopt after a daemon restart: is this sandbox still there and answering?"""
        ...

    async def exec(self, rec: SandboxRecord, spec: ExecSpec) -> RawOutput:
        """Run ``spec`` to the end (enforcing both timeouts), keeping at most
        ``spec.max_output`` bytes per stream; ``spec.on_output`` sees every chunk as it comes
        (after redaction), and may wait: a slow client slows the run rather than losing
        output. ``stdout_bytes`` and ``stderr_bytes`` count what was (or would have been)
        passed to it. The run's output is also kept by the provider (see
        :meth:`read_output`), so it outlives this call.

        ``spec.on_start`` is called once the run exists in the sandbox on its own (its
        process started, or it could not start and its final status is kept): from then on
        it survives the daemon and :meth:`runs_alive` / :meth:`run_status` know it. A
        background exec is acknowledged only then."""
        ...

    async def run_status(self, rec: SandboxRecord, run_id: str) -> RawOutput | None:
        """The final outcome of a run that ended, from the provider's own record."""
        ...

    async def runs_alive(self, rec: SandboxRecord) -> set[str]: ...

    async def kill_run(self, rec: SandboxRecord, run_id: str, sig: int) -> bool: ...

    async def read_output(self, rec: SandboxRecord, run_id: str, stream: str, offset: int, limit: int) -> tuple[bytes, int]:
        """``limit`` bytes of a run's stream from ``offset``, and the stream's size so far."""
        ...

    async def read_transcript(self, rec: SandboxRecord, offset: int, limit: int) -> tuple[list[dict[str, Any]], int, int]:
        """Transcript records from ``offset``: (records, next offset, size so far)."""
        ...

    async def ps(self, rec: SandboxRecord) -> list[dict[str, Any]]: ...

    async def destroy(self, rec: SandboxRecord) -> bool:
        """Remove everything; idempotent. True when something was there to remove."""
        ...

    async def read_file(self, rec: SandboxRecord, path: str, limit: int) -> tuple[bytes, bool]: ...

    async def write_file(self, rec: SandboxRecord, path: str, data: bytes, mode: int) -> None: ...

    async def list_files(self, rec: SandboxRecord, path: str) -> list[FileEntry]: ...

    async def pause(self, rec: SandboxRecord) -> str:
        """Freeze every process of the sandbox; returns how (kept and given back to resume)."""
        ...

    async def resume(self, rec: SandboxRecord) -> None: ...

    async def close(self) -> None: ...


@dataclass(frozen=True)
class CopyReport:
    """How a workspace copy was made, and what it could not carry (never dropped silently)."""

    method: str  # reflink, tar, memory ...
    skipped: int = 0  # entries not copied as they were (a socket, a file changed or removed while read)
    notes: tuple[str, ...] = ()  # the first few reasons, as the copier gave them


@runtime_checkable
class WorkspaceProvider(Protocol):
    """Optional capability (``capabilities.workspace``): the workspace as a tar stream.

    Tars are POSIX (pax) archives of ``/workspace`` keeping modes, symlinks, xattrs and
    owners (numeric); member names are relative (``./a/b``).
    """

    async def export_workspace(self, rec: SandboxRecord, dest: Path) -> int:
        """Write the workspace as a tar to ``dest``; return its size in bytes."""
        ...

    async def import_workspace(self, rec: SandboxRecord, src: Path | None, delete: list[str]) -> None:
        """Extract the tar ``src`` into the workspace as the sandbox's own user, never
        writing outside it, then remove the ``delete`` paths (relative to the workspace)."""
        ...

    async def clone_workspace(self, src: SandboxRecord, dst: SandboxRecord) -> CopyReport:
        """Copy ``src``'s workspace into ``dst``'s, every file as it is (unreadable ones too);
        return how, and what could not be copied."""
        ...

    async def delete_tenant(self, name: str) -> bool:
        """Remove a tenant's kept workspace; True when there was one."""
        ...


@dataclass(frozen=True)
class Death:
    """What a provider knows of how a sandbox died on its own (none of it is guessed)."""

    exit_code: int | None = None  # its init's exit code, when known
    signal: int | None = None  # the signal that ended it, when known
    oom_kills: int = 0  # out-of-memory kills the kernel counted in the sandbox since it was watched
    detail: str | None = None  # anything else the provider can say

    @property
    def reason(self) -> str:
        if self.oom_kills:
            return "oom"
        return "signal" if self.signal else "exit" if self.exit_code is not None else "unknown"


OnGone = Callable[[str, Death], Awaitable[None]]


@runtime_checkable
class WatchingProvider(Protocol):
    """Optional capability (``capabilities.watch``): a provider that notices on its own, at
    once, when a sandbox dies (its init killed from outside, the OOM killer, a crash)."""

    def watch(self, rec: SandboxRecord, on_gone: OnGone) -> bool:
        """Follow ``rec`` (just created, or adopted after a daemon restart). When it dies on
        its own, release what only the kernel held for it (cgroups ...; its files stay until
        destroy), then call ``on_gone(sandbox id, what is known)`` once. A destroy stops the
        following first: a sandbox ended on purpose is not reported. False when this
        sandbox cannot be followed (the Service then judges its death by ``alive``)."""
        ...


def watching_provider(provider: Provider) -> WatchingProvider | None:
    if provider.capabilities.watch and isinstance(provider, WatchingProvider):
        return provider
    return None


def transfer_provider(provider: Provider) -> WorkspaceProvider:
    """A provider that can push and pull (a full workspace provider, or one with ``transfer``)."""
    if provider.capabilities.transfer and isinstance(provider, WorkspaceProvider):
        return provider
    return workspace_provider(provider)


def workspace_provider(provider: Provider) -> WorkspaceProvider:
    if not provider.capabilities.workspace or not isinstance(provider, WorkspaceProvider):
        raise InvalidError(
            f"the {provider.name} provider cannot transfer, snapshot or fork workspaces",
            hint="use the local provider",
        )
    return provider


BUILTINS: dict[str, str] = {
    "local": "hutch.providers.local:LocalProvider",
    "fake": "hutch.providers.fake:FakeProvider",
    "unikraft": "hutch.providers.unikraft:UnikraftProvider",
}


def _load(target: str) -> Callable[[Settings], Provider]:
    module, _, attr = target.partition(":")
    factory: Callable[[Settings], Provider] = getattr(import_module(module), attr)
    return factory


def provider_names() -> list[str]:
    names = set(BUILTINS)
    names.update(ep.name for ep in entry_points(group="hutch.providers"))
    return sorted(names)


def load_provider(name: str, settings: Settings) -> Provider:
    if name in BUILTINS:
        return _load(BUILTINS[name])(settings)
    for ep in entry_points(group="hutch.providers"):
        if ep.name == name:
            factory: Callable[[Settings], Provider] = ep.load()
            return factory(settings)
    raise InvalidError(f"unknown provider {name!r}", hint=f"available providers: {', '.join(provider_names())}")
