"""The core Provider protocol: what every provider does, and the values it speaks in.

A provider does provider-specific I/O and nothing else; ids, states, runs, events,
timeouts and claims belong to the Service. What some providers do beyond the core is a
named optional protocol (:mod:`hutch.provider.optional`) that a provider declares in its
:class:`Capabilities`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

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
    is a background run nobody watches live. ``interactive`` is set only for providers
    that declare ``interactive``; ``user`` (NAME, UID, NAME:GROUP or UID:GID, resolved inside
    the sandbox) only for those that declare ``exec_users``."""

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
    user: str | None = None  # run as this user of the sandbox (only for providers that declare exec_users)


@dataclass(frozen=True)
class Capabilities:
    """What a provider declares beyond the core protocol. The Service checks these (never
    the provider's attributes) and refuses what is not declared with ``invalid`` before
    anything is made. Each flag marked *protocol* promises the optional protocol of that
    name in :data:`hutch.provider.optional.PROTOCOLS` (checked when the provider is loaded);
    the others are behaviours of the core methods."""

    # behaviours of the core methods
    mounts: bool = False  # the spec's --mount binds
    limits: frozenset[str] = field(default_factory=frozenset)  # which of memory, pids, cpus it enforces
    oom_ends_sandbox: bool = False  # a memory limit's OOM kill takes the whole sandbox, not one run (gvisor)
    survives_daemon: bool = False  # its sandboxes and runs outlive the daemon and are adopted again
    secrets: bool = False  # sandbox-level secrets held outside the store
    placeholders: bool = False  # secrets as placeholders its egress proxy replaces for bound hosts (--secret-host)
    shared_workspace: bool = False  # sub-agents: a child binds its parent's /workspace
    images: bool = False  # boots an OCI image (--image)
    users: bool = False  # runs the workload as the user a spec names (--user), root included
    host_ca: bool = False  # trusts this machine's CA bundle inside a sandbox (--host-ca)
    interactive: bool = False  # live stdin and a terminal while a run runs (exec -i/-t, shell)
    options: frozenset[str] = field(default_factory=frozenset)  # provider_options keys it takes (protocol: OptionsProvider)
    # optional protocols
    network: bool = False  # egress policies beyond "none", changed live (NetworkProvider)
    transfer: bool = False  # push / pull of the workspace as a tar (TransferProvider)
    workspace: bool = False  # transfer, snapshots, fork and tenants (WorkspaceProvider)
    pause: bool = False  # pause/resume freeze and thaw every process (PauseProvider)
    watch: bool = False  # notices on its own when a sandbox dies (WatchingProvider)
    events: bool = False  # reports what it observes on its own, e.g. egress decisions (EventSource)
    ranged_reads: bool = False  # reads a file at an offset (RangedReads)
    ssh: bool = False  # sandboxes reachable with hutch ssh (SshProvider)
    claims: bool = False  # resources that outlive hutch, made and removed through claims (ClaimsProvider)
    changes: bool = False  # says what a sandbox changed, and exports its writable root as a layer (ChangesProvider)
    image_store: bool = False  # starts sandboxes from the daemon's image store (hutch image pull/import)
    ports: bool = False  # connections to ports listening inside a sandbox: hutch expose (PortsProvider)
    usage: bool = False  # measures a live sandbox's memory, CPU time and processes (UsageProvider)
    pool: bool = False  # started sandboxes take a request's settings after start: a warm pool (PoolProvider)
    nodes: bool = False  # places sandboxes on the nodes of a cluster: hutch cluster (NodesProvider)
    exec_users: bool = False  # runs one command as another user of the sandbox: exec --user (ExecUsersProvider)
    # runtimes (local: bwrap, gvisor): the one a spec without --runtime gets, and the others, each with
    # what a sandbox of it can do (never more than the provider declares above)
    default_runtime: str = ""
    runtimes: tuple[tuple[str, Capabilities], ...] = ()

    def of_runtime(self, name: str | None) -> Capabilities | None:
        """What a sandbox of runtime ``name`` can do (None or the default: these); None when there is no such runtime."""
        if name is None or name == self.default_runtime:
            return self
        return dict(self.runtimes).get(name)

    def runtime_names(self) -> list[str]:
        return [n for n in (self.default_runtime, *(name for name, _ in self.runtimes)) if n]

    @functools.cached_property
    def _set(self) -> frozenset[str]:
        return frozenset(name for name, value in dataclasses.asdict(self).items() if value)

    def declared(self) -> frozenset[str]:
        """The names of the flags set (``limits`` and ``options`` when not empty)."""
        return self._set


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
class RunRecords(Protocol):
    """The provider's own record of each run (part of the core: a run outlives the call
    that started it, and the daemon)."""

    async def run_status(self, rec: SandboxRecord, run_id: str) -> RawOutput | None:
        """The final outcome of a run that ended, from the provider's own record (output
        fields empty); None while it runs or when nothing is known."""
        ...

    async def runs_alive(self, rec: SandboxRecord) -> set[str]:
        """The ids of the runs whose processes still run in the sandbox."""
        ...

    async def kill_run(self, rec: SandboxRecord, run_id: str, sig: int) -> bool:
        """Signal the run's whole process tree; False when it was not running."""
        ...

    async def read_output(self, rec: SandboxRecord, run_id: str, stream: str, offset: int, limit: int) -> tuple[bytes, int]:
        """``limit`` bytes of a run's stream from ``offset``, and the stream's size so far."""
        ...

    async def read_transcript(self, rec: SandboxRecord, offset: int, limit: int) -> tuple[list[dict[str, Any]], int, int]:
        """Transcript records from ``offset``: (records, next offset, size so far)."""
        ...


