"""``hutch exec SANDBOX -- CMD [ARGS...]`` and ``hutch run -- CMD [ARGS...]`` with no option,
without click.

These are the commands an agent runs most, and click's import is about a third of their
start. The forms are recognised exactly (``exec``, one sandbox that is not an option, ``--``,
at least one word; ``run``, ``--``, at least one word, and ``HUTCH_REUSE`` unset, since that
variable stands for an option); anything else, ``--help`` and shell completion go through the
command tree. What runs is what :func:`hutch.cli.run.exec_` and :func:`hutch.cli.run.run` do
with no option given: the same requests (:func:`hutch.wire.build.exec_request`, the spec of
:func:`hutch.cli.specs.build_spec` with every option at its default, the manifest setting
included), the same foreground run, output and exit code, the same errors.
tests/integration/test_cli_plain.py compares the two.
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
    """Is ``args`` exactly ``exec SANDBOX -- CMD [ARGS...]`` or ``run -- CMD [ARGS...]`` (and
    no completion asked, and for run no ``HUTCH_REUSE``)?"""
    if "_HUTCH_COMPLETE" in os.environ:
        return False
    if args[:1] == ["run"]:
        return len(args) >= 3 and args[1] == "--" and not os.environ.get("HUTCH_REUSE")
    return len(args) >= 4 and args[0] == "exec" and args[2] == "--" and bool(args[1]) and not args[1].startswith("-")


def main(args: list[str]) -> int:
    """Run the command; its exit code (the workload's, or hutch's contract for its own failures)."""
    from hutch.cli.foreground import execute, exit_with
    from hutch.wire import build

    obj = Ctx()
    try:
        try:
            if args[0] == "run":
                _run(obj, tuple(args[2:]))
            else:
                req = build.exec_request(command_of(tuple(args[3:])), env={}, max_output=obj.settings.output_cap, redact=True)
                exit_with(execute(obj, args[1], req, False, interactive=False, tty=False))
        except HutchError as exc:
            fail(exc, False, exit_code_for(exc, run_command=True))
    except ENDINGS as exc:
        return exit_status(exc)
    return 0


def _run(obj: Ctx, command: tuple[str, ...]) -> None:
    """``hutch run -- CMD``: a new sandbox of the default spec, the command, its exit code."""
    from hutch.cli.foreground import exit_with
    from hutch.cli.oneshot import run_once
    from hutch.cli.specs import build_spec
    from hutch.wire import build

    spec = build_spec(obj, None, None, None, None, (), (), (), None, None)
    req = build.exec_request(command_of(command), env={}, max_output=obj.settings.output_cap, redact=True)
    todo = build.run_once_request(req, spec=spec, sandbox=None, keep=False, pull=False, files=[])
    result, _sandbox = run_once(obj, todo, None, False, False)
    exit_with(result)
