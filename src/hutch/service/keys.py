"""API keys: made, listed, revoked, rotated, and each request's key checked.

A key reads ``hk_<16 hex: its id>_<43 characters: the secret>``. The store keeps its
SHA-256 only; a request's key is hashed and compared with :func:`hmac.compare_digest`
(against a stand-in hash when the id is unknown, so an unknown id costs the same). A key
is checked against the store on every request: a revoke, a rotation or an expiry takes
effect on the next one. Expiry is the gateway's clock only: a TTL given by a client becomes
an absolute time here, so a client's clock skew changes nothing. The secret appears in the
answer of create and rotate and nowhere else (not in the store, events, logs or errors).
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import re
import secrets
import time
from typing import TYPE_CHECKING, Any

from hutch.actors import DEFAULT_SCOPES, OWNER_ID, SCOPES, TOKEN_ID, Actor, Quotas, current
from hutch.checks import NAME_HINT, is_name
from hutch.errors import ConflictError, InvalidError, UnauthorizedError
from hutch.models import NetworkPolicy

if TYPE_CHECKING:
    from hutch.service import Service

KEY_RE = re.compile(r"hk_([0-9a-f]{16})_([A-Za-z0-9_-]{43})")
MAX_KEY_TTL = 10 * 365 * 86400.0
STAND_IN = hashlib.sha256(b"no such key").hexdigest()
KEY_HINT = "use a key made by this gateway's hutch key create (HUTCH_TOKEN_FILE or HUTCH_TOKEN), or ask its admin for one"


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_secret() -> tuple[str, str]:
    """A new key id (``key_...``) and its secret (``hk_...``)."""
    idhex = secrets.token_hex(8)
    return f"key_{idhex}", f"hk_{idhex}_{secrets.token_urlsafe(32)}"


def looks_like_key(token: str) -> bool:
    return token.startswith("hk_")


def public(row: dict[str, Any], now: float | None = None) -> dict[str, Any]:
    """A key as it is shown: never its hash."""
    now = time.time() if now is None else now
    state = (
        "revoked"
        if row["revoked_at"]
        else ("expired" if row["expires_at"] is not None and row["expires_at"] <= now else "active")
    )
    return {k: v for k, v in row.items() if k != "hash"} | {"state": state, "admin": "admin" in row["scopes"]}


def actor_of(row: dict[str, Any]) -> Actor:
    return Actor(
        id=row["id"],
        name=row["name"],
        scopes=frozenset(row["scopes"]),
        via="key",
        quotas=Quotas(**row["quotas"]),
        network_default=row["network_default"],
        network_ceiling=row["network_ceiling"],
    )


def check_scopes(scopes: list[str], admin: bool) -> list[str]:
    unknown = sorted(set(scopes) - set(SCOPES))
    if unknown:
        raise InvalidError(f"unknown scope {unknown[0]!r}", hint=f"use {', '.join(SCOPES)}")
    chosen = set(scopes or DEFAULT_SCOPES) | ({"admin"} if admin else set())
    return sorted(chosen)


class Keys:
    """The key use-cases of :class:`hutch.service.Service` (one instance per Service)."""

    def __init__(self, service: Service) -> None:
        self.svc = service
        self.store = service.store
        self._actors: dict[str, tuple[dict[str, Any], Actor]] = {}  # by key id: the row it was made of, the actor

    def create(
        self,
        name: str,
        *,
        ttl: float | None = None,
        scopes: list[str] | None = None,
        admin: bool = False,
        quotas: dict[str, Any] | None = None,
        network_default: dict[str, Any] | None = None,
        network_ceiling: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        if not is_name(name):
            raise InvalidError(f"invalid key name {name!r}", hint=NAME_HINT)
        if name in (OWNER_ID, TOKEN_ID):
            raise InvalidError(f"the key name {name!r} is reserved (it names the daemon's own actors)", hint="choose another")
        if ttl is not None and not 0 < ttl <= MAX_KEY_TTL:
            raise InvalidError(f"--ttl must be between 1s and 3650d, got {ttl:g} s", hint="e.g. --ttl 30d")
        if network_default is not None and network_ceiling is not None:
            from hutch.service.lifecycle import network_wider

            why = network_wider(NetworkPolicy.model_validate(network_ceiling), NetworkPolicy.model_validate(network_default))
            if why:
                raise InvalidError(
                    f"the key's default network is wider than its ceiling: {why.replace('parent', 'ceiling')}",
                    hint="narrow --network-default or widen --network-ceiling",
                )
        key_id, secret = new_secret()
        now = time.time()
        row = {
            "id": key_id,
            "name": name,
            "hash": digest(secret),
            "scopes": check_scopes(scopes or [], admin),
            "quotas": Quotas(**(quotas or {})).to_dict(),
            "network_default": network_default,
            "network_ceiling": network_ceiling,
            "created_at": now,
            "expires_at": now + ttl if ttl else None,
            "revoked_at": None,
            "rotated_at": None,
            "created_by": current().id,
        }
        self.store.keys.insert(row)
        return public(row, now) | {"key": secret}

    def list(self) -> list[dict[str, Any]]:
        now = time.time()
        return [public(row, now) for row in self.store.keys.all()]

    def get(self, ref: str) -> dict[str, Any]:
        return public(self.store.keys.find(ref))

    def revoke(self, ref: str) -> dict[str, Any]:
        """Idempotent: a key already revoked is a success that says so (``revoked`` stays true)."""
        row = self.store.keys.find(ref)
        changed = self.store.keys.revoke(row["id"], time.time())
        return public(self.store.keys.find(row["id"])) | {"changed": changed}

    def rotate(self, ref: str, ttl: float | None = None) -> dict[str, Any]:
        """A new secret for the same key (same id: what it owns stays its own); the old one stops at once."""
        row = self.store.keys.find(ref)
        if ttl is not None and not 0 < ttl <= MAX_KEY_TTL:
            raise InvalidError(f"--ttl must be between 1s and 3650d, got {ttl:g} s", hint="e.g. --ttl 30d")
        if row["revoked_at"]:
            raise ConflictError(f"key {row['name']} ({row['id']}) is revoked", hint="make a new one with hutch key create")
        idhex = row["id"].removeprefix("key_")
        secret = f"hk_{idhex}_{secrets.token_urlsafe(32)}"
        now = time.time()
        expires = now + ttl if ttl else row["expires_at"]
        if not self.store.keys.rotate(row["id"], digest(secret), now, expires):
            raise ConflictError(f"key {row['name']} ({row['id']}) was revoked meanwhile", hint="hutch key create")
        return public(self.store.keys.find(row["id"]), now) | {"key": secret}

    # -- each request --------------------------------------------------------------------

    def authenticate(self, token: str) -> Actor:
        """The actor of a request that carries ``token`` (an ``hk_`` key); ``unauthorized`` otherwise.
        Messages never contain the token."""
        match = KEY_RE.fullmatch(token)
        if match is None:
            raise UnauthorizedError(
                f"malformed API key ({len(token)} characters): a key is hk_, 16 hex digits, _ and 43 more characters",
                hint="copy the whole key as hutch key create printed it; " + KEY_HINT,
            )
        row = self.store.keys.get(f"key_{match.group(1)}")
        ok = hmac.compare_digest(digest(token), row["hash"] if row else STAND_IN)
        if row is None or not ok:
            raise UnauthorizedError("unknown API key: not one of this gateway's, or replaced by hutch key rotate", hint=KEY_HINT)
        return self._live(row)

    def actor(self, key_id: str, via: str = "key") -> Actor:
        """The actor of key ``key_id`` (a client certificate bound to it: ``via`` certificate),
        checked as :meth:`authenticate` checks a key; ``unauthorized`` when it is not live."""
        row = self.store.keys.get(key_id)
        if row is None:
            raise UnauthorizedError(f"the key {key_id} this credential is bound to is gone", hint=KEY_HINT)
        return dataclasses.replace(self._live(row), via=via)

    def _live(self, row: dict[str, Any]) -> Actor:
        if row["revoked_at"]:
            raise UnauthorizedError(f"API key {row['name']} ({row['id']}) was revoked", hint=KEY_HINT)
        now = time.time()
        if row["expires_at"] is not None and row["expires_at"] <= now:
            when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(row["expires_at"]))
            raise UnauthorizedError(f"API key {row['name']} ({row['id']}) expired at {when} (gateway time)", hint=KEY_HINT)
        made = self._actors.get(row["id"])
        if made is not None and made[0] is row:  # the store's kept row: nothing changed since
            return made[1]
        actor = actor_of(row)
        if len(self._actors) >= 4096:
            self._actors.clear()
        self._actors[row["id"]] = (row, actor)
        return actor
