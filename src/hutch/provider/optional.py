"""The optional protocols: what some providers do beyond the core, each declared by a flag
of :class:`~hutch.provider.core.Capabilities` of the same name (see :data:`PROTOCOLS`).

The Service reaches them only through the helpers in :mod:`hutch.provider.require`, after
the declared flag, never by looking for a method.
"""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypedDict, runtime_checkable

from hutch.models import SandboxRecord, SandboxSpec

if TYPE_CHECKING:
    from hutch.credentials import Credential
    from hutch.wire import SshEndpoint

# -- network, events, ranged reads, options ------------------------------------------------


@runtime_checkable
class NetworkProvider(Protocol):
    """``capabilities.network``: egress policies beyond ``none``."""

    async def set_network(self, rec: SandboxRecord) -> None:
        """Apply ``rec.spec.network`` now (also after a daemon restart): new connections see
        it at once, nothing restarts."""
        ...


OnEvent = Callable[[str, str, str | None, dict[str, Any]], None]  # (type, sandbox id, run id, data)


@runtime_checkable
class EventSource(Protocol):
    """``capabilities.events``: the provider observes things on its own (egress decisions)
    and reports them; the Service records each as an event."""

    def bind_events(self, on_event: OnEvent) -> None: ...


@runtime_checkable
class RangedReads(Protocol):
    """``capabilities.ranged_reads``: a page of a file without reading what comes before it."""

    async def read_range(self, rec: SandboxRecord, path: str, offset: int, limit: int) -> tuple[bytes, bool, int]:
        """``limit`` bytes from ``offset``, whether more follow, and the file's size."""
        ...


@runtime_checkable
class PortsProvider(Protocol):
    """``capabilities.ports``: a connection to a port listening inside the sandbox (its own
    network namespace), for an exposed port (``hutch expose``)."""

    async def connect_port(self, rec: SandboxRecord, port: int) -> socket.socket:
        """A TCP connection to ``127.0.0.1:port`` inside the sandbox; ``unavailable`` when
        nothing listens there."""
        ...


@runtime_checkable
class OptionsProvider(Protocol):
    """``capabilities.options``: the ``provider_options`` keys of a spec this provider takes
    (the Service refuses any other key before anything is made)."""

    option_flags: Mapping[str, str]  # how a user gives each option (the CLI flag), for messages

    def validate_options(self, spec: SandboxSpec) -> None:
        """Raise ``InvalidError`` (with a hint) for a value it cannot take; called before
        anything is made."""
        ...


# -- workspaces ------------------------------------------------------------------------------


@dataclass(frozen=True)
class CopyReport:
    """How a workspace copy was made, and what it could not carry (never dropped silently)."""

    method: str  # reflink, tar, memory ...
    skipped: int = 0  # entries not copied as they were (a socket, a file changed or removed while read)
    notes: tuple[str, ...] = ()  # the first few reasons, as the copier gave them


