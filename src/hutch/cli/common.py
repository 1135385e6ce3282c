"""Shared CLI plumbing: --json, rendering, the error/exit-code contract."""

from __future__ import annotations

import functools
import shlex
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

# the click-free part, here too for the commands that import it from this module
from hutch.cli.base import EXIT_FAILED as EXIT_FAILED
from hutch.cli.base import EXIT_HUTCH as EXIT_HUTCH
from hutch.cli.base import EXIT_TIMEOUT as EXIT_TIMEOUT
from hutch.cli.base import EXIT_USAGE as EXIT_USAGE
from hutch.cli.base import Ctx as Ctx
from hutch.cli.base import emit as emit
from hutch.cli.base import exit_code_for as exit_code_for
from hutch.cli.base import fail as fail
from hutch.cli.base import parse_pairs as parse_pairs
from hutch.errors import InvalidError
from hutch.units import format_size, parse_duration, parse_size

F = TypeVar("F", bound=Callable[..., Any])


class SandboxCommand(click.Command):
    """A command whose first argument is a sandbox. ``--session-id ID`` is an alias of
    that argument (agent users call a sandbox a session): it is moved into its place
    before parsing, so ``hutch exec --session-id ID -- CMD`` works like ``hutch exec ID -- CMD``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.append(
            click.Option(
                ["--session-id"],
                metavar="ID",
                expose_value=False,
                help="The sandbox (id or name), as an option: an alias of the SANDBOX argument.",
            )
        )

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        args = list(args)
        end = args.index("--") if "--" in args else len(args)
        for i, arg in enumerate(args[:end]):
            if arg == "--session-id" and i + 1 < end:
                value = args[i + 1]
                del args[i : i + 2]
                args.insert(0, value)
                break
            if arg.startswith("--session-id="):
                del args[i]
                args.insert(0, arg.partition("=")[2])
                break
        return super().parse_args(ctx, args)


class WorkloadCommand(click.Command):
    """A command that ends with the workload's own command line (``run``, and ``exec`` as a
    :class:`SandboxCommand`): when an option of that command line is taken for hutch's
    because ``--`` was forgotten (``hutch exec demo python3 -V``), the usage error says so
    and shows the line with ``--`` in its place."""

    leading = 0  # positional arguments before the workload's command (exec: the sandbox)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        given = list(args)  # click's parser consumes the list it is given
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as exc:
            fixed = dashes_fix(self, given, exc.option_name, self.leading)
            if fixed is None:
                raise
            hinted = click.NoSuchOption(
                exc.option_name,
                f"No such option: {exc.option_name} (it follows the command, so it is the command's: put the command after --)",
                ctx=ctx,
            )
            hinted.hint = f"hutch {ctx.command_path.split(' ', 1)[-1]} {shlex.join(fixed)}"  # type: ignore[attr-defined]
            raise hinted from None


def dashes_fix(command: click.Command, args: list[str], unknown: str, leading: int) -> list[str] | None:
    """``args`` with ``--`` before the workload's command, when ``unknown`` came after its
    first word (else None: the option is simply unknown)."""
    if "--" in args:
        return None
    takes_value = {
        opt: not (p.is_flag or p.count)
        for p in command.params
        if isinstance(p, click.Option)
        for opt in (*p.opts, *p.secondary_opts)
    }
    positionals: list[int] = []
    skip = False
    for i, arg in enumerate(args):
        if skip:
            skip = False
        elif _is_option(arg, unknown):
            break
        elif arg.startswith("-") and arg != "-":
            skip = takes_value.get(arg, False)
        else:
            positionals.append(i)
    else:
        return None
    if len(positionals) <= leading:
        return None
    at = positionals[leading]
    return [*args[:at], "--", *args[at:]]


def _is_option(arg: str, option: str) -> bool:
    """Is ``arg`` the option, ``OPTION=VALUE``, or a cluster of short options holding it (``-la``)?"""
    if arg == option or arg.startswith(option + "="):
        return True
    return len(option) == 2 and arg.startswith("-") and not arg.startswith("--") and option[1] in arg


class WorkloadSandboxCommand(WorkloadCommand, SandboxCommand):
    """``exec``: a sandbox, then the workload's command."""

    leading = 1


