"""``hutch exec SANDBOX -- CMD [ARGS...]`` with no option, without click.

This is the command an agent runs most, and click's import is about a third of its start.
The form is recognised exactly (the command, one sandbox that is not an option, ``--``, at
least one word); anything else, ``--help`` and shell completion go through the command tree.
What runs is what :func:`hutch.cli.run.exec_` does with no option given: the same request
(:func:`hutch.wire.build.exec_request`), the same foreground run, output and exit code, the
same errors. tests/integration/test_cli_plain.py compares the two.
"""

from __future__ import annotations

import os

from hutch.cli.base import ENDINGS, Ctx, exit_code_for, exit_status, fail
from hutch.errors import HutchError, InvalidError

# An argument with any of these is a shell command line (one argument: run under /bin/sh -c).
SHELL_CHARS = frozenset(" \t\n|&;<>()$`\\\"'*?[]#~=%")


def command_of(args: tuple[str, ...]) -> str | list[str]:
    """One argument with shell syntax is a shell string; otherwise an argv list."""
    if not args:
        raise InvalidError("no command given", hint="put the command after --, e.g. hutch exec SBX -- ls -la")
    if len(args) == 1 and SHELL_CHARS & set(args[0]):
        return args[0]
    return list(args)


def applies(args: list[str]) -> bool:
    """Is ``args`` exactly ``exec SANDBOX -- CMD [ARGS...]`` (and no completion asked)?"""
    return (
        len(args) >= 4
        and args[0] == "exec"
        and args[2] == "--"
        and bool(args[1])
        and not args[1].startswith("-")
        and "_HUTCH_COMPLETE" not in os.environ
    )


def main(args: list[str]) -> int:
    """Run the command; its exit code (the workload's, or hutch's contract for its own failures)."""
    from hutch.cli.foreground import execute, exit_with
    from hutch.wire import build

    obj = Ctx()
    try:
        try:
            req = build.exec_request(command_of(tuple(args[3:])), env={}, max_output=obj.settings.output_cap, redact=True)
            exit_with(execute(obj, args[1], req, False, interactive=False, tty=False))
        except HutchError as exc:
            fail(exc, False, exit_code_for(exc, run_command=True))
    except ENDINGS as exc:
        return exit_status(exc)
    return 0
