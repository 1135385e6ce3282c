"""Dashboard sessions: a browser's login, bound to the actor that logged in (and, for its
pages, the live resource use of sandboxes: :meth:`Sessions.usage`).

A browser cannot send ``Authorization: Bearer``; it logs in once and holds a session id
instead (the HTTP edge keeps it in an HttpOnly cookie). Two ways in:

- :meth:`Sessions.login`: an API key typed into the login page (checked like any request's);
- :meth:`Sessions.link` then :meth:`Sessions.exchange`: a one-time login link minted by a
  caller that is already authenticated (``hutch ui``), good once and for a few minutes.

Sessions live in the daemon's memory only (a restart logs everyone out), are looked up by
the SHA-256 of their id (never compared byte by byte), expire, and are bounded in number.
A session made with a key is re-checked against the store on every request: the key's
revocation or expiry ends the session at once. Each session has its own CSRF token, which
every request that changes something must carry (:mod:`hutch.server.ui.guard`).
"""

from __future__ import annotations

import contextlib
import hashlib
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hutch.actors import Actor, current
from hutch.errors import HutchError, UnauthorizedError
from hutch.models import LIVE_STATES, SandboxRecord, SandboxState
from hutch.provider import Usage, usage_provider
from hutch.service.keys import actor_of, public

if TYPE_CHECKING:
    from hutch.service import Service

SESSION_TTL = 12 * 3600.0
LINK_TTL = 300.0
MAX_SESSIONS = 10_000  # the oldest goes first past this
MAX_LINKS = 1_000
LOGIN_HINT = "log in again: open a new link from hutch ui, or use an API key on the login page"


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "replace")).hexdigest()


@dataclass(frozen=True)
class Session:
    actor: Actor  # as it was at login; a key's is re-read on every request
    csrf: str
    expires_at: float


class Sessions:
    """The session use-cases of :class:`hutch.service.Service` (one instance per Service)."""

    def __init__(self, service: Service) -> None:
        self.svc = service
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._links: OrderedDict[str, tuple[Actor, float]] = OrderedDict()

    # -- in ------------------------------------------------------------------------------

    def login(self, key: str) -> tuple[str, Session]:
        """A session for the API key ``key`` (``unauthorized`` as for a request with it)."""
        return self._open(self.svc.keys.authenticate(key))

    def link(self, ttl: float = LINK_TTL) -> tuple[str, float]:
        """A one-time login token for the request's actor, and when it expires."""
        self._drop_expired()
        token = secrets.token_urlsafe(32)
        expires = time.time() + ttl
        self._links[_digest(token)] = (current(), expires)
        while len(self._links) > MAX_LINKS:
            self._links.popitem(last=False)
        return token, expires

    def exchange(self, token: str) -> tuple[str, Session]:
        """The session a one-time login token opens; the token is spent whether or not it was still good."""
        found = self._links.pop(_digest(token), None)
        if found is None or found[1] <= time.time():
            raise UnauthorizedError("this login link is spent, expired or not this daemon's", hint=LOGIN_HINT)
        return self._open(self._current(found[0]))

    def _open(self, actor: Actor) -> tuple[str, Session]:
        self._drop_expired()
        sid = secrets.token_urlsafe(32)
        session = Session(actor, secrets.token_urlsafe(32), time.time() + SESSION_TTL)
        self._sessions[_digest(sid)] = session
        while len(self._sessions) > MAX_SESSIONS:
            self._sessions.popitem(last=False)
        return sid, session

    # -- each request ----------------------------------------------------------------------

    def authenticate(self, sid: str) -> tuple[Actor, Session]:
        """The actor of a request that carries session id ``sid``; ``unauthorized`` otherwise."""
        key = _digest(sid)
        session = self._sessions.get(key)
        if session is None or session.expires_at <= time.time():
            self._sessions.pop(key, None)
            raise UnauthorizedError("not logged in, or the session has expired", hint=LOGIN_HINT)
        try:
            actor = self._current(session.actor)
        except UnauthorizedError:
            self._sessions.pop(key, None)
            raise
        return actor, session

    def logout(self, sid: str) -> bool:
        return self._sessions.pop(_digest(sid), None) is not None

    def _current(self, actor: Actor) -> Actor:
        """``actor`` as the store has it now: a key revoked, expired or gone ends its sessions."""
        if actor.via != "key":
            return actor  # the local owner, the --token-file token
        row = self.svc.store.keys.get(actor.id)
        state = public(row)["state"] if row is not None else "gone"
        if row is None or state != "active":
            raise UnauthorizedError(f"the key of this session ({actor.name}) is {state}", hint=LOGIN_HINT)
        return actor_of(row)

    # -- what the dashboard shows ----------------------------------------------------------

    def sandboxes_page(self, page: int, per_page: int) -> tuple[list[SandboxRecord], int]:
        """The dashboard's overview: page ``page`` (from 1) of the live (and lost) sandboxes the
        actor may see, newest first, and how many there are in all."""
        states = (*LIVE_STATES, SandboxState.lost)
        offset = (max(1, page) - 1) * per_page
        return self.svc.store.sandboxes.page(states, self.svc.access.owner_filter(), offset, per_page)

    def usage(self, records: list[SandboxRecord]) -> dict[str, Usage]:
        """What each running sandbox of ``records`` uses now, by id (those whose provider measures it)."""
        out: dict[str, Usage] = {}
        for rec in records:
            if rec.state != SandboxState.running or rec.provider not in self.svc.loaded():
                continue  # a provider not loaded yet has no running sandbox of this daemon's to measure
            provider = self.svc.provider(rec.provider)
            if provider.capabilities.usage:
                with contextlib.suppress(HutchError, OSError):
                    out[rec.id] = usage_provider(provider).usage(rec)
        return out

    def _drop_expired(self) -> None:
        now = time.time()
        for table in (self._sessions, self._links):
            dead = [k for k, v in table.items() if (v.expires_at if isinstance(v, Session) else v[1]) <= now]
            for k in dead:
                del table[k]
