"""``typing.cast`` without importing ``typing``.

``typing`` (with ``re``, ``collections``, ``functools`` and ``contextlib``) is about a third of a
CLI process's start; the modules that ``hutch exec`` and ``hutch run`` load keep it for the
type checker only (``TYPE_CHECKING = False`` at the top, the typing names under it) and take
:func:`cast` from here: the type checker sees ``typing.cast``, the program a function that
returns its value.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import cast as cast
else:

    def cast(_type, value):
        return value
