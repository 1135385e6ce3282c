"""Refusals of options a provider does not have, with the fix that fits what was asked."""

from __future__ import annotations

from hutch.errors import InvalidError
from hutch.models import SandboxRecord, SandboxSpec
from hutch.netpolicy import NetworkPolicy
from hutch.provider import Capabilities, Provider, option_owners, options_provider, ssh_provider
from hutch.secretpolicy import check_bindings


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


def no_terminal(provider: Provider, rec: SandboxRecord, ref: str) -> InvalidError:
    """An interactive run (exec -i/-t, shell) on a provider without them: what to use
    instead (``hutch ssh`` where the provider has it)."""
    one = f"run one command with hutch exec {ref} -- CMD (its input with --stdin-file)"
    if provider.capabilities.ssh and ssh_provider(provider).ssh_endpoint(rec) is not None:
        one += f"; for a terminal, use hutch ssh {ref}"
    elif provider.capabilities.ssh:
        one += "; for a terminal, create the sandbox with --ssh and use hutch ssh SANDBOX"
    return InvalidError(f"the {rec.provider} provider has no interactive runs (live input, a terminal)", hint=one)


def check_options(provider: Provider, spec: SandboxSpec) -> None:
    """The spec's provider options: each one the provider declares, and values it takes
    (its ``validate_options``); refused with ``invalid`` before anything is made."""
    caps = provider.capabilities
    for key in sorted(spec.provider_options):
        if key not in caps.options:
            owners = option_owners(key)
            given = " / ".join(sorted(set(owners.values())))
            message = f"the {provider.name} provider has no {key!r} option" + (f" ({given})" if given else "")
            hint = f"drop {given}; it is for --provider {' or '.join(owners)}" if owners else "drop it"
            raise InvalidError(message, hint=hint)
    if spec.provider_options:
        options_provider(provider).validate_options(spec)


def runtime_capabilities(provider: Provider, spec: SandboxSpec) -> Capabilities:
    """What a sandbox of ``spec``'s runtime can do; ``invalid`` for a runtime the provider lacks."""
    caps = provider.capabilities.of_runtime(spec.runtime)
    if caps is None:
        names = provider.capabilities.runtime_names()
        raise InvalidError(
            f"the {provider.name} provider has no runtime {spec.runtime!r}",
            hint=f"use --runtime {' or '.join(names)}" if names else "drop --runtime",
        )
    return caps


def check_create(provider: Provider, spec: SandboxSpec) -> None:
    """Refuse (``invalid``, with a hint) what ``spec`` asks that ``provider`` does not do (with the
    runtime ``spec`` names: what that runtime does)."""
    caps = runtime_capabilities(provider, spec)
    who = f"the {provider.name} provider" if caps is provider.capabilities else f"the {spec.runtime} runtime"
    if spec.mounts and not caps.mounts:
        raise InvalidError(f"{who} does not support --mount", hint="drop --mount")
    if spec.limits.cpus is not None and "cpus" not in caps.limits:
        raise InvalidError(f"{who} cannot limit cpus", hint="drop --cpus")
    if spec.limits.disk is not None and "disk" not in caps.limits:
        raise InvalidError(f"{who} cannot cap what a sandbox writes", hint="drop --disk")
    if spec.network.mode != "none" and not caps.network:
        raise no_egress(provider, spec.network)
    if spec.secrets and not caps.secrets:
        raise InvalidError(f"{who} cannot hold sandbox secrets", hint="pass --secret on exec")
    if (spec.secret_hosts or spec.no_intercept) and not caps.placeholders:
        raise InvalidError(f"{who} cannot hold placeholder secrets", hint="drop --secret-host and --no-intercept")
    check_bindings(spec.secret_hosts, spec.secrets, spec.network)
    if spec.on_expire == "pause" and not caps.pause:
        raise InvalidError(f"{who} cannot pause sandboxes", hint="use --on-expire destroy")
    check_options(provider, spec)
    if spec.image and not caps.images:
        raise InvalidError(f"{who} does not boot images", hint="drop --image")
    if spec.user and not caps.users:
        raise InvalidError(f"{who} cannot choose the user inside", hint="drop --user")
    if spec.host_ca and not caps.host_ca:
        raise InvalidError(
            f"{who} cannot add this machine's CA bundle to a sandbox's trust store",
            hint="drop --host-ca (it is the local provider's)",
        )
