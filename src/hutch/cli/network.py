"""Network and secret options (create, exec, run) and ``hutch policy``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from hutch.cli.common import Ctx, emit, json_option
from hutch.wire.build import policy_change

if TYPE_CHECKING:
    from hutch import wire

MODES = ("none", "allowlist", "open")
F = TypeVar("F", bound=Callable[..., Any])


def secret_option(help_text: str) -> Callable[[F], F]:
    return click.option(
        "--secret",
        "secrets",
        multiple=True,
        metavar="NAME[=env:VAR|file:PATH]",
        help=help_text,
    )


def placeholder_options(f: Any) -> Any:
    """Placeholder secrets (create, run, warmup): the sandbox holds a placeholder, the proxy the value."""
    opts = [
        click.option(
            "--secret-host",
            "secret_hosts",
            multiple=True,
            metavar="NAME=HOST",
            help="Give the sandbox a placeholder for secret NAME; hutch's proxy puts the value in requests to HOST "
            "(--allow-host grammar, an allowed host; repeatable).",
        ),
        click.option(
            "--secret-body",
            "secret_body",
            multiple=True,
            metavar="NAME",
            help="Also replace NAME's placeholder in request bodies to its hosts (default: headers and URL only).",
        ),
        click.option(
            "--no-intercept",
            "no_intercept",
            multiple=True,
            metavar="HOST",
            help="With placeholders: relay HTTPS to HOST unopened (placeholders sent to it cannot be checked).",
        ),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def network_options(f: Any) -> Any:
    opts = [
        click.option(
            "--network",
            type=click.Choice(MODES),
            help="none (default: loopback only), allowlist (named hosts via hutch's proxy) or open (public internet).",
        ),
        click.option(
            "--allow-host", "allow_hosts", multiple=True, metavar="HOST", help="Allow a host: example.com or '*.example.org'."
        ),
        click.option(
            "--allow-port", "allow_ports", multiple=True, type=int, metavar="PORT", help="Allow a port (default 80 and 443)."
        ),
        click.option("--allow-cidr", "allow_cidrs", multiple=True, metavar="CIDR", help="Allow addresses, e.g. 203.0.113.0/24."),
        secret_option("Secret for every run: from $NAME, env:VAR or file:PATH; never stored, redacted from output."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def resolve_secrets(items: tuple[str, ...]) -> dict[str, str]:
    """NAME (from $NAME), NAME=env:VAR or NAME=file:PATH, read here, on the caller's side."""
    from hutch.manifest import refs

    return refs.resolve(refs.parse(items))


def describe_network(r: wire.SandboxRecord) -> list[tuple[str, str]]:
    net: wire.NetworkPolicy = r["spec"].get("network") or {"mode": "none"}
    mode = net.get("mode", "none")
    lines = [("network", {"none": "none (loopback only)", "allowlist": "allowlist", "open": "open (public)"}[mode])]
    if mode != "none":
        ports = net.get("ports") or ([80, 443] if mode == "allowlist" else [])
        lines.append(("ports", ", ".join(map(str, ports)) or "any"))
    for h in net.get("allow_hosts", []):
        lines.append(("allow", h))
    for h in net.get("deny_hosts", []):
        lines.append(("deny", h))
    for c in net.get("cidrs", []):
        lines.append(("cidr", c))
    egress = r.get("egress")
    if egress:
        lines.append(("egress", f"{egress['allowed']} allowed, {egress['denied']} denied"))
    bound = r["spec"].get("secret_hosts") or {}
    for name in r["spec"].get("secret_names", []):
        lines.append(("secret", f"{name} (a placeholder, its value sent to {', '.join(bound[name])})" if name in bound else name))
    for host in r["spec"].get("no_intercept") or []:
        lines.append(("no-intercept", f"{host} (HTTPS relayed unopened: placeholders sent to it are not checked)"))
    return lines


@click.command()
@click.argument("sandbox")
@click.option("--network", type=click.Choice(MODES), help="Switch the mode (none closes the proxy).")
@click.option("--allow-host", "allow_hosts", multiple=True, metavar="HOST", help="Allow a host (or '*.suffix').")
@click.option("--deny-host", "deny_hosts", multiple=True, metavar="HOST", help="Deny a host, even in open mode.")
@click.option("--remove-host", "remove_hosts", multiple=True, metavar="HOST", help="Drop a host from both lists.")
@click.option("--allow-port", "ports", multiple=True, type=int, metavar="PORT", help="Allow a port.")
@click.option("--allow-cidr", "cidrs", multiple=True, metavar="CIDR", help="Allow an address range (private ones too).")
@click.option("--remove-port", "remove_ports", multiple=True, type=int, metavar="PORT", help="No longer allow a port.")
@click.option("--remove-cidr", "remove_cidrs", multiple=True, metavar="CIDR", help="No longer allow an address range.")
@click.option(
    "--approval", metavar="ID", help="An approved request (apr_...) when the sandbox requires approval for network.change."
)
@json_option
@click.pass_obj
def policy(
    obj: Ctx,
    /,
    sandbox: str,
    network: str | None,
    approval: str | None,
    allow_hosts: tuple[str, ...],
    deny_hosts: tuple[str, ...],
    remove_hosts: tuple[str, ...],
    ports: tuple[int, ...],
    cidrs: tuple[str, ...],
    remove_ports: tuple[int, ...],
    remove_cidrs: tuple[str, ...],
) -> None:
    """Show or change a sandbox's network policy, live: new connections follow it at once.

    Without options, prints the policy. Every change is recorded as a policy_changed event.
    """
    body = policy_change(network, allow_hosts, deny_hosts, remove_hosts, ports, cidrs, remove_ports, remove_cidrs)
    rec = obj.client.policy(sandbox, body, approval) if body else obj.client.get(sandbox)
    if obj.json:
        emit({"sandbox": rec["id"], "network": rec["spec"]["network"], "egress": rec.get("egress")})
        return
    for k, v in describe_network(rec):
        click.echo(f"{k + ':':<10} {v}")