@runtime_checkable
class Provider(RunRecords, Protocol):
    """What every provider does. docs/providers.md has each method's contract."""

    name: str
    capabilities: Capabilities

    async def check(self) -> list[CheckResult]:
        """The provider's lines of ``hutch doctor``."""
        ...

    async def create(self, rec: SandboxRecord) -> tuple[dict[str, Any], dict[str, str]]:
        """Create the sandbox; return (private data to store, enforcement summary). Never
        called for a provider that declares ``claims`` (the Service creates through them)."""
        ...

    async def alive(self, rec: SandboxRecord) -> bool:
        """Is this sandbox still there and answering? (after a restart, after a failed call)"""
        ...

    async def destroy(self, rec: SandboxRecord) -> bool:
        """Remove everything; idempotent. True when something was there to remove. Never
        called for a provider that declares ``claims``."""
        ...

    async def exec(self, rec: SandboxRecord, spec: ExecSpec) -> RawOutput:
        """Run ``spec`` to the end (enforcing both timeouts), keeping at most
        ``spec.max_output`` bytes per stream; ``spec.on_output`` sees every chunk as it comes
        (after redaction), and may wait: a slow client slows the run rather than losing
        output. With ``on_output`` the result's ``stdout``/``stderr`` may be left empty: the
        chunks went there. ``stdout_bytes`` and ``stderr_bytes`` count what was (or would
        have been) passed to it. The run's output is also kept by the provider (see
        :meth:`read_output`), so it outlives this call.

        ``spec.on_start`` is called once the run exists in the sandbox on its own (its
        process started, or it could not start and its final status is kept): from then on
        it survives the daemon and :meth:`runs_alive` / :meth:`run_status` know it. A
        background exec is acknowledged only then."""
        ...

    async def ps(self, rec: SandboxRecord) -> list[dict[str, Any]]:
        """The sandbox's processes, pids as seen inside."""
        ...

    async def read_file(self, rec: SandboxRecord, path: str, limit: int) -> tuple[bytes, bool]:
        """At most ``limit`` bytes of an absolute path, and whether the file was cut."""
        ...

    async def write_file(self, rec: SandboxRecord, path: str, data: bytes, mode: int) -> None: ...

    async def list_files(self, rec: SandboxRecord, path: str) -> list[FileEntry]: ...

    async def close(self) -> None:
        """The daemon is stopping; sandboxes that can outlive it are left running."""
        ...
