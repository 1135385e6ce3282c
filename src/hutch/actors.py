"""Who a request acts as: its :class:`Actor`, resolved once at the HTTP edge
(:mod:`hutch.server.auth`: the owner of the unix socket, the ``--token-file`` token, an API
key, and later a client certificate bound to a key) and read below it by the Service (what
the actor may see and do, its quotas) and the store (the ``actor`` of every event, the
``owner`` of what a request makes).

The actor travels in a context variable: a request's tasks, and the tasks they start, see
its actor; work hutch does on its own (the reaper, adoption at start) has none, which the
Service treats as the owner's.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

SCOPES = ("read", "write", "approve", "metrics", "admin")  # admin: every scope, every owner's things, keys
DEFAULT_SCOPES = ("read", "write")
OWNER_ID = "owner"  # the local user (the unix socket's owner)
TOKEN_ID = "token"  # the --token-file token of hutch serve --listen


@dataclass(frozen=True)
class Quotas:
    """A key's limits (None: none). Sizes in bytes."""

    sandboxes: int | None = None  # live sandboxes at once
    memory: int | None = None  # total memory limit of its live sandboxes
    runs_per_minute: int | None = None
    rps: float | None = None  # requests per second (a token bucket; bursts of up to a second's worth)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass(frozen=True)
class Actor:
    id: str  # key_... for a key; owner / token for the daemon's own
    name: str
    scopes: frozenset[str]
    via: str = "key"  # unix | token | key (| certificate)
    quotas: Quotas = field(default_factory=Quotas)
    network_default: dict[str, Any] | None = None  # a NetworkPolicy body: what its sandboxes get when they ask for none
    network_ceiling: dict[str, Any] | None = None  # the widest NetworkPolicy it may ask for

    @property
    def admin(self) -> bool:
        return "admin" in self.scopes

    def allows(self, scope: str) -> bool:
        return self.admin or scope in self.scopes

    def owns(self, owner: str | None) -> bool:
        """May it see and touch what ``owner`` made (admins: everything)."""
        return self.admin or owner == self.id


OWNER = Actor(OWNER_ID, "owner", frozenset({"admin"}), via="unix")
TOKEN = Actor(TOKEN_ID, "token", frozenset({"admin"}), via="token")

_current: contextvars.ContextVar[Actor | None] = contextvars.ContextVar("hutch_actor", default=None)


def current() -> Actor:
    """The actor of the request in progress; the owner when hutch acts on its own."""
    return _current.get() or OWNER


def current_id() -> str | None:
    """The id recorded as an event's actor: None when hutch acts on its own."""
    actor = _current.get()
    return actor.id if actor is not None else None


def set_current(actor: Actor | None) -> contextvars.Token[Actor | None]:
    return _current.set(actor)


def reset_current(token: contextvars.Token[Actor | None]) -> None:
    _current.reset(token)


@contextmanager
def acting(actor: Actor | None) -> Iterator[None]:
    """Run a block as ``actor`` (None: as hutch itself)."""
    token = _current.set(actor)
    try:
        yield
    finally:
        _current.reset(token)
