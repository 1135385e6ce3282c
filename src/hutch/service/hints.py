"""Refusals of options a provider does not have, with the fix that fits what was asked."""

from __future__ import annotations

from hutch.errors import InvalidError
from hutch.models import SandboxRecord
from hutch.netpolicy import NetworkPolicy
from hutch.provider import Provider


def no_egress(provider: Provider, policy: NetworkPolicy) -> InvalidError:
    """A network option given to a provider without egress policies: name the options that
    were given, and what the provider's sandboxes have instead."""
    given = [
        flag
        for flag, on in (
            ("--allow-host", policy.allow_hosts),
            ("--allow-port", policy.ports),
            ("--allow-cidr", policy.cidrs),
            ("--deny-host", policy.deny_hosts),
        )
        if on
    ] or [f"--network {policy.mode}"]
    instead = (
        "its instances have the platform's own network, which hutch does not filter"
        if provider.capabilities.images
        else "its sandboxes have no network"
    )
    return InvalidError(
        f"the {provider.name} provider has no egress policies: {instead}",
        hint=f"drop {' and '.join(given)}, or use --provider local for an egress allowlist",
    )


def no_terminal(rec: SandboxRecord, ref: str) -> InvalidError:
    """An interactive run (exec -i/-t, shell) on a provider without them: what to use instead."""
    one = f"run one command with hutch exec {ref} -- CMD (its input with --stdin-file)"
    if rec.spec.provider_options.get("ssh"):
        terminal = f"for a terminal, use hutch ssh {ref}"
    else:
        terminal = "for a terminal, create the sandbox with --ssh and use hutch ssh SANDBOX"
    return InvalidError(
        f"the {rec.provider} provider has no interactive runs (live input, a terminal)", hint=f"{one}; {terminal}"
    )
