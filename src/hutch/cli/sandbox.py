"""create, list, get, destroy."""

from __future__ import annotations

import os
import time
from typing import Any

import click

from hutch.cli.common import Ctx, SandboxCommand, emit, json_option, parse_pairs, table
from hutch.cli.network import describe_network, network_options, network_spec, resolve_secrets
from hutch.errors import InvalidError
from hutch.units import format_size


def create_options(f: Any) -> Any:
    opts = [
        click.option("--name", help="Unique name for the sandbox (usable wherever an id is)."),
        click.option("--memory", help="Memory limit, e.g. 512M, 1G (default 1G)."),
        click.option("--pids", type=int, help="Maximum number of processes (default 512)."),
        click.option("--cpus", type=float, help="CPU limit in cores, e.g. 0.5 (default: none)."),
        click.option(
            "--env",
            "-e",
            "env",
            multiple=True,
            metavar="K=V",
            help="Sandbox environment variable (repeatable); a bare K copies it from this environment.",
        ),
        click.option(
            "--mount",
            "mounts",
            multiple=True,
            metavar="HOST:SANDBOX[:ro]",
            help="Bind a host path into the sandbox (repeatable).",
        ),
        click.option("--label", "labels", multiple=True, metavar="K=V", help="Label (repeatable)."),
        click.option("--workdir", help="Default working directory for commands (default /workspace)."),
        click.option("--provider", help="Where the sandbox lives (default: local)."),
        click.option(
            "--tenant",
            metavar="NAME",
            help="Tenant mode: a persistent line whose /workspace survives destroy (until hutch tenant delete).",
        ),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return network_options(f)


def build_spec(
    obj: Ctx,
    name: str | None,
    memory: str | None,
    pids: int | None,
    cpus: float | None,
    env: tuple[str, ...],
    mounts: tuple[str, ...],
    labels: tuple[str, ...],
    workdir: str | None,
    provider: str | None,
    network: str | None = None,
    allow_hosts: tuple[str, ...] = (),
    allow_ports: tuple[int, ...] = (),
    allow_cidrs: tuple[str, ...] = (),
    secrets: tuple[str, ...] = (),
    tenant: str | None = None,
) -> dict[str, Any]:
    s = obj.settings
    spec: dict[str, Any] = {
        "provider": provider or s.provider,
        "limits": {
            "memory": memory or s.memory,
            "pids": pids if pids is not None else s.pids,
            "cpus": cpus if cpus is not None else s.cpus,
        },
        "env": parse_pairs(env, "env", from_env=True),
        "labels": parse_pairs(labels, "label"),
        "mounts": [],
        "network": network_spec(network, allow_hosts, allow_ports, allow_cidrs),
        "secrets": resolve_secrets(secrets),
    }
    for m in mounts:
        parts = m.split(":")
        if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] not in ("ro", "rw")) or not parts[0] or not parts[1]:
            raise InvalidError(f"invalid --mount {m!r}", hint="use HOST:SANDBOX or HOST:SANDBOX:ro")
        source = os.path.abspath(os.path.expanduser(parts[0]))
        spec["mounts"].append({"source": source, "target": parts[1], "readonly": len(parts) == 3 and parts[2] == "ro"})
    if name:
        spec["name"] = name
    if workdir:
        spec["workdir"] = workdir
    if tenant:
        spec["tenant"] = tenant
    return spec


@click.command()
@create_options
@json_option
@click.pass_obj
def create(obj: Ctx, /, **kw: Any) -> None:
    """Create a sandbox and print its id."""
    rec = obj.client.create(build_spec(obj, **kw))
    if obj.json:
        emit(rec)
    else:
        click.echo(rec["id"])


def _age(ts: float) -> str:
    s = int(time.time() - ts)
    return f"{s}s" if s < 120 else f"{s // 60}m" if s < 7200 else f"{s // 3600}h"


@click.command("list")
@click.option("--all", "-a", "include_all", is_flag=True, help="Include destroyed and failed sandboxes.")
@json_option
@click.pass_obj
def list_(obj: Ctx, include_all: bool) -> None:
    """List sandboxes."""
    recs = obj.client.list(include_all)
    if obj.json:
        emit(recs)
        return
    rows = [
        [
            r["id"],
            r.get("name") or "-",
            r["provider"],
            r["state"],
            format_size(r["spec"]["limits"]["memory"]),
            _age(r["created_at"]),
        ]
        for r in recs
    ]
    table(rows, ["id", "name", "provider", "state", "memory", "age"])


@click.command(cls=SandboxCommand)
@click.argument("sandbox")
@json_option
@click.pass_obj
def get(obj: Ctx, sandbox: str) -> None:
    """Show one sandbox: state, limits and how they are enforced."""
    r = obj.client.get(sandbox)
    if obj.json:
        emit(r)
        return
    lim = r["spec"]["limits"]
    enf = r.get("enforcement", {})
    lines = [
        ("id", r["id"]),
        ("name", r.get("name") or "-"),
        ("provider", r["provider"]),
        ("state", r["state"]),
        ("created", time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["created_at"]))),
        ("memory", f"{format_size(lim['memory'])} ({enf.get('memory', 'not enforced')})"),
        ("pids", f"{lim['pids']} ({enf.get('pids', 'not enforced')})"),
        ("cpus", f"{lim['cpus'] if lim.get('cpus') else 'unlimited'}" + (f" ({enf['cpus']})" if "cpus" in enf else "")),
        ("workdir", r["spec"]["workdir"]),
        *describe_network(r),
    ]
    if "seccomp" in enf:
        lines.append(("seccomp", enf["seccomp"]))
    for m in r["spec"].get("mounts", []):
        lines.append(("mount", f"{m['source']} -> {m['target']}{' (ro)' if m['readonly'] else ''}"))
    for k, v in r["spec"].get("labels", {}).items():
        lines.append(("label", f"{k}={v}"))
    if r.get("error"):
        lines.append(("error", r["error"]))
    for k, v in lines:
        click.echo(f"{k + ':':<10} {v}")


@click.command(cls=SandboxCommand)
@click.argument("sandboxes", nargs=-1)
@click.option("--all", "destroy_all", is_flag=True, help="Destroy every live sandbox.")
@json_option
@click.pass_obj
def destroy(obj: Ctx, sandboxes: tuple[str, ...], destroy_all: bool) -> None:
    """Destroy sandboxes (idempotent: already gone is success)."""
    if not sandboxes and not destroy_all:
        raise click.UsageError("give one or more sandboxes, or --all")
    refs = list(sandboxes) + ([r["id"] for r in obj.client.list()] if destroy_all else [])
    results = [obj.client.destroy(ref) for ref in refs]
    if obj.json:
        emit(results)
        return
    for r in results:
        click.echo(f"{r['sandbox']}: {r['message']}")
