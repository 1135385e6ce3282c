"""create, list, get, destroy."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Literal, TypedDict, cast

import click

from hutch.cli.common import DURATION, EXIT_FAILED, SIZE, Ctx, SandboxCommand, count, emit, json_option, parse_pairs, table
from hutch.cli.network import describe_network, network_options, placeholder_options
from hutch.cli.specs import build_spec as build_spec
from hutch.errors import HutchError
from hutch.units import format_duration, format_size

if TYPE_CHECKING:
    from hutch import wire

    class DestroyFailed(TypedDict):
        """One sandbox of ``destroy A B`` (or ``--all``) that failed; the others go on."""

        sandbox: str
        name: str | None
        destroyed: Literal[False]
        error: wire.ErrorDetail


def create_options(f: Any) -> Any:
    opts = [
        click.option("--name", help="Unique name for the sandbox (usable wherever an id is)."),
        click.option("--memory", type=SIZE, help="Memory limit, e.g. 512M, 1G (default 1G)."),
        click.option("--pids", type=count(), metavar="N", help="Maximum number of processes (default 512)."),
        click.option("--cpus", type=float, help="CPU limit in cores, e.g. 0.5 (default: none)."),
        click.option(
            "--disk",
            type=SIZE,
            help="Cap on what the sandbox writes (its writable root and /workspace), e.g. 2G; past it writes fail "
            "with ENOSPC (local: hutch as root).",
        ),
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
        click.option("--provider", help="Where the sandbox lives: local, unikraft ... (default: local)."),
        click.option(
            "--image",
            metavar="REF",
            help="Image the sandbox starts from: local, one of hutch image list (default: local_image, else the host's /usr); "
            "unikraft, the OCI image to boot (default UKC_SANDBOX_IMAGE).",
        ),
        click.option(
            "--user",
            metavar="NAME|UID[:GID]",
            help="Who runs inside (local: root or any user of the image, its own uids; default: the image's USER).",
        ),
        click.option(
            "--host-ca",
            is_flag=True,
            help="Local: trust this machine's CA bundle inside (for TLS intercepted by a proxy; sets SSL_CERT_FILE ...).",
        ),
        click.option(
            "--runtime",
            type=click.Choice(["bwrap", "gvisor"]),
            help="Local: how the sandbox is isolated: bwrap (namespaces + seccomp on the host kernel, the default) or "
            "gvisor (a user-space kernel, runsc; stronger, slower). Default: the runtime setting.",
        ),
        click.option(
            "--unikraft-metro",
            "metro",
            metavar="METRO|URL",
            help="Unikraft Cloud metro (fra, dal, sin, was, sfo) or endpoint root URL (default UKC_METRO, then fra).",
        ),
        click.option(
            "--placement",
            type=click.Choice(["spread", "pack"]),
            help="On a cluster's gateway: spread (the emptiest node) or pack (the fullest that fits); "
            "default: the gateway's own (hutch serve --placement).",
        ),
        click.option(
            "--node",
            metavar="NODE",
            help="On a cluster's gateway: the node to place the sandbox on when it has room (else placement as usual); "
            "hutch cluster nodes lists them.",
        ),
        click.option(
            "--tenant",
            metavar="NAME",
            help="Tenant mode: a persistent line whose /workspace survives destroy (until hutch tenant delete).",
        ),
        click.option(
            "--manifest",
            is_flag=False,
            flag_value="",
            default=None,
            metavar="[FILE]",
            help="Take the sandbox's settings from this TOML manifest (alone: ./hutch.toml); flags given too win. "
            "See docs/manifest.md.",
        ),
        click.option(
            "--git-repo",
            metavar="URL[#REF]",
            help="The workspace starts as a clone of this repository at REF (a branch, tag or commit): a local path or "
            "file:// is cloned here and pushed in, any other URL inside the sandbox through its proxy.",
        ),
        click.option(
            "--git-depth",
            metavar="N|full",
            help="Commits of history the clone takes (default 1), or full.",
        ),
        click.option(
            "--git-secret",
            metavar="NAME",
            help="The --secret whose value is the clone's password or token (handed to git by a credential helper).",
        ),
        click.option("--git-max-size", type=SIZE, metavar="SIZE", help="The clone fails past this size (default 1G)."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return network_options(placeholder_options(f))


def lifetime_options(f: Any) -> Any:
    """Options of create only (``run`` destroys its sandbox itself)."""
    opts = [
        click.option("--ttl", type=DURATION, help="Expire this long after creation, e.g. 30m, 2h (default: never)."),
        click.option(
            "--idle-timeout",
            "idle",
            type=DURATION,
            help="Expire after this long without a run or API activity, e.g. 10m (a running background run is activity).",
        ),
        click.option(
            "--on-expire",
            type=click.Choice(["destroy", "pause"]),
            help="What expiry does: destroy (default) or pause the sandbox.",
        ),
        click.option(
            "--require-approval",
            "require_approval",
            multiple=True,
            metavar="ACTIONS",
            help="Actions a human must approve first, comma-separated (repeatable): destroy, network.change, "
            "push.delete, exec:PATTERN (a glob over the command).",
        ),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


@click.command()
@create_options
@lifetime_options
@click.option("--ssh", "use_ssh", is_flag=True, help="unikraft: a per-sandbox SSH key and a TLS service on 2222 (hutch ssh).")
@json_option
@click.pass_obj
def create(
    obj: Ctx,
    /,
    use_ssh: bool,
    ttl: float | None,
    idle: float | None,
    on_expire: str | None,
    require_approval: tuple[str, ...],
    **kw: Any,
) -> None:
    """Create a sandbox and print its id."""
    spec = build_spec(obj, **kw, ttl=ttl, idle=idle, on_expire=on_expire, require_approval=require_approval, ssh=use_ssh)
    rec = obj.client.create(spec)
    for host in spec.get("no_intercept", []) if spec.get("secret_hosts") else []:
        click.echo(f"hutch: --no-intercept {host}: placeholders sent to {host} over HTTPS cannot be checked", err=True)
    if obj.json:
        emit(rec)
    else:
        click.echo(rec["id"])


def _missing(credential: wire.CredentialStatus | None) -> bool:
    return credential is not None and credential["state"] == "missing"


def _age(ts: float) -> str:
    s = int(time.time() - ts)
    return f"{s}s" if s < 120 else f"{s // 60}m" if s < 7200 else f"{s // 3600}h"


@click.command("list")
@click.option(
    "--all",
    "-a",
    "include_all",
    is_flag=True,
    help="Include destroyed and failed sandboxes; with --provider unikraft, the account's unclaimed instances too.",
)
@click.option(
    "--label", "labels", multiple=True, metavar="K=V", help="Only sandboxes with this label (repeatable: all must match)."
)
@click.option(
    "--state",
    type=click.Choice(["creating", "running", "paused", "destroying", "destroyed", "failed", "lost"]),
    help="Only sandboxes in this state.",
)
@click.option("--provider", help="Only this provider's sandboxes; for unikraft, its claims and instances (claim-first).")
@click.option("--unikraft-metro", "metro", metavar="METRO|URL", help="Unikraft Cloud metro or endpoint URL (with --provider).")
@json_option
@click.pass_obj
def list_(
    obj: Ctx, include_all: bool, labels: tuple[str, ...], state: str | None, provider: str | None, metro: str | None
) -> None:
    """List sandboxes (live ones unless --all or --state; with --provider unikraft: claimed
    instances, including pending and missing ones)."""
    if provider == "unikraft":
        from hutch.cli.inventory import show_inventory

        show_inventory(obj, obj.client.inventory(provider, metro, include_all))
        return
    recs = obj.client.list(include_all, parse_pairs(labels, "label"), state)
    if provider:
        recs = [r for r in recs if r["provider"] == provider]
    if obj.json:
        emit(recs)
        return
    rows = [
        [
            r["id"],
            r.get("name") or "-",
            r["provider"] + (f" ({r['node']})" if r.get("node") else ""),
            r["state"] + (", credential missing" if _missing(r.get("credential")) else ""),
            format_size(int(r["spec"]["limits"]["memory"])),
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
        *([("node", str(r.get("node")))] if r.get("node") else []),
        ("state", r["state"]),
        ("created", time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["created_at"]))),
        ("memory", f"{format_size(int(lim['memory']))} ({enf.get('memory', 'not enforced')})"),
        ("pids", f"{lim['pids']} ({enf.get('pids', 'not enforced')})"),
        ("cpus", f"{lim['cpus'] if lim.get('cpus') else 'unlimited'}" + (f" ({enf['cpus']})" if "cpus" in enf else "")),
        ("workdir", r["spec"]["workdir"]),
        *(describe_network(r) if r["provider"] != "unikraft" else [("network", "the instance's own (not filtered by hutch)")]),
        *_lifetime_lines(r),
    ]
    image = r["spec"].get("image")
    if image:
        lines.append(("image", image))
    if r["spec"].get("provider_options", {}).get("ssh"):
        ssh = r.get("ssh")
        lines.append(("ssh", f"enabled ({ssh['fqdn']}:{ssh['port']}; hutch ssh {r['id']})" if ssh else "enabled"))
    if "seccomp" in enf:
        lines.append(("seccomp", enf["seccomp"]))
    for m in r["spec"].get("mounts", []):
        lines.append(("mount", f"{m['source']} -> {m['target']}{' (ro)' if m['readonly'] else ''}"))
    for k, v in r["spec"].get("labels", {}).items():
        lines.append(("label", f"{k}={v}"))
    credential, error = r.get("credential"), r.get("error")
    if credential:
        from hutch.credentials import describe

        lines.append(("credential", describe(credential)))
    if error:
        lines.append(("error", error))
    for k, v in lines:
        click.echo(f"{k + ':':<10} {v}")


def _lifetime_lines(r: wire.SandboxRecord) -> list[tuple[str, str]]:
    spec, lines = r["spec"], []
    if spec.get("parent"):
        lines.append(("parent", f"{spec['parent']} (workspace {spec.get('workspace') or 'rw'})"))
    expires, idle = r.get("expires_at"), spec.get("idle_timeout")  # records carry seconds
    if expires:
        lines.append(("expires", f"in {format_duration(max(0.0, expires - time.time()))} ({spec['on_expire']})"))
    if idle:
        lines.append(("idle", f"expires after {format_duration(float(idle))} without activity ({spec['on_expire']})"))
    if spec.get("require_approval"):
        lines.append(("approval", "required for " + ", ".join(spec["require_approval"])))
    return lines


@click.command(cls=SandboxCommand)
@click.argument("sandboxes", nargs=-1)
@click.option("--all", "-a", "destroy_all", is_flag=True, help="Destroy every live (and lost) sandbox.")
@click.option("--approval", metavar="ID", help="An approved request (apr_...) when the sandbox requires approval to destroy.")
@json_option
@click.pass_obj
def destroy(obj: Ctx, sandboxes: tuple[str, ...], destroy_all: bool, approval: str | None) -> None:
    """Destroy sandboxes and their sub-agents (idempotent: already gone is success).

    Each sandbox is tried even when another fails (one that needs a human's approval, say);
    every outcome is reported, and the exit code is 1 if any failed.
    """
    if not sandboxes and not destroy_all:
        raise click.UsageError("give one or more sandboxes, or --all")
    names: dict[str, str | None] = dict.fromkeys(sandboxes)
    results: list[wire.DestroyResult | DestroyFailed]
    if destroy_all:
        names |= {r["id"]: r.get("name") for r in obj.client.list()}
    if len(names) == 1 and not destroy_all:  # one sandbox: its failure is the command's error document
        results = [obj.client.destroy(sandboxes[0], approval)]
    else:
        results = [_destroy_one(obj, ref, name, approval) for ref, name in names.items()]
    failed = [r for r in results if "error" in r]
    if obj.json:
        emit(results)
    else:
        for r in results:
            if "error" in r:
                err = cast("DestroyFailed", r)["error"]
                click.secho(f"hutch: {r['sandbox']}: {err['kind']}: {err['message']}", fg="red", err=True)
                if err.get("hint"):
                    click.echo(f"hint: {err['hint']}", err=True)
            else:
                click.echo(f"{r['sandbox']}: {r['message']}")
        if failed:
            click.echo(f"hutch: {len(results) - len(failed)} of {len(results)} done, {len(failed)} failed", err=True)
    if failed:
        raise SystemExit(EXIT_FAILED)


def _destroy_one(obj: Ctx, ref: str, name: str | None, approval: str | None) -> wire.DestroyResult | DestroyFailed:
    """One sandbox's outcome; a failure is reported in it (``destroyed: false`` and ``error``),
    not raised, so that the others are still tried."""
    try:
        return obj.client.destroy(ref, approval)
    except HutchError as exc:
        return {"sandbox": ref, "name": name, "destroyed": False, "error": exc.to_dict()["error"]}
