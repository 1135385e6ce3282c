"""API keys of a gateway (``hutch key``): the request that makes one, the key as it is
shown, and the answers that carry its secret (create, rotate: field ``key``, printed once);
and the dashboard's one-time login link (``hutch ui``)."""

# No "from __future__ import annotations": Python 3.11 sees NotRequired/Required only in evaluated annotations.
from typing import Literal, NotRequired, TypedDict

from hutch.wire.sandboxes import NetworkPolicy

__all__ = [
    "KeyCreated",
    "KeyQuotas",
    "KeyRecord",
    "KeyRequest",
    "KeyRevoked",
    "KeyScope",
    "KeyState",
    "RotateRequest",
    "UiLink",
]

KeyScope = Literal["read", "write", "approve", "metrics", "admin"]
KeyState = Literal["active", "expired", "revoked"]


class KeyQuotas(TypedDict, total=False):
    """A key's limits; absent: none."""

    sandboxes: int | None  # live sandboxes at once
    memory: int | str | None  # total memory limit of its live sandboxes: bytes, or a size (8G)
    runs_per_minute: int | None
    rps: float | None  # requests per second (HTTP 429 with Retry-After past it)


class KeyRequest(TypedDict):
    """``POST /v1/keys``: a new key."""

    name: str
    ttl: NotRequired[float | str | None]  # seconds, or a duration (30d); expiry on the gateway's clock
    scopes: NotRequired[list[KeyScope]]  # default read, write
    admin: NotRequired[bool]  # adds the admin scope: every owner's things, keys, the host's files
    quotas: NotRequired[KeyQuotas]
    network_default: NotRequired[NetworkPolicy | None]  # what its sandboxes get when they ask for no network
    network_ceiling: NotRequired[NetworkPolicy | None]  # the widest network its sandboxes may ask for


class RotateRequest(TypedDict, total=False):
    """``POST /v1/keys/{ref}/rotate``: a new secret (the old one stops at once); a new TTL if given."""

    ttl: float | str | None


class KeyRecord(TypedDict):
    """A key as every answer shows it: never its secret or its hash."""

    id: str  # key_...: owns what the key makes
    name: str
    state: KeyState
    admin: bool
    scopes: list[KeyScope]
    quotas: KeyQuotas
    network_default: NotRequired[NetworkPolicy | None]
    network_ceiling: NotRequired[NetworkPolicy | None]
    created_at: float
    expires_at: NotRequired[float | None]
    revoked_at: NotRequired[float | None]
    rotated_at: NotRequired[float | None]
    created_by: NotRequired[str | None]  # the actor that made it


class KeyCreated(KeyRecord):
    """The answer of create and rotate: the only place the secret ever shows."""

    key: str  # hk_...


class KeyRevoked(KeyRecord):
    changed: bool  # false: it was revoked already


class UiLink(TypedDict):
    """``POST /v1/ui/links``: a one-time link that logs a browser into the dashboard as the caller."""

    url: str  # good once, until expires_at
    expires_at: float
    loopback: bool  # a listener of the local daemon on 127.0.0.1 (else the gateway's own address)
