"""push, pull, snapshot, fork, tenant: moving and keeping workspaces."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import click

from hutch.cli.common import Ctx, SandboxCommand, count, emit, human_bytes, json_option, table
from hutch.cli.progress import progress_bar
from hutch.errors import NotFoundError

if TYPE_CHECKING:
    from hutch import wire


def do_push(obj: Ctx, ref: str, directory: str, **kw: Any) -> wire.PushSummary:
    with progress_bar(obj, "pushing") as advance:
        return obj.client.push(ref, directory, progress=advance, **kw)


def show_push(obj: Ctx, r: wire.PushSummary) -> None:
    if obj.json:
        emit(r)
        return
    for w in r.get("warnings", []):
        click.echo(f"hutch: warning: {w}", err=True)
    for s in r.get("skipped_paths", []):
        click.echo(f"hutch: skipped {s}", err=True)
    verb = "would send" if r["dry_run"] else "sent"
    click.echo(
        f"{verb} {r['files_sent']} file(s), {human_bytes(r['bytes'])}; "
        f"{'would delete' if r['dry_run'] else 'deleted'} {r['deleted']}; unchanged {r['skipped']}"
    )
    if r["dry_run"]:
        for p in r.get("send", []):
            click.echo(f"  + {p}")
        for p in r.get("delete", []):
            click.echo(f"  - {p}")


def show_pull(obj: Ctx, r: wire.PullSummary) -> None:
    if obj.json:
        emit(r)
        return
    verb = "would receive" if r["dry_run"] else "received"
    click.echo(f"{verb} {r['files_received']} file(s), {human_bytes(r['bytes'])} into {r['directory']}")
    if r["dry_run"]:
        for p in r.get("overwrite", []):
            click.echo(f"  ! {p} (would be overwritten)")


@click.command(cls=SandboxCommand)
@click.argument("sandbox")
@click.argument("directory", default=".", required=False)
@click.option("--delete", is_flag=True, help="Remove files an earlier push sent that are gone here.")
@click.option("--exclude", "excludes", multiple=True, metavar="PAT", help="Leave out paths matching PAT (repeatable).")
@click.option("--dry-run", is_flag=True, help="Show what would be sent and deleted; change nothing.")
@click.option("--force", is_flag=True, help="Allow --delete to remove more than 100 files or 20% of the tree.")
@click.option("--approval", metavar="ID", help="An approved request (apr_...) when push.delete requires approval.")
@json_option
@click.pass_obj
def push(
    obj: Ctx,
    sandbox: str,
    directory: str,
    delete: bool,
    excludes: tuple[str, ...],
    dry_run: bool,
    force: bool,
    approval: str | None,
) -> None:
    """Copy a local tree (default: .) into the sandbox's /workspace, sending only what changed.

    In a git repository: tracked and untracked-but-not-ignored files; elsewhere every file
    but .git and --exclude. Modes and symlinks are kept; symlinks leading out of the tree
    are skipped.
    """
    r = do_push(obj, sandbox, directory, delete=delete, exclude=excludes, dry_run=dry_run, force=force, approval=approval)
    show_push(obj, r)


@click.command(cls=SandboxCommand)
@click.argument("sandbox")
@click.argument("directory", default=".", required=False)
@click.option("--dry-run", is_flag=True, help="Show what would be written; change nothing.")
@click.option("--force", is_flag=True, help="Overwrite local files whose content differs.")
@json_option
@click.pass_obj
def pull(obj: Ctx, sandbox: str, directory: str, dry_run: bool, force: bool) -> None:
    """Copy the sandbox's /workspace into a local directory (default: .).

    Refuses, before writing anything, when a local file would be overwritten with other
    content, unless --force.
    """
    try:
        summary = obj.client.pull(sandbox, directory, dry_run=dry_run, force=force)
    except NotFoundError as exc:
        if _image_like(sandbox):  # hutch pull python:3.12 meant an image
            exc.hint = f"hutch pull copies a sandbox's /workspace; to pull an image: hutch image pull {sandbox}"
        raise
    show_pull(obj, summary)


def _image_like(text: str) -> bool:
    """Whether a missing sandbox's name reads like an image reference (a tag, a registry, a digest)."""
    from hutch.errors import InvalidError
    from hutch.imageref import parse_registry

    if not any(ch in text for ch in ":/@"):
        return False
    try:
        parse_registry(text)
    except InvalidError:
        return False
    return True