@runtime_checkable
class TransferProvider(Protocol):
    """``capabilities.transfer``: the workspace as a tar stream (push and pull).

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


def tenant_storage(rec: SandboxRecord) -> str | None:
    """Where a provider keeps the workspace of ``rec``'s tenant: the Service's choice (each
    owner's tenants apart), in its ``data``; a sandbox made before tenants were per owner: the
    tenant's name."""
    return str(rec.data.get("tenant_storage") or "") or rec.spec.tenant


@runtime_checkable
class WorkspaceProvider(TransferProvider, Protocol):
    """``capabilities.workspace``: transfer, and workspaces kept and copied by the provider
    (snapshots restore through ``import_workspace``, fork, tenants)."""

    async def clone_workspace(self, src: SandboxRecord, dst: SandboxRecord) -> CopyReport:
        """Copy ``src``'s workspace into ``dst``'s, every file as it is (unreadable ones too);
        return how, and what could not be copied."""
        ...

    async def delete_tenant(self, name: str) -> bool:
        """Remove a tenant's kept workspace (``name``: its storage key, SandboxRecord.tenant_storage); True when there was one."""
        ...

    async def export_root(self, rec: SandboxRecord, dest: Path) -> int | None:
        """Write what the sandbox changed of its root (an image sandbox's writable layer) as a
        tar to ``dest`` and return its size; None when the sandbox has no writable root. A
        sandbox created with ``data["root_seed"]`` (``{"tar": PATH}`` or ``{"data": the
        source's data}``) starts with that layer (snapshot restore, fork)."""
        ...


# -- pause, watch, ssh -------------------------------------------------------------------------


@runtime_checkable
class PauseProvider(Protocol):
    """``capabilities.pause``: freeze and thaw every process of a sandbox."""

    async def pause(self, rec: SandboxRecord) -> str:
        """Freeze every process of the sandbox; returns how (kept and given back to resume)."""
        ...

    async def resume(self, rec: SandboxRecord) -> None: ...


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
    """``capabilities.watch``: the provider notices on its own, at once, when a sandbox dies
    (its init killed from outside, the OOM killer, a crash)."""

    def watch(self, rec: SandboxRecord, on_gone: OnGone) -> bool:
        """Follow ``rec`` (just created, or adopted after a daemon restart). When it dies on
        its own, release what only the kernel held for it (cgroups ...; its files stay until
        destroy), then call ``on_gone(sandbox id, what is known)`` once. A destroy stops the
        following first: a sandbox ended on purpose is not reported. False when this
        sandbox cannot be followed (the Service then judges its death by ``alive``)."""
        ...


@runtime_checkable
class SshProvider(Protocol):
    """``capabilities.ssh``: sandboxes made with the ``ssh`` provider option are reachable
    with ``hutch ssh`` (a terminal where the provider has no interactive runs)."""

    def ssh_endpoint(self, rec: SandboxRecord) -> SshEndpoint | None:
        """Where ``hutch ssh`` connects to ``rec``; None when it was made without SSH."""
        ...


# -- pools -------------------------------------------------------------------------------------


@runtime_checkable
class PoolProvider(Protocol):
    """``capabilities.pool``: a sandbox started ahead of time (a pool member, made with the
    ordinary :meth:`~hutch.provider.core.Provider.create` from its shape's spec) can take a
    request's settings after it started. The pool's workflow (which members, when, how
    many, handing one out once) is the Service's (service/pool.py). A member's record
    carries ``data["pool_member"]`` True when it is created: the provider may start and
    keep it at a low priority, and gives it the normal one in :meth:`adopt_member`."""

    def pool_refusal(self, spec: SandboxSpec) -> str | None:
        """Why a started member of ``spec``'s shape cannot take ``spec`` after start (it is
        then created cold), or None. Called only for a spec whose start-time settings (mounts,
        tenant, image ...) already match the member's: this says what the provider cannot
        change on a live sandbox (limits held as rlimits ...)."""
        ...

    async def adopt_member(self, rec: SandboxRecord, member: SandboxRecord) -> tuple[dict[str, Any], dict[str, str]]:
        """Make the started ``member`` (its own spec and data) into ``rec`` (the same id, the
        request's spec): its environment, secrets, limits and network as if it had been
        created with them. Returns what :meth:`~hutch.provider.core.Provider.create` returns.
        A member that does not answer raises ``UnavailableError`` (it is then destroyed)."""
        ...

    async def member_memory(self, rec: SandboxRecord) -> int | None:
        """The memory a started sandbox holds now, in bytes (None: not known)."""
        ...

    def hurry_member(self, member_id: str) -> None:
        """A member still starting (its create in progress) is wanted soon: give it the normal
        priority from now on, if it has a low one (nothing, if its start has not got that far)."""
        ...

    def memory_available(self) -> int | None:
        """The memory the machine's sandboxes can still take, in bytes (None: not known)."""
        ...


# -- claims ------------------------------------------------------------------------------------

StepHook = Callable[[str], None]  # called with each step of a claim's lifecycle (service/claims.py)
TokenSource = Callable[[str, str], Awaitable[str]]  # (endpoint, account) -> the token to use
Instance = dict[str, Any]  # a remote resource as the provider sees it: at least "uuid", "name", "state"


class AccountScope(TypedDict):
    """The account a token belongs to at an endpoint, and its instance quota (None: not told)."""

    account: str
    used: int | None
    hard: int | None
    limits: Any


@dataclass(frozen=True)
class CreatePlan:
    """What a claimed create sends (``body``: its hash is recorded with the claim before it
    is sent), and how the spec's limits will be enforced."""

    body: dict[str, Any]
    enforcement: dict[str, str]


@runtime_checkable
class ClaimsProvider(Protocol):
    """``capabilities.claims``: resources that can outlive hutch (and cost money). The
    Service creates and destroys them through claims (service/claims.py), never with
    ``create``/``destroy``; these are the single calls that workflow makes. Every remote
    call names the endpoint and the account, and the provider asks the bound
    :data:`TokenSource` for the token."""

    name: str
    platform: str  # what the remote side is called in messages ("Unikraft Cloud")

    def bind_claims(self, tokens: TokenSource, on_step: StepHook) -> None:
        """Where tokens come from (the Service's keyring), and the Service's step hook
        (called with ``create_sent`` once a create's answer begins to arrive)."""
        ...

    def location(self, spec: SandboxSpec) -> str | None:
        """The location a spec names among its provider options (None: none named)."""
        ...

    def endpoint(self, where: str | None, caller: Credential | None) -> str:
        """The endpoint for new work: ``where`` (a location the user named), else the
        caller's, else the provider's default. Invalid input is ``invalid``."""
        ...

    async def account(self, endpoint: str, token: str) -> AccountScope:
        """The account of ``token`` at ``endpoint`` (read-only; validates the token)."""
        ...

    def plan(self, rec: SandboxRecord, name: str) -> CreatePlan:
        """The create request for ``rec`` under the generated unique ``name``."""
        ...

    async def create_instance(self, endpoint: str, body: dict[str, Any], *, account: str) -> Instance:
        """Send the one create; a definite refusal raises invalid/capacity/unauthorized/
        not_found/conflict, anything unclear another ``HutchError``."""
        ...

    async def ready(self, endpoint: str, inst: Instance, rec: SandboxRecord, *, account: str) -> dict[str, Any]:
        """Wait until the new resource answers; return what to add to the sandbox's data."""
        ...

    async def lookup(self, endpoint: str, uuid: str, *, account: str) -> Instance | None:
        """One resource by UUID; None when it is absent."""
        ...

    async def inventory(self, endpoint: str, *, account: str) -> list[Instance]:
        """The account's complete listing."""
        ...

    async def delete_instance(self, endpoint: str, uuid: str, *, account: str) -> Literal["accepted", "absent"]:
        """Delete one resource by UUID: ``accepted``, or ``absent`` when it was already gone."""
        ...

    def forget(self, rec: SandboxRecord) -> None:
        """The sandbox's resource is gone (destroyed, or its create failed): remove what the
        provider keeps for it on this machine (keys ...)."""
        ...


@runtime_checkable
class ChangesProvider(Protocol):
    """``capabilities.changes``: what a sandbox changed (its writable root and its workspace),
    judged by ctime, and its writable root as an image layer."""

    async def changes(self, rec: SandboxRecord, since: float | None, under: str) -> dict[str, Any]:
        """``{"changes": [...], "truncated", "notes"}``: what changed at or under the absolute
        path ``under`` (at or after ``since``, a Unix time, when given), sorted by path."""
        ...

    async def export_changes(self, rec: SandboxRecord, dest: Path) -> dict[str, Any]:
        """Write the sandbox's writable root as an uncompressed OCI layer tar to ``dest``
        (whiteouts as ``.wh.`` entries, owners as the image sees them); its summary
        (``diff_id``, ``size``, ``entries``)."""
        ...


class Usage(TypedDict, total=False):
    """What a sandbox uses right now (each field only when the provider measures it)."""

    memory: int  # bytes
    cpu_seconds: float  # CPU time used so far
    pids: int  # processes (and threads) now


@runtime_checkable
class UsageProvider(Protocol):
    """``capabilities.usage``: measures a live sandbox's resource use, cheaply (the dashboard
    asks for every live sandbox at once)."""

    def usage(self, rec: SandboxRecord) -> Usage:
        """What ``rec`` uses now; an empty Usage when it cannot say."""
        ...


@runtime_checkable
class ExecUsersProvider(Protocol):
    """``capabilities.exec_users``: one run as another user of the sandbox (``exec --user``),
    resolved inside the sandbox when the run starts (a user it does not know fails that run,
    exit 126)."""

    def check_exec_user(self, rec: SandboxRecord, user: str) -> None:
        """Refuse (``invalid``, saying why and what to do) a sandbox whose runs cannot switch users,
        before the run is recorded; ``user`` is already checked in form."""
        ...


@runtime_checkable
class NodesProvider(Protocol):
    """``capabilities.nodes``: sandboxes live on the nodes of a cluster (``hutch cluster``)."""

    def bind_nodes(self, drained: set[str], on_node: Callable[[dict[str, Any]], None]) -> None:
        """The nodes drained before (from the store), and where to report a node's change of state."""
        ...

    async def claim(self) -> None:
        """This process serves as the cluster's gateway (``hutch serve``): ``conflict`` when
        another gateway already does."""
        ...

    async def cluster(self) -> dict[str, Any]:
        """The cluster as a whole: its head, placement, how many nodes in each state."""
        ...

    async def nodes(self) -> list[dict[str, Any]]:
        """Each node: name, state, drained, capacity, free room, sandboxes, version, error."""
        ...

    async def drain(self, name: str, drained: bool) -> dict[str, Any]:
        """Take no new sandboxes on ``name`` (or again, with ``drained`` false); its record after."""
        ...

    async def move(self, rec: SandboxRecord) -> dict[str, Any]:
        """``rec`` to another node, keeping its id: ``data`` (its new record data), ``from``,
        ``to``, ``left`` (why an old copy stayed, or None); an error saying why it stays."""
        ...


PROTOCOLS: dict[str, type] = {
    "network": NetworkProvider,
    "events": EventSource,
    "ranged_reads": RangedReads,
    "options": OptionsProvider,
    "transfer": TransferProvider,
    "workspace": WorkspaceProvider,
    "pause": PauseProvider,
    "watch": WatchingProvider,
    "ssh": SshProvider,
    "claims": ClaimsProvider,
    "changes": ChangesProvider,
    "ports": PortsProvider,
    "usage": UsageProvider,
    "exec_users": ExecUsersProvider,
    "pool": PoolProvider,
    "nodes": NodesProvider,
}
"""Each capability flag that promises an optional protocol, and that protocol."""
