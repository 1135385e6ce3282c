"""status, cleanup, and the Crabbox-style aliases warmup (= create) and stop (= destroy)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from hutch.cli.common import DURATION, Ctx, emit, json_option, table
from hutch.cli.sandbox import create, destroy

if TYPE_CHECKING:
    from hutch import wire


def show_inventory(obj: Ctx, inv: wire.Inventory) -> None:
    if obj.json:
        emit(inv)
        return
    rows = [
        [
            i.get("sandbox") or "-",
            i.get("name") or "-",
            i.get("uuid") or "-",
            i.get("claim_state", "unclaimed"),
            i.get("instance_state") or "-",
        ]
        for i in inv["items"]
    ]
    table(rows, ["sandbox", "instance", "uuid", "claim", "state"])


@click.command()
@click.argument("sandbox")
@click.option("--wait", is_flag=True, help="Poll until it runs; fail early if it failed, stopped or was destroyed.")
@click.option("--timeout", type=DURATION, default="5m", show_default=True, help="How long to wait with --wait.")
@json_option
@click.pass_obj
def status(obj: Ctx, sandbox: str, wait: bool, timeout: float) -> None:
    """Show a sandbox's state (and its claim, for providers that keep claims)."""
    out = obj.client.status(sandbox, wait, timeout)
    if obj.json:
        emit(out)
        return
    click.echo(f"{out['sandbox']}: {out['state']}" + (f" (instance {out['instance']})" if "instance" in out else ""))
    c = out.get("claim")
    if c:
        click.echo(f"claim {c['id']}: {c['state']} {c['name']} {c.get('resource_id') or ''}".rstrip())


@click.command()
@click.option("--provider", help="Only this provider's claims (default: every provider with claims).")
@click.option("--unikraft-metro", "metro", metavar="METRO|URL", help="Unikraft Cloud metro or endpoint URL.")
@click.option("--dry-run", is_flag=True, help="Say what would be done; change nothing.")
@click.option("--keep", multiple=True, metavar="SANDBOX|CLAIM", help="Leave this one alone (repeatable); started deletes resume.")
@click.option("--forget-missing", is_flag=True, help="Drop claims whose instance the provider already deleted itself.")
@json_option
@click.pass_obj
def cleanup(
    obj: Ctx, provider: str | None, metro: str | None, dry_run: bool, keep: tuple[str, ...], forget_missing: bool
) -> None:
    """Destroy abandoned or expired claimed resources, resume interrupted deletes and pending
    creates. Never touches unclaimed instances."""
    out = obj.client.cleanup(provider=provider, metro=metro, dry_run=dry_run, keep=list(keep), forget_missing=forget_missing)
    if obj.json:
        emit(out)
    else:
        for rep in out["providers"]:
            for a in rep["actions"]:
                error = a.get("error")
                what = a.get("result") or (error["message"] if error else "")
                click.echo(f"{rep['provider']}: {a['name']} ({a['state']}): {a['action']}" + (f": {what}" if what else ""))
        if not any(rep["actions"] for rep in out["providers"]):
            click.echo("nothing to clean up")
    raise SystemExit(0 if out["ok"] else 1)


warmup = click.Command(
    "warmup",
    callback=create.callback,
    params=create.params,
    help="Alias of hutch create (for Crabbox users).",
)
stop = click.Command(
    "stop",
    callback=destroy.callback,
    params=destroy.params,
    help="Alias of hutch destroy (for Crabbox users).",
)
