"""hutch catalog: every command, option and argument, as JSON generated from the click tree."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

import click

from hutch.cli.common import emit, json_option

CATALOG_VERSION = 1
_UNSET = getattr(click.core, "UNSET", None)  # click >= 8.3 marks "no default" with a sentinel


def subcommands(group: click.Group, ctx: click.Context | None = None) -> list[tuple[str, click.Command]]:
    """A group's commands by name, sorted; a lazy group imports each (its ``commands`` holds only those loaded)."""
    ctx = ctx or click.Context(group)
    found = ((name, group.get_command(ctx, name)) for name in sorted(group.list_commands(ctx)))
    return [(name, sub) for name, sub in found if sub is not None]


def walk(
    command: click.Command, ctx: click.Context | None = None
) -> Iterator[tuple[tuple[str, ...], click.Command, click.Context]]:
    """Every command of the tree, depth first, with its path and a context to render it."""
    name = command.name or "hutch"
    here = click.Context(command, info_name=name, parent=ctx)
    path = (*ctx.command_path.split()[1:], name) if ctx is not None else ()
    yield path, command, here
    if isinstance(command, click.Group):
        for _, sub in subcommands(command, here):
            yield from walk(sub, here)


def _plain(value: Any) -> Any:
    if value is _UNSET or callable(value):
        return None
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def _type(param: click.Parameter) -> str:
    return "flag" if isinstance(param, click.Option) and param.is_flag else param.type.name


def option_info(opt: click.Option, ctx: click.Context) -> dict[str, Any]:
    flags = [*opt.opts, *opt.secondary_opts]
    default = _plain(opt.get_default(ctx, call=False))
    info: dict[str, Any] = {
        "name": next((f for f in flags if f.startswith("--")), flags[0]),
        "flags": flags,
        "type": _type(opt),
        "default": False if opt.is_flag and default is None else [] if opt.multiple and default is None else default,
        "help": opt.help or "",
        "required": opt.required,
        "multiple": opt.multiple,
    }
    if isinstance(opt.type, click.Choice):
        info["choices"] = [str(c) for c in opt.type.choices]
    if opt.metavar:
        info["metavar"] = opt.metavar
    if opt.envvar:
        info["envvar"] = opt.envvar
    if opt.hidden:
        info["hidden"] = True
    return info


def argument_info(arg: click.Argument) -> dict[str, Any]:
    return {
        "name": arg.human_readable_name,
        "type": _type(arg),
        "required": arg.required,
        "nargs": arg.nargs,
    }


def _help(text: str | None) -> str:
    """The help as written, without click's no-rewrap markers."""
    return "\n".join(line for line in inspect.cleandoc(text or "").splitlines() if line.strip() != "\b").strip()


def command_info(path: tuple[str, ...], command: click.Command, ctx: click.Context) -> dict[str, Any]:
    return {
        "name": " ".join(path),
        "usage": " ".join(["hutch", *path, *command.collect_usage_pieces(ctx)]),
        "help": _help(command.help),
        "short_help": command.get_short_help_str(limit=120),
        "options": [option_info(p, ctx) for p in command.params if isinstance(p, click.Option)],
        "arguments": [argument_info(p) for p in command.params if isinstance(p, click.Argument)],
        "subcommands": [name for name, _ in subcommands(command, ctx)] if isinstance(command, click.Group) else [],
    }


def build_catalog(root: click.Command) -> dict[str, Any]:
    """``{"catalog_version": 1, "global_options": [...], "commands": [...]}`` for ``root``."""
    entries = list(walk(root))
    root_ctx = entries[0][2]
    return {
        "catalog_version": CATALOG_VERSION,
        "global_options": [option_info(p, root_ctx) for p in root.params if isinstance(p, click.Option)],
        "commands": [command_info(path, cmd, ctx) for path, cmd, ctx in entries[1:]],
    }


@click.command()
@json_option
@click.pass_context
def catalog(ctx: click.Context) -> None:
    """Print every command, option and argument as one JSON document (always JSON).

    Generated from the CLI itself: {"catalog_version": 1, "global_options": [...],
    "commands": [{"name", "usage", "help", "options", "arguments", ...}]}.
    """
    emit(build_catalog(ctx.find_root().command))
