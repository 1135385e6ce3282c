"""The ``hutch`` command line. Thin: parse, one client call, render.

Every command goes through the command tree (click, :mod:`hutch.cli.tree`) but the two most
frequent in their plainest forms, ``hutch exec SANDBOX -- CMD [ARGS...]`` and ``hutch run --
CMD [ARGS...]`` with no option, which :mod:`hutch.cli.plain` runs without loading click (a
third of those processes' start).
"""

from __future__ import annotations

import sys

from hutch.cli.commands import COMMANDS, RUN_COMMANDS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["COMMANDS", "RUN_COMMANDS", "cli", "main"]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    from hutch.cli import plain

    if plain.applies(args):
        return plain.main(args)
    from hutch.cli.tree import main as parsed

    return parsed(args)


def __getattr__(name: str) -> Any:
    """The click objects (``cli``, ``LazyGroup``), loaded when something names them here."""
    if name in ("cli", "LazyGroup"):
        from hutch.cli import tree

        return getattr(tree, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
