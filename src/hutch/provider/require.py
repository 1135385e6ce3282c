"""One helper per optional protocol: the provider as that protocol when its capabilities
declare it, else ``invalid`` with a hint. The Service reaches optional behaviour only
through these (after checking the flag where the behaviour is optional to it too), never by
looking for a method."""

from __future__ import annotations

from hutch.errors import HutchError, InternalError, InvalidError
from hutch.provider.core import Provider
from hutch.provider.optional import (
    PROTOCOLS,
    ClaimsProvider,
    EventSource,
    NetworkProvider,
    OptionsProvider,
    PauseProvider,
    RangedReads,
    SshProvider,
    TransferProvider,
    WatchingProvider,
    WorkspaceProvider,
)


def _refusal(provider: Provider, declared: bool, protocol: str, message: str, hint: str) -> HutchError:
    if declared:  # load_provider checks this: only a provider changed since it was loaded
        return InternalError(f"the {provider.name} provider declares what a {protocol} does without being one")
    return InvalidError(f"the {provider.name} provider {message}", hint=hint)


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
    declared = provider.capabilities.network
    if declared and isinstance(provider, NetworkProvider):
        return provider
    hint = "use --provider local for an egress allowlist"
    raise _refusal(provider, declared, "NetworkProvider", "has no egress policies", hint)


def event_source(provider: Provider) -> EventSource:
    declared = provider.capabilities.events
    if declared and isinstance(provider, EventSource):
        return provider
    raise _refusal(provider, declared, "EventSource", "reports no events of its own", "nothing to record")


def ranged_reads(provider: Provider) -> RangedReads:
    declared = provider.capabilities.ranged_reads
    if declared and isinstance(provider, RangedReads):
        return provider
    raise _refusal(provider, declared, "RangedReads", "cannot read a file at an offset", "read the whole file")


def options_provider(provider: Provider) -> OptionsProvider:
    declared = bool(provider.capabilities.options)
    if declared and isinstance(provider, OptionsProvider):
        return provider
    raise _refusal(provider, declared, "OptionsProvider", "takes no provider options", "drop them")


def transfer_provider(provider: Provider) -> TransferProvider:
    """A provider that can push and pull (one with ``transfer``, or a full workspace provider)."""
    if not provider.capabilities.transfer:
        return workspace_provider(provider)
    if isinstance(provider, TransferProvider):
        return provider
    raise _refusal(provider, True, "TransferProvider", "cannot transfer workspaces", "use the local provider")


def workspace_provider(provider: Provider) -> WorkspaceProvider:
    declared = provider.capabilities.workspace
    if declared and isinstance(provider, WorkspaceProvider):
        return provider
    message = "cannot transfer, snapshot or fork workspaces"
    raise _refusal(provider, declared, "WorkspaceProvider", message, "use the local provider")


def pause_provider(provider: Provider) -> PauseProvider:
    declared = provider.capabilities.pause
    if declared and isinstance(provider, PauseProvider):
        return provider
    raise _refusal(provider, declared, "PauseProvider", "cannot pause sandboxes", "destroy it instead")


def watching_provider(provider: Provider) -> WatchingProvider:
    declared = provider.capabilities.watch
    if declared and isinstance(provider, WatchingProvider):
        return provider
    raise _refusal(provider, declared, "WatchingProvider", "does not follow its sandboxes", "hutch get checks a sandbox")


def ssh_provider(provider: Provider) -> SshProvider:
    declared = provider.capabilities.ssh
    if declared and isinstance(provider, SshProvider):
        return provider
    raise _refusal(provider, declared, "SshProvider", "has no hutch ssh", "use hutch exec SANDBOX -- CMD")


def claims_provider(provider: Provider) -> ClaimsProvider:
    declared = provider.capabilities.claims
    if declared and isinstance(provider, ClaimsProvider):
        return provider
    raise _refusal(provider, declared, "ClaimsProvider", "keeps no claims", "use hutch list for its sandboxes")