@click.group()
def snapshot() -> None:
    """Save a sandbox's workspace and start new sandboxes from it."""


@snapshot.command("save", cls=SandboxCommand)
@click.argument("sandbox")
@click.argument("name")
@json_option
@click.pass_obj
def snapshot_save(obj: Ctx, sandbox: str, name: str) -> None:
    """Save SANDBOX's workspace (owners, modes, symlinks, xattrs) as snapshot NAME."""
    r = obj.client.snapshot_save(sandbox, name)
    emit(r) if obj.json else click.echo(f"saved {r['name']} ({human_bytes(r['size'])})")


@snapshot.command("list")
@json_option
@click.pass_obj
def snapshot_list(obj: Ctx) -> None:
    """List snapshots."""
    snaps = obj.client.snapshots()
    if obj.json:
        emit(snaps)
        return
    rows = [
        [s["name"], s["sandbox_id"], human_bytes(s["size"]), time.strftime("%Y-%m-%d %H:%M", time.localtime(s["created_at"]))]
        for s in snaps
    ]
    table(rows, ["name", "from", "size", "created"])


@snapshot.command("restore")
@click.argument("name")
@click.option("--name", "new_name", help="Name of the new sandbox.")
@json_option
@click.pass_obj
def snapshot_restore(obj: Ctx, name: str, new_name: str | None) -> None:
    """Create a new sandbox whose workspace is snapshot NAME; print its id."""
    r = obj.client.snapshot_restore(name, new_name)
    emit(r) if obj.json else click.echo(r["id"])


@snapshot.command("delete")
@click.argument("name")
@json_option
@click.pass_obj
def snapshot_delete(obj: Ctx, name: str) -> None:
    """Delete snapshot NAME (idempotent)."""
    r = obj.client.snapshot_delete(name)
    emit(r) if obj.json else click.echo(f"{name}: {'deleted' if r['existed'] else 'no such snapshot (nothing to do)'}")


@click.command(cls=SandboxCommand)
@click.argument("sandbox")
@click.option("--count", "-n", type=count(1, 32), metavar="N", default=1, show_default=True, help="How many children (1-32).")
@click.option("--name-prefix", help="Name the children PREFIX1, PREFIX2 ...")
@json_option
@click.pass_obj
def fork(obj: Ctx, sandbox: str, count: int, name_prefix: str | None) -> None:
    """New sandboxes whose workspaces start as copies of SANDBOX's; prints one id a line.

    Each child stands alone: one that fails is reported (exit 1), the others are kept.
    """
    r = obj.client.fork(sandbox, count, name_prefix)
    if obj.json:
        emit(r)
    else:
        for c in r["children"]:
            if c["sandbox"]:
                click.echo(c["sandbox"])
                if c.get("skipped"):  # what the copy could not carry is said, never dropped silently
                    said = f": {c['notes'][0]}" if c.get("notes") else ""
                    click.echo(f"hutch: {c['sandbox']}: skipped {c['skipped']} entr(ies) it cannot copy{said}", err=True)
            else:
                click.echo(f"hutch: child {c['index']} failed: {c['error']['message']}", err=True)
    if r["failed"]:
        raise SystemExit(1)


@click.group()
def tenant() -> None:
    """Tenants: persistent sandbox lines whose /workspace survives (create/run --tenant NAME)."""


@tenant.command("list")
@json_option
@click.pass_obj
def tenant_list(obj: Ctx) -> None:
    """List tenants and their live sandbox."""
    tenants = obj.client.tenants()
    if obj.json:
        emit(tenants)
        return
    table([[t["name"], t["provider"], t["sandbox"] or "-"] for t in tenants], ["name", "provider", "sandbox"])


@tenant.command("delete")
@click.argument("name")
@json_option
@click.pass_obj
def tenant_delete(obj: Ctx, name: str) -> None:
    """Destroy the tenant's sandbox and delete its kept workspace (idempotent)."""
    r = obj.client.delete_tenant(name)
    if obj.json:
        emit(r)
    elif not r.get("existed", True):
        click.echo(f"{name}: no such tenant (nothing to do)")
    else:
        click.echo(f"{name}: deleted" + (f" (destroyed {', '.join(r['destroyed'])})" if r["destroyed"] else ""))
