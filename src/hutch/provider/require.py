"""One helper per optional protocol (each one call of ``_require``): the provider as that
protocol when its capabilities declare it, else ``invalid`` with a hint. The Service reaches optional behaviour only
through these (after checking the flag where the behaviour is optional to it too), never by
looking for a method."""

from __future__ import annotations

from typing import TypeVar

from hutch.errors import InternalError, InvalidError
from hutch.provider.core import Provider
from hutch.provider.optional import (
    PROTOCOLS,
    ChangesProvider,
    ClaimsProvider,
    EventSource,
    ExecUsersProvider,
    NetworkProvider,
    NodesProvider,
    OptionsProvider,
    PauseProvider,
    PoolProvider,
    PortsProvider,
    RangedReads,
    SshProvider,
    TransferProvider,
    UsageProvider,
    WatchingProvider,
    WorkspaceProvider,
)

P = TypeVar("P")


def _require(provider: Provider, flag: str, protocol: type[P], lacks: str, hint: str) -> P:
    """``provider`` as ``protocol`` when its capabilities declare ``flag``; else ``invalid``
    (the provider ``lacks`` it: ``hint``)."""
    if flag not in provider.capabilities.declared():
        raise InvalidError(f"the {provider.name} provider {lacks}", hint=hint)
    if not isinstance(provider, protocol):  # load_provider checks this: only a provider changed since
        name = protocol.__name__
        raise InternalError(f"the {provider.name} provider declares what a {name} does without being one")
    return provider


def missing(provider: object) -> list[str]:
    """What ``provider`` lacks: the core protocol, and each optional protocol its
    capabilities declare (empty when it keeps its word)."""
    if not isinstance(provider, Provider):
        return ["the core Provider protocol"]
    declared = provider.capabilities.declared()
    return [
        f"{proto.__name__} (declared by {flag})"
        for flag, proto in PROTOCOLS.items()
        if flag in declared and not isinstance(provider, proto)
    ]


def network_provider(provider: Provider) -> NetworkProvider:
    return _require(
        provider, "network", NetworkProvider, "has no egress policies", "use --provider local for an egress allowlist"
    )


def event_source(provider: Provider) -> EventSource:
    return _require(provider, "events", EventSource, "reports no events of its own", "nothing to record")


def ports_provider(provider: Provider) -> PortsProvider:
    return _require(provider, "ports", PortsProvider, "cannot expose a port of a sandbox", "use --provider local")


def ranged_reads(provider: Provider) -> RangedReads:
    return _require(provider, "ranged_reads", RangedReads, "cannot read a file at an offset", "read the whole file")


def options_provider(provider: Provider) -> OptionsProvider:
    return _require(provider, "options", OptionsProvider, "takes no provider options", "drop them")


def transfer_provider(provider: Provider) -> TransferProvider:
    """A provider that can push and pull (one with ``transfer``, or a full workspace provider)."""
    if not provider.capabilities.transfer:
        return workspace_provider(provider)
    return _require(provider, "transfer", TransferProvider, "cannot transfer workspaces", "use the local provider")


def workspace_provider(provider: Provider) -> WorkspaceProvider:
    lacks = "cannot transfer, snapshot or fork workspaces"
    return _require(provider, "workspace", WorkspaceProvider, lacks, "use the local provider")


def pause_provider(provider: Provider) -> PauseProvider:
    return _require(provider, "pause", PauseProvider, "cannot pause sandboxes", "destroy it instead")


def watching_provider(provider: Provider) -> WatchingProvider:
    return _require(provider, "watch", WatchingProvider, "does not follow its sandboxes", "hutch get checks a sandbox")


def ssh_provider(provider: Provider) -> SshProvider:
    return _require(provider, "ssh", SshProvider, "has no hutch ssh", "use hutch exec SANDBOX -- CMD")


def claims_provider(provider: Provider) -> ClaimsProvider:
    return _require(provider, "claims", ClaimsProvider, "keeps no claims", "use hutch list for its sandboxes")


def changes_provider(provider: Provider) -> ChangesProvider:
    lacks = "cannot say what a sandbox changed"
    return _require(provider, "changes", ChangesProvider, lacks, "use the local provider")


def usage_provider(provider: Provider) -> UsageProvider:
    return _require(provider, "usage", UsageProvider, "does not measure resource use", "nothing to show")


def pool_provider(provider: Provider) -> PoolProvider:
    return _require(provider, "pool", PoolProvider, "keeps no warm pool", "use --provider local")


def nodes_provider(provider: Provider) -> NodesProvider:
    return _require(
        provider, "nodes", NodesProvider, "has no cluster nodes", "start the gateway with hutch serve --cluster RAY_ADDRESS"
    )


def exec_users_provider(provider: Provider) -> ExecUsersProvider:
    lacks = "cannot run a command as another user of a sandbox"
    hint = "drop --user, or switch inside the command (runuser -u NAME -- CMD, where the sandbox runs as root)"
    return _require(provider, "exec_users", ExecUsersProvider, lacks, hint)
