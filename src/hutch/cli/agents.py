"""hutch mcp: the Model Context Protocol server (tools over the same client as the CLI)."""

from __future__ import annotations

import socket

import click

from hutch.cli.common import SIZE, Ctx
from hutch.config import Settings
from hutch.errors import InvalidError, UnavailableError


@click.command()
@click.option(
    "--http",
    "port",
    type=click.IntRange(1, 65535),
    metavar="PORT",
    help="Serve streamable HTTP on 127.0.0.1:PORT (path /mcp) instead of stdio.",
)
@click.option(
    "--max-output",
    type=SIZE,
    default="32K",
    show_default=True,
    help="Default cap per stream on exec output and on each file_read (a tool call may ask for more).",
)
@click.pass_obj
def mcp(obj: Ctx, port: int | None, max_output: int) -> None:
    """Serve hutch's sandboxes as MCP tools (stdio by default).

    \b
    Add it to Claude Code:  claude mcp add hutch -- hutch mcp
    Tools for sandboxes, commands (foreground and background), runs, files, logs,
    events, push/pull, snapshots, approvals and network policy: the list with their
    parameters is in docs/mcp.md. stdout carries the protocol; logs go to stderr.
    """
    import anyio

    from hutch.mcp import MAX_CALL_OUTPUT, serve

    cap = max_output
    if not 0 < cap <= MAX_CALL_OUTPUT:
        raise InvalidError(f"--max-output must be between 1 and {MAX_CALL_OUTPUT} bytes, got {max_output}")
    settings = Settings.load(**obj.settings_flags)
    if port is not None:
        _check_port(port)
        click.echo(f"hutch mcp: serving streamable HTTP on http://127.0.0.1:{port}/mcp", err=True)
    anyio.run(serve, settings, cap, port)


def _check_port(port: int) -> None:
    """Fail with a clear error, before serving, when the port cannot be bound."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            raise UnavailableError(
                f"cannot listen on 127.0.0.1:{port}: {exc.strerror}", hint="choose another --http PORT"
            ) from exc
