"""hutch key: a gateway's API keys (create, list, revoke, rotate).

Against the local daemon the caller is its owner (an admin); through a gateway
(``HUTCH_HOST``) the caller's key needs the admin scope. The secret is printed once, by
create and rotate, and never again."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import click

from hutch.cli.common import DURATION, SIZE, Ctx, count, emit, json_option, table

if TYPE_CHECKING:
    from hutch import wire

SCOPE_CHOICES = click.Choice(["read", "write", "approve", "metrics", "admin"])


def network_spec(value: str | None, flag: str) -> dict[str, Any] | None:
    """``none``, ``open``, or ``allowlist:HOST,HOST`` -> a network policy body."""
    if value is None:
        return None
    mode, _, hosts = value.partition(":")
    if mode not in ("none", "allowlist", "open") or (hosts and mode != "allowlist"):
        raise click.BadParameter(f"{value!r}: use none, open, or allowlist:HOST[,HOST...]", param_hint=flag)
    names = [h.strip() for h in hosts.split(",") if h.strip()]
    return {"mode": mode} | ({"allow_hosts": names} if names else {})


def _when(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if t else "-"


def _secret(obj: Ctx, r: wire.KeyCreated, verb: str) -> None:
    if obj.json:
        emit(r)
        return
    click.echo(r["key"])
    click.echo(f"{verb} key {r['name']} ({r['id']}); the key is shown only now: keep it (HUTCH_TOKEN_FILE)", err=True)


@click.group()
def key() -> None:
    """A gateway's API keys: who may use hutch serve --listen, with what scopes and limits."""


@key.command("create")
@click.option("--name", required=True, help="The key's name (unique among live keys; names its owner).")
@click.option("--ttl", type=DURATION, help="Expire after this long (30d, 12h): on the gateway's clock.")
@click.option(
    "--scope", "scopes", multiple=True, type=SCOPE_CHOICES, help="A scope (repeatable): read, write, approve, metrics, admin."
)
@click.option("--admin", is_flag=True, help="Add the admin scope: every owner's sandboxes, keys, the host's files.")
@click.option("--max-sandboxes", type=count(1, 100_000), help="Live sandboxes at once.")
@click.option("--max-memory", type=SIZE, help="Total memory limit of its live sandboxes (e.g. 8G).")
@click.option("--runs-per-minute", type=count(1, 1_000_000), help="Runs (exec, run) per minute.")
@click.option("--rps", type=click.FloatRange(0, 100_000, min_open=True), help="Requests per second (then HTTP 429).")
@click.option(
    "--network-default", metavar="POLICY", help="Network of its sandboxes that ask for none: none, open, allowlist:HOST,..."
)
@click.option("--network-ceiling", metavar="POLICY", help="The widest network its sandboxes may ask for (wider: policy error).")
@json_option
@click.pass_obj
def key_create(
    obj: Ctx,
    name: str,
    ttl: float | None,
    scopes: tuple[str, ...],
    admin: bool,
    max_sandboxes: int | None,
    max_memory: int | None,
    runs_per_minute: int | None,
    rps: float | None,
    network_default: str | None,
    network_ceiling: str | None,
) -> None:
    """Make a key and print it once (hk_...; field key with --json).

    Default scopes: read and write. The daemon keeps only its hash."""
    quotas = {"sandboxes": max_sandboxes, "memory": max_memory, "runs_per_minute": runs_per_minute, "rps": rps}
    req: dict[str, Any] = {"name": name, "ttl": ttl, "scopes": list(scopes), "admin": admin}
    req["quotas"] = {k: v for k, v in quotas.items() if v is not None}
    req["network_default"] = network_spec(network_default, "--network-default")
    req["network_ceiling"] = network_spec(network_ceiling, "--network-ceiling")
    _secret(obj, obj.client.create_key(req), "made")  # type: ignore[arg-type]


@key.command("list")
@json_option
@click.pass_obj
def key_list(obj: Ctx) -> None:
    """List keys (never their secrets), revoked and expired ones too."""
    keys = obj.client.keys()
    if obj.json:
        emit(keys)
        return
    rows = [
        [
            k["id"],
            k["name"],
            k["state"],
            ",".join(k["scopes"]),
            _when(k.get("expires_at")),
            " ".join(f"{q}={v}" for q, v in k["quotas"].items()) or "-",
        ]
        for k in keys
    ]
    table(rows, ["id", "name", "state", "scopes", "expires", "quotas"])


@key.command("revoke")
@click.argument("ref", metavar="KEY")
@json_option
@click.pass_obj
def key_revoke(obj: Ctx, ref: str) -> None:
    """Revoke KEY (an id or a name): refused from its next request on. Idempotent."""
    r = obj.client.revoke_key(ref)
    if obj.json:
        emit(r)
        return
    click.echo(f"revoked {r['name']} ({r['id']})" + ("" if r["changed"] else " (it already was)"))


@key.command("rotate")
@click.argument("ref", metavar="KEY")
@click.option("--ttl", type=DURATION, help="A new lifetime from now (default: the expiry it had).")
@json_option
@click.pass_obj
def key_rotate(obj: Ctx, ref: str, ttl: float | None) -> None:
    """Give KEY a new secret and print it once; the old secret stops working at once.

    The key keeps its id, scopes, limits and everything it owns."""
    _secret(obj, obj.client.rotate_key(ref, ttl), "rotated")
