"""exec and run: the workload's exit code passes through; hutch's failures exit 125."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from hutch.cli.common import (
    SIZE,
    Ctx,
    Duration,
    WorkloadCommand,
    WorkloadSandboxCommand,
    emit,
    exit_code_for,
    fail,
    json_option,
    old_spelling,
    parse_pairs,
)
from hutch.cli.foreground import execute, exit_with
from hutch.cli.network import resolve_secrets, secret_option
from hutch.cli.oneshot import run_once
from hutch.cli.plain import command_of
from hutch.cli.sandbox import build_spec, create_options
from hutch.errors import HutchError, InvalidError, UnavailableError
from hutch.units import parse_size
from hutch.wire import build

if TYPE_CHECKING:
    from hutch import wire

EXEC_DURATION = Duration(at_most=7 * 86400)


def exec_options(f: Any) -> Any:
    opts = [
        click.option("--cwd", help="Working directory inside the sandbox."),
        click.option(
            "--timeout", type=EXEC_DURATION, help="Wall timeout, e.g. 90s, 5m, 2h; the whole process tree is killed (exit 124)."
        ),
        click.option(
            "--idle-output-timeout",
            "idle_timeout",
            type=EXEC_DURATION,
            help="Kill the process tree when it prints nothing for this long, e.g. 2m (exit 124).",
        ),
        click.option(
            "--stdin-file",
            type=click.Path(dir_okay=False, allow_dash=True),
            help="Feed this file (or - for stdin) to the command.",
        ),
        click.option("--max-output", type=SIZE, help="Cap on stdout and stderr each kept in the result (default 1M)."),
        click.option("--stream", is_flag=True, help="With --json: print NDJSON events (stdout, stderr, exit) as they come."),
        click.option("--no-redact", is_flag=True, help="Show secret values in this run's output instead of [redacted:NAME]."),
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
    idle_timeout: float | None,
    stdin_file: str | None,
    max_output: int | None,
    no_redact: bool = False,
    secrets: dict[str, str] | None = None,
    approval: str | None = None,
    user: str | None = None,
) -> wire.ExecRequest:
    """The request of the command line's options, built as every edge builds one
    (:func:`hutch.wire.build.exec_request`)."""
    for name, value in (("--timeout", timeout), ("--idle-output-timeout", idle_timeout)):
        if value is not None and not 0 < value <= 7 * 86400:
            raise InvalidError(f"{name} must be between 0 and 604800 seconds, got {value}", hint=f"e.g. {name} 600")
    data = None
    if stdin_file:
        try:
            data = sys.stdin.buffer.read() if stdin_file == "-" else Path(stdin_file).read_bytes()
        except OSError as exc:
            raise InvalidError(f"cannot read --stdin-file {stdin_file}: {exc.strerror}", hint="check the path") from exc
    return build.exec_request(
        command_of(command),
        env=env,
        cwd=cwd,
        timeout=timeout,
        idle_timeout=idle_timeout,
        stdin=data,
        max_output=parse_size(max_output) if max_output else obj.settings.output_cap,
        secrets=secrets,
        redact=not no_redact,
        approval=approval,
        user=user,
    )


@click.command("exec", context_settings={"ignore_unknown_options": False}, cls=WorkloadSandboxCommand)
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
@click.option("--background", "-d", is_flag=True, help="Start the command and print its run id at once.")
@click.option(
    "--interactive",
    "-i",
    is_flag=True,
    help="Forward stdin to the command as it comes, even from a terminal (a piped stdin is forwarded anyway).",
)
@click.option("--tty", "-t", is_flag=True, help="Give the command a terminal (with -i: an interactive session).")
@secret_option("Secret for this run: from $NAME, env:VAR or file:PATH; never stored, redacted from output.")
@click.option("--approval", metavar="ID", help="An approved request (apr_...) for a command the sandbox requires approval for.")
@click.option(
    "--user",
    "-u",
    metavar="USER",
    help="Run as this user of the sandbox: NAME, UID, NAME:GROUP or UID:GID, looked up in its /etc/passwd "
    "(a sandbox that runs as root inside: --user root or an image's root).",
)
@exec_options
@json_option
@click.pass_obj
def exec_(
    obj: Ctx,
    /,
    sandbox: str,
    command: tuple[str, ...],
    env: tuple[str, ...],
    secrets: tuple[str, ...],
    background: bool,
    interactive: bool,
    tty: bool,
    approval: str | None,
    user: str | None,
    stream: bool,
    **kw: Any,
) -> None:
    """Run a command in a sandbox: hutch exec SANDBOX -- CMD [ARGS...]

    Output streams live and the exit code is the command's own. A single argument with
    shell syntax (e.g. "make && make test") runs under /bin/sh -c. With --background the
    run id is printed at once: follow it with hutch poll, wait, kill.
    """
    try:
        pairs = parse_pairs(env, "env", from_env=True)
        req = exec_request(obj, command, pairs, **kw, secrets=resolve_secrets(secrets), approval=approval, user=user)
        ref = sandbox
        if background:
            run = obj.client.start(ref, req)
            emit(run) if obj.json else click.echo(run["id"])
            return
        if tty:
            req["env"] = {"TERM": os.environ.get("TERM", "xterm")} | req.get("env", {})
            if not sys.stdin.isatty() and not obj.json:
                click.echo(
                    "hutch: stdin is not a terminal: its end is sent as one ^D, which programs that read "
                    "the terminal raw (a REPL with readline) may ignore; end the input with an exit command",
                    err=True,
                )
        exit_with(execute(obj, ref, req, stream, interactive=interactive, tty=tty))
    except HutchError as exc:
        fail(exc, obj.json, exit_code_for(exc, run_command=True))


def reuse_key(provider: str, image: str | None = None) -> str:
    """Auto mode's key: one sandbox per provider (profile), working directory and image (a
    run with another --image never lands in a kept sandbox of another root)."""
    import hashlib

    text = f"{provider}\0{os.path.realpath(os.getcwd())}" + (f"\0{image}" if image else "")
    return hashlib.sha256(text.encode()).hexdigest()[:16]


LANGS = {
    # lang: (interpreter, one-liner flag, file suffix)
    "python": ("python3", "-c", ".py"),
    "node": ("node", "-e", ".js"),
    "bash": ("bash", "-c", ".sh"),
    "sh": ("sh", "-c", ".sh"),
}


def snippet(lang: str | None, file: str | None, command: tuple[str, ...]) -> tuple[list[str] | None, bytes | None, str]:
    """(argv for a one-liner, or the script to upload, and its interpreter) for --lang/--file."""
    if file:
        try:
            code = Path(file).read_bytes()
        except OSError as exc:
            raise InvalidError(f"cannot read --file {file}: {exc.strerror}", hint="check the path") from exc
        if lang is None:
            lang = next((k for k, v in LANGS.items() if file.endswith(v[2])), None)
            if lang is None:
                raise InvalidError(f"cannot tell the language of {file}", hint=f"add --lang {'|'.join(LANGS)}")
        return None, code, LANGS[lang][0]
    assert lang is not None
    if not command:
        raise InvalidError("no code given", hint=f"hutch run --lang {lang} 'CODE'")
    code_text = " ".join(command)
    interpreter, flag, _ = LANGS[lang]
    if "\n" not in code_text:
        return [interpreter, flag, code_text], None, interpreter
    return None, code_text.encode(), interpreter


@click.command(cls=WorkloadCommand)
@click.argument("command", nargs=-1, required=False)
@create_options
@exec_options
@click.option(
    "--lang", type=click.Choice(sorted(LANGS)), help="COMMAND is code in this language (one line: -c/-e; more: a file)."
)
@click.option(
    "--file", "code_file", type=click.Path(dir_okay=False), help="Run this local script (language from --lang or its suffix)."
)
@click.option("--keep", is_flag=True, help="Keep the sandbox after the command (its id goes to stderr).")
@click.option("--session-id", "sandbox", metavar="SANDBOX", help="Run in this existing sandbox instead of a new one.")
@click.option(
    "--reuse",
    "reuse",
    is_flag=True,
    envvar="HUTCH_REUSE",
    help="Auto mode: one kept sandbox per provider and working directory, made on first use (env HUTCH_REUSE=1).",
)
@click.option("--sync", "sync_dir", metavar="DIR", help="Push DIR into /workspace before the command (see hutch push).")
@click.option("--pull", "pull_after", is_flag=True, help="With --sync: pull /workspace back into DIR afterwards.")
@json_option
@old_spelling("--sandbox", "--session-id", "sandbox", metavar="SANDBOX")
@click.pass_obj
def run(
    obj: Ctx,
    /,
    command: tuple[str, ...],
    keep: bool,
    sandbox: str | None,
    reuse: bool,
    sync_dir: str | None,
    pull_after: bool,
    cwd: str | None,
    timeout: float | None,
    idle_timeout: float | None,
    stdin_file: str | None,
    max_output: int | None,
    stream: bool,
    lang: str | None,
    code_file: str | None,
    no_redact: bool,
    **create_kw: Any,
) -> None:
    """Create a sandbox, run one command, print its output, destroy the sandbox.

    hutch run [OPTIONS] -- CMD [ARGS...]. Accepts every option of create and exec.
    With --lang python|node|bash|sh, COMMAND is code; with --file, a local script.
    With --reuse or --tenant NAME the sandbox is kept and used again by the next run; a
    command that may have started is never run twice (a sandbox that dies under it gives
    a lost run).
    """
    try:
        argv, script, interpreter = (None, None, None) if not (lang or code_file) else snippet(lang, code_file, command)
        spec = None if sandbox else build_spec(obj, **create_kw)
        image_cmd = not command and argv is None and script is None and bool(spec and spec.get("image"))
        if not command and argv is None and script is None and not image_cmd:
            raise InvalidError("no command given", hint="put the command after --, e.g. hutch run -- python3 -V")
        persistent = bool(sandbox or reuse or create_kw.get("tenant"))
        if sandbox and create_kw.get("secret_hosts"):
            raise InvalidError(
                "--secret-host makes placeholders when a sandbox is created, not in one that exists",
                hint="drop --session-id to run in a new sandbox, or pass --secret for this run",
            )
        secrets = None
        if persistent and create_kw.get("secrets") and not create_kw.get("secret_hosts"):
            # a sandbox that may already exist: the secrets go with this run, not its creation
            secrets = resolve_secrets(create_kw.pop("secrets"))
        args = tuple(argv) if argv else command or ("true",)
        req = exec_request(obj, args, {}, cwd, timeout, idle_timeout, stdin_file, max_output, no_redact, secrets=secrets)
        if argv:
            req["command"] = argv  # code is never re-split by a shell
        if image_cmd:
            req["command"] = []  # the image's own command (ENTRYPOINT + CMD)
        if pull_after and not sync_dir:
            raise InvalidError("--pull needs --sync DIR", hint="hutch run --sync . --pull -- make")
        files = []
        if script is not None:
            path = f"/tmp/hutch-snippet-{os.getpid()}"
            files.append((path, script, 0o600))
            req["command"] = [str(interpreter), path]
        if spec is not None and reuse and not spec.get("tenant"):
            spec["reuse_key"] = reuse_key(spec["provider"], spec.get("image"))
        todo = build.run_once_request(req, spec=spec, sandbox=sandbox, keep=keep, pull=pull_after, files=files)
        kept = keep and not persistent
        result, sbx = run_once(obj, todo, sync_dir, stream, kept)
        if interpreter and result["exit_code"] == 127 and result.get("error"):
            raise UnavailableError(
                f"{interpreter} is not installed in the sandbox (needed for --lang/--file)",
                hint=f"install {interpreter} on the host (its /usr is the sandbox's), or use another --lang",
            )
        if kept and not obj.json:
            click.echo(f"hutch: kept sandbox {sbx}", err=True)
        exit_with(result)
    except HutchError as exc:
        fail(exc, obj.json, exit_code_for(exc, run_command=True))
