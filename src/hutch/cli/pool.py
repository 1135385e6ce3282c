"""pool status|set|drain: the warm pool of started sandboxes handed out on create."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from hutch.cli.common import Ctx, emit, json_option, table

if TYPE_CHECKING:
    from hutch import wire


def _show(obj: Ctx, status: wire.PoolStatus) -> None:
    if obj.json:
        emit(status)
        return
    rows = [
        [
            p["shape"],
            p["provider"],
            f"{p['ready']}/{p['target']}" + (f" (of {p['size']})" if p["target"] != p["size"] else ""),
            str(p["starting"]),
            f"{p['memory'] >> 20} MiB",
            p["source"],
        ]
        for p in status["pools"]
    ]
    if rows:
        table(rows, ["shape", "provider", "ready", "starting", "memory", "size from"])
    for p in status["pools"]:
        if p["capped"]:
            click.echo(f"{p['shape']}: {p['capped']}", err=True)
    state = "refilling" if status["refilling"] else "not refilled by this service"
    click.echo(f"{status['members']} members, {status['memory'] >> 20} MiB; {state}")


@click.group()
def pool() -> None:
    """The warm pool: sandboxes started ahead of time, handed out on create.

    A create that needs nothing but what can be set after start (name, labels, env,
    secrets, limits, network, TTLs) takes a member; anything else (mounts, a tenant, a
    sub-agent, another image) is created cold. Members are not sandboxes: hutch list does
    not show them; hutch doctor and hutch pool status count them. The default pool's size
    is the pool_size setting (HUTCH_POOL_SIZE; 0 turns it off).
    """


@pool.command("status")
@json_option
@click.pass_obj
def status_(obj: Ctx) -> None:
    """Each shape's members: ready, starting, their memory, and any cap."""
    _show(obj, obj.client.pool_status())


@pool.command("set")
@click.argument("image", required=False)
@click.option("--size", type=click.IntRange(0, 1000), required=True, help="Members to keep started (0 empties the pool).")
@json_option
@click.pass_obj
def set_(obj: Ctx, image: str | None, size: int) -> None:
    """Keep SIZE members of IMAGE's shape started (without IMAGE: the host's /usr).

    The size is kept across daemon restarts, over the pool_size setting. A size larger
    than the machine's memory allows is capped (hutch doctor says so).
    """
    _show(obj, obj.client.pool_set(size, image))


@pool.command()
@click.argument("image", required=False)
@click.option("--all", "-a", "all_shapes", is_flag=True, help="Drain every shape's pool.")
@json_option
@click.pass_obj
def drain(obj: Ctx, image: str | None, all_shapes: bool) -> None:
    """Destroy the members of IMAGE's pool (default: the host's) and keep it empty.

    It stays empty until hutch pool set gives it a size again. Sandboxes already handed
    out are not touched.
    """
    if image and all_shapes:
        raise click.UsageError("give IMAGE or --all, not both")
    out = obj.client.pool_drain(image, all_shapes)
    if not obj.json:
        for shape, count in out["drained"].items():
            click.echo(f"{shape}: {count} members destroyed")
    _show(obj, out)
