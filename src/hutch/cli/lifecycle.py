"""pause, resume, keepalive, subagent, label."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import click

from hutch.cli.common import DURATION, SIZE, Ctx, SandboxCommand, count, emit, json_option, parse_pairs
from hutch.units import format_duration
from hutch.wire.build import subagent_request

if TYPE_CHECKING:
    from hutch import wire


def _say(obj: Ctx, out: wire.StateChange) -> None:
    if obj.json:
        emit(out)
    else:
        click.echo(f"{out['sandbox']}: {out['message']}")


@click.command(cls=SandboxCommand)
@click.argument("sandbox")
@json_option
@click.pass_obj
def pause(obj: Ctx, sandbox: str) -> None:
    """Freeze every process of a sandbox (cgroup freezer, else SIGSTOP); state becomes paused.

    Commands, file calls and shells into a paused sandbox fail with kind conflict until
    hutch resume. Its --idle-timeout does not run while paused; its --ttl does.
    """
    _say(obj, obj.client.pause(sandbox))


@click.command(cls=SandboxCommand)
@click.argument("sandbox")
@json_option
@click.pass_obj
def resume(obj: Ctx, sandbox: str) -> None:
    """Thaw a paused sandbox: its processes go on where they stopped."""
    _say(obj, obj.client.resume(sandbox))


def _when(ts: float | None) -> str:
    return "never" if ts is None else f"in {format_duration(max(0.0, ts - time.time()))}"


@click.command(cls=SandboxCommand)
@click.argument("sandbox")
@click.option("--ttl", type=DURATION, help="Also set a new absolute deadline this long from now, e.g. 30m.")
@json_option
@click.pass_obj
def keepalive(obj: Ctx, sandbox: str, ttl: float | None) -> None:
    """Count now as activity (resets the --idle-timeout timer); with --ttl, extend the lifetime."""
    out = obj.client.keepalive(sandbox, ttl)
    if obj.json:
        emit(out)
        return
    click.echo(
        f"{out['sandbox']}: expires {_when(out['expires_at'])}, idle expiry {_when(out['idle_expires_at'])} ({out['on_expire']})"
    )


@click.command(cls=SandboxCommand)
@click.argument("parent")
@click.option(
    "--workspace",
    type=click.Choice(["rw", "ro"]),
    help="How the child sees the parent's /workspace (default rw; ro below a read-only parent).",
)
@click.option("--name", help="Unique name for the sub-agent's sandbox.")
@click.option("--memory", type=SIZE, help="Memory limit of the child, e.g. 512M (default 1G).")
@click.option("--pids", type=count(), metavar="N", help="Maximum number of processes of the child (default 512).")
@click.option("--cpus", type=float, help="CPU limit of the child in cores (default: none).")
@click.option("--env", "-e", "env", multiple=True, metavar="K=V", help="Environment variable of the child (repeatable).")
@click.option("--label", "labels", multiple=True, metavar="K=V", help="Label of the child (repeatable).")
@click.option("--ttl", type=DURATION, help="Expire the child this long after creation, e.g. 30m.")
@click.option(
    "--network", type=click.Choice(["none", "allowlist", "open"]), help="The child's egress mode (default: the parent's policy)."
)
@click.option("--allow-host", "allow_hosts", multiple=True, metavar="HOST", help="Allow a host (within the parent's).")
@click.option("--allow-port", "allow_ports", multiple=True, type=int, metavar="PORT", help="Allow a port (within the parent's).")
@click.option("--allow-cidr", "allow_cidrs", multiple=True, metavar="CIDR", help="Allow addresses (within the parent's).")
@json_option
@click.pass_obj
def subagent(
    obj: Ctx,
    parent: str,
    workspace: str | None,
    name: str | None,
    memory: int | None,
    pids: int | None,
    cpus: float | None,
    env: tuple[str, ...],
    labels: tuple[str, ...],
    ttl: float | None,
    network: str | None,
    allow_hosts: tuple[str, ...],
    allow_ports: tuple[int, ...],
    allow_cidrs: tuple[str, ...],
) -> None:
    """Create a child sandbox sharing PARENT's /workspace, with its own processes and limits.

    The child's network is the parent's unless given, and never wider than it; it keeps
    the parent's approval requirements; sub-agents nest at most
    subagent_depth levels (default 2). Destroying the parent destroys its children.
    """
    req = subagent_request(
        obj.settings,
        name=name,
        workspace=workspace,
        memory=memory,
        pids=pids,
        cpus=cpus,
        env=parse_pairs(env, "env", from_env=True),
        labels=parse_pairs(labels, "label"),
        ttl=ttl,
        network=network,
        allow_hosts=allow_hosts,
        allow_ports=allow_ports,
        allow_cidrs=allow_cidrs,
    )
    rec = obj.client.subagent(parent, req)
    emit(rec) if obj.json else click.echo(rec["id"])


@click.command(cls=SandboxCommand)
@click.argument("sandbox")
@click.argument("changes", nargs=-1, required=True, metavar="K=V... K-...")
@json_option
@click.pass_obj
def label(obj: Ctx, sandbox: str, changes: tuple[str, ...]) -> None:
    """Set labels (K=V) and remove them (K-) on a sandbox."""
    remove = [c[:-1] for c in changes if c.endswith("-") and "=" not in c]
    rec = obj.client.label(sandbox, parse_pairs(tuple(c for c in changes if c[:-1] not in remove), "label"), remove)
    if obj.json:
        emit(rec)
        return
    labels = rec["spec"]["labels"]
    click.echo(f"{rec['id']}: " + (", ".join(f"{k}={v}" for k, v in sorted(labels.items())) or "no labels"))
