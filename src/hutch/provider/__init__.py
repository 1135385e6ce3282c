"""The provider contract: the core :class:`Provider` protocol, the optional protocols a
provider declares through its :class:`Capabilities`, the helpers the Service reaches them
by, and the registry.

- :mod:`hutch.provider.core`: ``Provider`` (with its run records), ``ExecSpec``,
  ``Capabilities``, ``CheckResult``, ``Interactive``;
- :mod:`hutch.provider.optional`: the optional protocols (network, events, ranged reads,
  options, transfer, workspace, pause, watch, ssh, claims, changes) and the values they speak in;
- :mod:`hutch.provider.require`: one helper per optional protocol (``pause_provider`` ...);
- :mod:`hutch.provider.registry`: ``load_provider``, ``provider_names``.

docs/providers.md is the contract in prose, with the checklist for a new provider.
"""

from hutch.provider.core import (
    Capabilities,
    CheckResult,
    ExecSpec,
    Interactive,
    OnOutput,
    OnStart,
    Provider,
    RunRecords,
)
from hutch.provider.optional import (
    PROTOCOLS,
    AccountScope,
    ChangesProvider,
    ClaimsProvider,
    CopyReport,
    CreatePlan,
    Death,
    EventSource,
    Instance,
    NetworkProvider,
    OnEvent,
    OnGone,
    OptionsProvider,
    PauseProvider,
    PortsProvider,
    RangedReads,
    SshProvider,
    StepHook,
    TokenSource,
    TransferProvider,
    WatchingProvider,
    WorkspaceProvider,
)
from hutch.provider.registry import BUILTINS, load_provider, option_owners, provider_names
from hutch.provider.require import (
    changes_provider,
    claims_provider,
    event_source,
    missing,
    network_provider,
    options_provider,
    pause_provider,
    ports_provider,
    ranged_reads,
    ssh_provider,
    transfer_provider,
    watching_provider,
    workspace_provider,
)

__all__ = [
    "BUILTINS",
    "PROTOCOLS",
    "AccountScope",
    "Capabilities",
    "ChangesProvider",
    "CheckResult",
    "ClaimsProvider",
    "CopyReport",
    "CreatePlan",
    "Death",
    "EventSource",
    "ExecSpec",
    "Instance",
    "Interactive",
    "NetworkProvider",
    "OnEvent",
    "OnGone",
    "OnOutput",
    "OnStart",
    "OptionsProvider",
    "PauseProvider",
    "PortsProvider",
    "Provider",
    "RangedReads",
    "RunRecords",
    "SshProvider",
    "StepHook",
    "TokenSource",
    "TransferProvider",
    "WatchingProvider",
    "WorkspaceProvider",
    "changes_provider",
    "claims_provider",
    "event_source",
    "load_provider",
    "missing",
    "network_provider",
    "option_owners",
    "options_provider",
    "pause_provider",
    "ports_provider",
    "provider_names",
    "ranged_reads",
    "ssh_provider",
    "transfer_provider",
    "watching_provider",
    "workspace_provider",
]