# -- the option grammar: one meaning per kind of value, for every command ---------------
#
# DURATION  a number with an optional unit (ms, s, m, h, d); a bare number is seconds
# SIZE      a number with an optional binary unit (K, M, G, T; KiB ... too); a bare number is bytes
# N         a count: a whole number in the range the option states
# filters   options named after the field they match (--state, --status, --label, --type,
#           --run, --provider, --pending, --since); the sandbox a command acts on or lists
#           about is its SANDBOX argument (or --session-id); -a/--all widens to every one
# docs/cli.md ("Option grammar") documents it; tests/unit/test_cli_grammar.py holds it.


if TYPE_CHECKING:  # click >= 8.4 types its ParamType generically; older ones are plain classes
    _FloatParam = click.ParamType[float]
    _IntParam = click.ParamType[int]
else:
    _FloatParam = _IntParam = click.ParamType


def usage_error(message: str, hint: str, param: click.Parameter | None = None, ctx: click.Context | None = None) -> NoReturn:
    """A bad value on the command line: exit 2, ``invalid`` in JSON, with ``hint``."""
    exc = click.BadParameter(message, ctx=ctx, param=param)
    exc.hint = hint  # type: ignore[attr-defined]  # shown by hutch.cli.main
    raise exc


class Duration(_FloatParam):
    """DURATION -> seconds (float): ``90``, ``90s``, ``5m``, ``1.5h``, ``2d``, ``250ms``."""

    name = "duration"

    def __init__(self, at_most: float | None = None) -> None:
        self.at_most = at_most

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            seconds = parse_duration(value)
        except InvalidError as exc:
            usage_error(exc.message, exc.hint or "", param, ctx)
        if self.at_most is not None and seconds > self.at_most:
            most = next(
                f"{self.at_most / n:g}{u}" for u, n in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)) if self.at_most >= n
            )
            usage_error(f"{value!r} is longer than the most this option takes, {most}", f"give at most {most}", param, ctx)
        return seconds


class Size(_IntParam):
    """SIZE -> bytes (int): ``65536``, ``512K``, ``1M``, ``1.5GiB``."""

    name = "size"

    def __init__(self, at_most: int | None = None) -> None:
        self.at_most = at_most

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        try:
            size = parse_size(value)
        except InvalidError as exc:
            usage_error(exc.message, exc.hint or "", param, ctx)
        if self.at_most is not None and size > self.at_most:
            usage_error(
                f"{value!r} is more than the most this option takes, {format_size(self.at_most)}",
                f"give at most {format_size(self.at_most)}",
                param,
                ctx,
            )
        return size


DURATION = Duration()
SIZE = Size()


def count(low: int = 1, high: int | None = None) -> click.IntRange:
    """N: a whole number from ``low`` to ``high``."""
    return click.IntRange(low, high)


def old_spelling(old: str, new: str, dest: str, **option: Any) -> Callable[[F], F]:
    """``old`` still works as ``new`` (hidden from --help, noted on stderr when used);
    both at once is a usage error. Put it above ``@click.pass_obj``."""
    old_dest = "old_" + old.lstrip("-").replace("-", "_")

    def decorate(f: F) -> F:
        @functools.wraps(f)
        def wrapper(*args: Any, **kw: Any) -> Any:
            value = kw.pop(old_dest)
            if value is not None:
                if kw.get(dest) is not None:
                    raise click.UsageError(f"{old} is the old spelling of {new}: give only {new}")
                click.echo(f"hutch: {old} is now spelled {new}", err=True)
                kw[dest] = value
            return f(*args, **kw)

        return click.option(old, old_dest, hidden=True, help=f"Old spelling of {new}.", **option)(wrapper)  # type: ignore[return-value]

    return decorate


def json_option(f: F) -> F:
    def set_json(ctx: click.Context, _: click.Parameter, value: bool) -> bool:
        if value:
            ctx.ensure_object(Ctx).json = True
        return value

    return click.option(
        "--json",
        "json_",
        is_flag=True,
        expose_value=False,
        is_eager=True,
        callback=set_json,
        help='Print one JSON document on stdout (errors as {"error": {...}}).',
    )(f)


def human_bytes(n: int) -> str:
    """An amount of data for people: ``53 bytes``, ``1 byte``, ``4.0 KiB``, ``1.5 MiB``, ``2.0 GiB``."""
    if n < 1024:
        return f"{n} byte" + ("" if n == 1 else "s")
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            break
    return f"{value:.1f} {unit}"


def table(rows: list[list[str]], headers: list[str]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    click.echo("  ".join(h.upper().ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    for r in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
