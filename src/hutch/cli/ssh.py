"""hutch ssh: a shell or a command in a unikraft sandbox created with --ssh (TLS-wrapped SSH)."""

from __future__ import annotations

import asyncio
import shlex
import sys

import click

from hutch.cli.common import Ctx, SandboxCommand, emit, exit_code_for, fail, json_option
from hutch.errors import HutchError, InvalidError


@click.command(cls=SandboxCommand)
@click.argument("sandbox")
@click.argument("command", nargs=-1)
@json_option
@click.pass_obj
def ssh(obj: Ctx, /, sandbox: str, command: tuple[str, ...]) -> None:
    """SSH into a unikraft sandbox created with --ssh: a shell on a terminal, else run COMMAND
    (after --) and exit with its code. The host key is pinned on first use."""
    from hutch.providers.unikraft import ssh as path  # asyncssh stays out of the CLI's start

    line = shlex.join(command) if command else None
    tty = sys.stdin.isatty() and sys.stdout.isatty()
    try:
        if line is None and (obj.json or not tty):
            raise InvalidError("no terminal for a shell", hint="pass a command: hutch ssh SANDBOX [--json] -- CMD")
        s = obj.settings
        target = path.Target(s.home, obj.client.get(sandbox), s.unikraft_ssh_connect, s.unikraft_ca_file)
        if obj.json and line is not None:
            code, out, err = asyncio.run(path.run_command(target, line, capture=True))
            emit(
                {
                    "sandbox": target.id,
                    "exit_code": code,
                    "stdout": out.decode(errors="replace"),
                    "stderr": err.decode(errors="replace"),
                }
            )
        elif tty:
            code = asyncio.run(path.interactive(target, line))
        else:
            code = asyncio.run(path.run_command(target, line or "", capture=False))[0]
    except HutchError as exc:
        fail(exc, obj.json, exit_code_for(exc, run_command=True))
    raise SystemExit(code)
