"""exec and run: the workload's exit code passes through; hutch's failures exit 125."""

from __future__ import annotations

import base64
import sys
from pathlib import Path
from typing import Any

import click

from hutch.cli.common import EXIT_TIMEOUT, Ctx, emit, exit_code_for, fail, json_option, parse_pairs
from hutch.cli.sandbox import build_spec, create_options
from hutch.errors import HutchError, InvalidError
from hutch.units import parse_size

SHELL_CHARS = set(" \t\n|&;<>()$`\\\"'*?[]#~=%")


def command_of(args: tuple[str, ...]) -> str | list[str]:
    """One argument with shell syntax is a shell string; otherwise an argv list."""
    if not args:
        raise InvalidError("no command given", hint="put the command after --, e.g. hutch exec SBX -- ls -la")
    if len(args) == 1 and SHELL_CHARS & set(args[0]):
        return args[0]
    return list(args)


def exec_options(f: Any) -> Any:
    opts = [
        click.option("--cwd", help="Working directory inside the sandbox."),
        click.option("--timeout", type=float, help="Wall timeout in seconds; the whole process tree is killed (exit 124)."),
        click.option(
            "--stdin-file",
            type=click.Path(dir_okay=False, allow_dash=True),
            help="Feed this file (or - for stdin) to the command.",
        ),
        click.option("--max-output", help="Cap on captured stdout and stderr each (default 1M)."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def exec_request(
    obj: Ctx,
    command: tuple[str, ...],
    env: dict[str, str],
    cwd: str | None,
    timeout: float | None,
    stdin_file: str | None,
    max_output: str | None,
) -> dict[str, Any]:
    req: dict[str, Any] = {"command": command_of(command), "env": env, "cwd": cwd, "timeout": timeout}
    if timeout is not None and timeout <= 0:
        raise InvalidError(f"--timeout must be positive, got {timeout}")
    req["max_output"] = parse_size(max_output) if max_output else obj.settings.output_cap
    if stdin_file:
        try:
            data = sys.stdin.buffer.read() if stdin_file == "-" else Path(stdin_file).read_bytes()
        except OSError as exc:
            raise InvalidError(f"cannot read --stdin-file {stdin_file}: {exc.strerror}", hint="check the path") from exc
        req |= {"stdin": base64.b64encode(data).decode(), "stdin_base64": True}
    return req


def render(obj: Ctx, result: dict[str, Any]) -> None:
    code = int(result["exit_code"])
    if obj.json:
        emit(result)
    else:
        for name, stream in (("stdout", sys.stdout.buffer), ("stderr", sys.stderr.buffer)):
            data = result[name]
            stream.write(base64.b64decode(data) if result.get(f"{name}_base64") else data.encode())
            stream.flush()
        if result["truncated"]:
            click.echo(
                f"hutch: output truncated (stdout {result['stdout_bytes']} bytes, stderr {result['stderr_bytes']} bytes); "
                "raise --max-output",
                err=True,
            )
        if result["status"] == "timed_out":
            click.echo("hutch: timed out; the command's process tree was killed", err=True)
        elif result["status"] == "oom_killed":
            click.echo("hutch: the command was killed: out of memory (raise --memory)", err=True)
        elif result.get("error") and code in (126, 127):
            click.echo(f"hutch: {result['error']}", err=True)
    raise SystemExit(EXIT_TIMEOUT if result["status"] == "timed_out" else code)


@click.command("exec", context_settings={"ignore_unknown_options": False})
@click.argument("sandbox")
@click.argument("command", nargs=-1, required=True)
@click.option(
    "--env",
    "-e",
    "env",
    multiple=True,
    metavar="K=V",
    help="Environment variable for this command (repeatable); a bare K copies it from this environment.",
)
@click.option("--session-id", "session_id", hidden=True)
@exec_options
@json_option
@click.pass_obj
def exec_(obj: Ctx, /, sandbox: str, command: tuple[str, ...], env: tuple[str, ...], session_id: str | None, **kw: Any) -> None:
    """Run a command in a sandbox: hutch exec SANDBOX -- CMD [ARGS...]

    The exit code is the command's own. A single argument with shell syntax
    (e.g. "make && make test") runs under /bin/sh -c.
    """
    try:
        req = exec_request(obj, command, parse_pairs(env, "env", from_env=True), **kw)
        render(obj, obj.client.exec(session_id or sandbox, req))
    except HutchError as exc:
        fail(exc, obj.json, exit_code_for(exc, run_command=True))


@click.command()
@click.argument("command", nargs=-1, required=True)
@create_options
@exec_options
@click.option("--keep", is_flag=True, help="Keep the sandbox after the command (its id goes to stderr).")
@click.option("--sandbox", "reuse", metavar="ID|NAME", help="Run in this existing sandbox instead of a new one.")
@json_option
@click.pass_obj
def run(
    obj: Ctx,
    /,
    command: tuple[str, ...],
    keep: bool,
    reuse: str | None,
    cwd: str | None,
    timeout: float | None,
    stdin_file: str | None,
    max_output: str | None,
    **create_kw: Any,
) -> None:
    """Create a sandbox, run one command, print its output, destroy the sandbox.

    hutch run [OPTIONS] -- CMD [ARGS...]. Accepts every option of create and exec.
    """
    sbx: str | None = None
    try:
        req = exec_request(obj, command, {}, cwd, timeout, stdin_file, max_output)
        sbx = reuse or obj.client.create(build_spec(obj, **create_kw))["id"]
        try:
            result = obj.client.exec(sbx, req)
        finally:
            if not reuse and not keep:
                obj.client.destroy(sbx)
        if keep and not reuse and not obj.json:
            click.echo(f"hutch: kept sandbox {sbx}", err=True)
        render(obj, result | ({"kept": sbx} if keep and not reuse else {}))
    except HutchError as exc:
        fail(exc, obj.json, exit_code_for(exc, run_command=True))
