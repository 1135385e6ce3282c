"""The ``hutch`` command line. Thin: parse, one client call, render."""

from __future__ import annotations

import sys

import click

from hutch._version import __version__
from hutch.cli.agents import mcp
from hutch.cli.approvals import approvals, approve, confirm
from hutch.cli.benchmark import benchmark
from hutch.cli.catalog import catalog
from hutch.cli.common import EXIT_USAGE, Ctx, emit, exit_code_for, fail
from hutch.cli.events import events
from hutch.cli.files import ls, read, write
from hutch.cli.interactive import shell
from hutch.cli.inventory import cleanup, status, stop, warmup
from hutch.cli.lifecycle import keepalive, label, pause, resume, subagent
from hutch.cli.network import policy
from hutch.cli.run import exec_, run
from hutch.cli.runs import kill, logs, poll, ps, runs_, wait
from hutch.cli.sandbox import create, destroy, get, list_
from hutch.cli.skill import skill
from hutch.cli.ssh import ssh
from hutch.cli.system import daemon, doctor, serve
from hutch.cli.workspace import fork, pull, push, snapshot, tenant
from hutch.errors import HutchError

RUN_COMMANDS = ("run", "exec")


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="hutch")
@click.option("--home", envvar="HUTCH_HOME", metavar="DIR", help="State directory (default: per-user; env HUTCH_HOME).")
@click.option("--profile", envvar="HUTCH_PROFILE", metavar="NAME", help="Use [profiles.NAME] of config.toml (env HUTCH_PROFILE).")
@click.pass_context
def cli(ctx: click.Context, home: str | None, profile: str | None) -> None:
    """hutch: run commands in isolated sandboxes.

    \b
    Quick start:
      hutch run -- python3 -c "print('hi')"     one command in a fresh sandbox
      SBX=$(hutch create --memory 512M)          a sandbox that stays
      hutch exec $SBX -- ls -la                  run in it (exit code passes through)
      hutch destroy $SBX

    Every command takes --json. See hutch doctor when something does not work.
    """
    obj = ctx.ensure_object(Ctx)
    if home:
        obj.settings_flags["home"] = home
    if profile:
        obj.settings_flags["profile"] = profile


for command in (
    run,
    create,
    exec_,
    list_,
    get,
    destroy,
    policy,
    pause,
    resume,
    keepalive,
    subagent,
    label,
    confirm,
    approve,
    approvals,
    status,
    cleanup,
    warmup,
    stop,
    runs_,
    poll,
    wait,
    kill,
    logs,
    events,
    ps,
    shell,
    ssh,
    write,
    read,
    ls,
    push,
    pull,
    snapshot,
    fork,
    tenant,
    doctor,
    daemon,
    serve,
    mcp,
    skill,
    catalog,
    benchmark,
):
    cli.add_command(command)


def _command_name(args: list[str]) -> str | None:
    """The subcommand in ``args``: the first word that is not a global option or its value."""
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in ("--home", "--profile"):
            skip = True
        elif not arg.startswith("-"):
            return arg
    return None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    own = args[: args.index("--")] if "--" in args else args
    as_json = "--json" in own
    obj = Ctx()
    try:
        cli.main(args=args, prog_name="hutch", standalone_mode=False, obj=obj)
    except click.exceptions.NoArgsIsHelpError as exc:
        click.echo(exc.ctx.get_help() if exc.ctx else "")
        return EXIT_USAGE
    except click.UsageError as exc:
        hint = getattr(exc, "hint", None)
        if as_json:
            emit({"error": {"kind": "invalid", "message": exc.format_message(), "hint": hint or "see hutch --help"}})
        else:
            exc.show()
            if hint:
                click.echo(f"hint: {hint}", err=True)
        return EXIT_USAGE
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except HutchError as exc:
        is_run = _command_name(own) in RUN_COMMANDS
        try:
            fail(exc, obj.json or as_json, exit_code_for(exc, is_run))
        except SystemExit as done:
            return int(done.code or 0)
    except SystemExit as exc:
        return int(exc.code or 0) if not isinstance(exc.code, str) else 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    return 0
