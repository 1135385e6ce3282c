"""The command tree (click): every command, imported on first use, and the error contract of a
command line parsed here. :func:`hutch.cli.main` comes here for every command but a plain exec."""

from __future__ import annotations

import sys

import click

from hutch._version import __version__
from hutch.cli.base import ENDINGS, exit_status
from hutch.cli.commands import COMMANDS, RUN_COMMANDS
from hutch.cli.common import EXIT_USAGE, Ctx, emit, exit_code_for, fail
from hutch.errors import HutchError

__all__ = ["COMMANDS", "LazyGroup", "cli", "main"]


class LazyGroup(click.Group):
    """The command tree, each command imported on first use (help and completion list all)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            import importlib

            module, attr = COMMANDS[cmd_name]
            command = getattr(importlib.import_module(f"hutch.cli.{module}"), attr)
            assert isinstance(command, click.Command) and command.name == cmd_name, cmd_name
            self.add_command(command)
        return self.commands.get(cmd_name)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
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
    except ENDINGS as exc:
        return exit_status(exc)
    return 0
