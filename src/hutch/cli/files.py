"""write, read, ls, diff."""

from __future__ import annotations

import base64
import stat
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from hutch.cli.common import EXIT_FAILED, Ctx, SandboxCommand, emit, json_option, table
from hutch.errors import InvalidError
from hutch.units import parse_time

if TYPE_CHECKING:
    from hutch import wire


@click.command(cls=SandboxCommand)
@click.argument("sandbox")
@click.argument("path")
@click.option(
    "--from",
    "source",
    type=click.Path(dir_okay=False, allow_dash=True),
    help="Read the content from FILE, or - for stdin (default: stdin).",
)
@click.option("--mode", default="644", show_default=True, help="File mode (octal).")
@json_option
@click.pass_obj
def write(obj: Ctx, sandbox: str, path: str, source: str | None, mode: str) -> None:
    """Write a file into a sandbox (relative paths are under the workdir)."""
    try:
        perms = int(mode, 8)
    except ValueError as exc:
        raise InvalidError(f"invalid --mode {mode!r}", hint="use octal, e.g. 644 or 755") from exc
    if source in (None, "-"):
        if source is None and sys.stdin.isatty():
            raise InvalidError("no content: stdin is a terminal", hint="use --from FILE, or pipe the content in")
        data = sys.stdin.buffer.read()
    else:
        try:
            data = Path(source).read_bytes()
        except OSError as exc:
            raise InvalidError(f"cannot read {source}: {exc.strerror}", hint="check the --from path") from exc
    r = obj.client.write_file(sandbox, path, data, perms)
    if obj.json:
        emit(r)
    else:
        click.echo(f"wrote {r['size']} bytes to {r['path']}")


@click.command(cls=SandboxCommand)
@click.argument("sandbox")
@click.argument("path")
@json_option
@click.pass_obj
def read(obj: Ctx, sandbox: str, path: str) -> None:
    """Print a file from a sandbox (raw bytes; --json gives text or base64)."""
    data, truncated = obj.client.read_file(sandbox, path)
    if obj.json:
        try:
            body, b64 = data.decode(), False
        except UnicodeDecodeError:
            body, b64 = base64.b64encode(data).decode(), True
        emit({"path": path, "size": len(data), "content": body, "base64": b64, "truncated": truncated})
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    if truncated:  # what was printed is not the file: a script must not take it for it
        import shlex

        click.echo(f"hutch: {path} is larger than 64 MiB: only its first 64 MiB were printed", err=True)
        click.echo(f"hint: all of it: hutch exec {sandbox} -- cat {shlex.quote(path)} > FILE (or hutch pull)", err=True)
        raise SystemExit(EXIT_FAILED)


@click.command(cls=SandboxCommand)
@click.argument("sandbox")
@click.argument("path", required=False)
@click.option("--long", "-l", "long_", is_flag=True, help="Show type, mode, size and time.")
@click.option(
    "--since",
    metavar="TIME",
    help="List the files under PATH changed at or after TIME, recursively (judged by ctime): a Unix time, "
    "ISO 8601 (2026-12-01T10:00:00Z) or a duration ago (10m, 2h).",
)
@json_option
@click.pass_obj
def ls(obj: Ctx, sandbox: str, path: str | None, long_: bool, since: str | None) -> None:
    """List a directory in a sandbox (default: the workdir), or with --since what changed under it."""
    if since is not None:
        found = obj.client.diff(sandbox, parse_time(since), path or ".")
        changed = [c for c in found["changes"] if c["kind"] != "deleted" and c["path"] != found["path"]]
        if obj.json:
            emit(changed)
        else:
            for c in changed:
                when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(c["ctime"] or 0))
                click.echo(f"{when}  {c['path']}{'/' if c['type'] == 'dir' else ''}" if long_ else c["path"])
            _warn(found)
        return
    entries = obj.client.list_files(sandbox, path)
    if obj.json:
        emit(entries)
        return
    if not long_:
        for e in entries:
            click.echo(e["name"] + ("/" if e["type"] == "dir" else ""))
        return
    rows = [
        [
            e["type"],
            stat.filemode(e["mode"] | {"dir": stat.S_IFDIR, "symlink": stat.S_IFLNK}.get(e["type"], stat.S_IFREG)),
            str(e["size"]),
            time.strftime("%Y-%m-%d %H:%M", time.localtime(e["mtime"])),
            e["name"],
        ]
        for e in entries
    ]
    table(rows, ["type", "mode", "size", "modified", "name"])


KINDS = {"added": "A", "modified": "C", "deleted": "D"}


def _warn(found: wire.ChangeList) -> None:
    for note in found["notes"]:
        click.echo(f"hutch: {note}", err=True)
    if found["truncated"]:
        click.echo(f"hutch: only the first {len(found['changes'])} changes are shown", err=True)


@click.command(cls=SandboxCommand)
@click.argument("sandbox")
@click.option(
    "--since",
    metavar="TIME",
    help="Only changes at or after TIME (judged by ctime): a Unix time, ISO 8601 (2026-12-01T10:00:00Z) "
    "or a duration ago (10m, 2h).",
)
@click.option("--path", "path", metavar="PATH", help="Only changes at or under PATH (relative: under the workdir).")
@json_option
@click.pass_obj
def diff(obj: Ctx, sandbox: str, since: str | None, path: str | None) -> None:
    """What a sandbox changed, like docker diff: A added, C modified, D deleted.

    Compares the sandbox's writable root (an image sandbox's own layer over its image) and its
    /workspace with what they had when it started; changes are judged by ctime, which a
    workload cannot set back.
    """
    found = obj.client.diff(sandbox, parse_time(since) if since is not None else None, path)
    if obj.json:
        emit(found)
        return
    for c in found["changes"]:
        click.echo(f"{KINDS[c['kind']]} {c['path']}")
    _warn(found)
