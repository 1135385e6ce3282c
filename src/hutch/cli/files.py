"""write, read, ls."""

from __future__ import annotations

import base64
import stat
import sys
import time
from pathlib import Path

import click

from hutch.cli.common import Ctx, SandboxCommand, emit, json_option, table
from hutch.errors import InvalidError


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
        return
    sys.stdout.buffer.write(data)
    sys.stdout.flush()
    if truncated:
        click.echo("hutch: file truncated at 64 MiB", err=True)


@click.command(cls=SandboxCommand)
@click.argument("sandbox")
@click.argument("path", required=False)
@click.option("--long", "-l", "long_", is_flag=True, help="Show type, mode, size and time.")
@json_option
@click.pass_obj
def ls(obj: Ctx, sandbox: str, path: str | None, long_: bool) -> None:
    """List a directory in a sandbox (default: the workdir)."""
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
