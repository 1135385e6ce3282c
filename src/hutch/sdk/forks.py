"""The children ``fork`` made: read from the daemon's answer, destroyed with their parent."""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Protocol, TypeVar

from hutch.errors import HutchError

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from hutch import wire


class _Destroyable(Protocol):
    def destroy(self) -> object: ...


class _AsyncDestroyable(Protocol):
    def destroy(self) -> Awaitable[object]: ...


S = TypeVar("S", bound=_Destroyable)
A = TypeVar("A", bound=_AsyncDestroyable)


def children(result: wire.ForkResult) -> builtins.list[str | HutchError]:
    """Each child's sandbox id, or the error that stopped it."""
    return [c["sandbox"] or HutchError.from_dict(c) for c in result["children"]]


def destroy_all(forks: builtins.list[S]) -> None:
    """Destroy every child (idempotent: one already gone is fine); the first failure is
    raised once all were tried."""
    failed: builtins.list[HutchError] = []
    while forks:
        try:
            forks.pop(0).destroy()
        except HutchError as exc:
            failed.append(exc)
    if failed:
        raise failed[0]


async def destroy_all_async(forks: builtins.list[A]) -> None:
    """:func:`destroy_all`, awaited."""
    failed: builtins.list[HutchError] = []
    while forks:
        try:
            await forks.pop(0).destroy()
        except HutchError as exc:
            failed.append(exc)
    if failed:
        raise failed[0]
