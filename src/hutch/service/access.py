"""What the request's actor (hutch.actors) may see and do: ownership, the host's files, its
network default and ceiling, its quotas and its run rate.

Every sandbox, snapshot, tenant and approval records the actor that made it (``owner``); an
actor sees and touches only its own unless it is an admin, and what it may not see does not
exist for it (``not_found``, never ``unauthorized``, which would say that it exists). The
seam for things still to come (images, exposed ports): record ``owner()`` when one is made,
and pass each one read through ``visible()`` or filter lists by ``owner_filter()``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hutch.actors import Actor, current
from hutch.errors import CapacityError, PolicyError, RateLimitedError
from hutch.models import LIVE_STATES, NetworkPolicy, SandboxRecord, SandboxSpec
from hutch.store.sandboxes import no_sandbox
from hutch.units import format_size

if TYPE_CHECKING:
    from hutch.service import Service


class Bucket:
    """A token bucket: ``rate`` tokens a second, holding at most ``burst``."""

    def __init__(self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.burst = burst
        self.clock = clock
        self.tokens = burst
        self.at = clock()

    def take(self) -> float:
        """Take one token: 0.0 when there was one, else the seconds until there is."""
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate


class Buckets:
    """One bucket per key, made when first used and replaced when the key's rate changes."""

    def __init__(self) -> None:
        self._buckets: dict[str, Bucket] = {}

    def take(self, key: str, rate: float, burst: float) -> float:
        bucket = self._buckets.get(key)
        if bucket is None or bucket.rate != rate or bucket.burst != burst:
            bucket = self._buckets[key] = Bucket(rate, burst)
        return bucket.take()


def too_many(what: str, wait: float, limit: str) -> RateLimitedError:
    seconds = max(0.001, round(wait, 3))
    return RateLimitedError(
        f"too many {what} for this key (limit {limit}): retry in {seconds:g} s",
        hint="slow down; the client retries by itself after Retry-After, or ask an admin for a higher limit (hutch key create)",
        retry_after=seconds,
    )


class Access:
    """The access use-cases of :class:`hutch.service.Service` (one instance per Service)."""

    def __init__(self, service: Service) -> None:
        self.svc = service
        self.runs = Buckets()

    @staticmethod
    def actor() -> Actor:
        return current()

    @staticmethod
    def owner() -> str:
        """The owner recorded on what the request makes."""
        return current().id

    @staticmethod
    def owner_filter() -> str | None:
        """The owner a listing is limited to; None for an admin (everything)."""
        actor = current()
        return None if actor.admin else actor.id

    @staticmethod
    def visible(owner: str | None) -> bool:
        return current().owns(owner)

    def sandbox(self, rec: SandboxRecord, ref: str) -> SandboxRecord:
        """``rec``, when the actor may see it; otherwise it does not exist for the actor."""
        if not current().owns(rec.owner):
            raise no_sandbox(ref)
        return rec

    @staticmethod
    def host_files(what: str) -> None:
        """Features that reach the gateway host's own files are for admins (and the local user)."""
        actor = current()
        if not actor.admin:
            raise PolicyError(
                f"{what} uses files of the gateway's host: only an admin key may",
                hint="send the files from the client instead (hutch push, hutch write), or ask an admin",
            )

    # -- network default and ceiling -------------------------------------------------

    def admit(self, spec: SandboxSpec) -> SandboxSpec:
        """A new sandbox's spec as the actor may have it: its network (below), a ``--mount`` only for an admin."""
        if spec.mounts:
            self.host_files("--mount")
        return self.network(spec)

    def network(self, spec: SandboxSpec) -> SandboxSpec:
        """The key's default network for a spec that asks for none; refused when wider than its ceiling."""
        actor = current()
        if actor.network_default is not None and "network" not in spec.model_fields_set and spec.parent is None:
            spec = spec.model_copy(update={"network": NetworkPolicy.model_validate(actor.network_default)})
        self.ceiling(spec.network)
        return spec

    @staticmethod
    def ceiling(policy: NetworkPolicy) -> None:
        from hutch.service.lifecycle import network_wider

        actor = current()
        if actor.network_ceiling is None:
            return
        why = network_wider(NetworkPolicy.model_validate(actor.network_ceiling), policy)
        if why:
            raise PolicyError(
                f"this network policy is wider than key {actor.name}'s ceiling: {why.replace('parent', 'ceiling')}",
                hint="ask for less (see the key's network_ceiling in hutch key list), or ask an admin",
            )

    # -- quotas ------------------------------------------------------------------------

    def usage(self, owner: str) -> dict[str, Any]:
        live = self.svc.store.sandboxes.all(LIVE_STATES, owner=owner)
        return {"sandboxes": len(live), "memory": sum(r.spec.limits.memory for r in live)}

    def check_create(self, spec: SandboxSpec) -> None:
        """Before a create (under the Service's create lock): the key's live sandboxes and total memory stay within its quotas."""
        actor = current()
        quotas = actor.quotas
        if quotas.sandboxes is None and quotas.memory is None:
            return
        used = self.usage(actor.id)
        if quotas.sandboxes is not None and used["sandboxes"] + 1 > quotas.sandboxes:
            raise CapacityError(
                f"key {actor.name} has {used['sandboxes']} live sandboxes, its quota is {quotas.sandboxes}",
                hint="destroy one first (hutch list; hutch destroy SBX), or ask an admin for a higher quota",
            )
        if quotas.memory is not None and used["memory"] + spec.limits.memory > quotas.memory:
            raise CapacityError(
                f"key {actor.name} uses {format_size(used['memory'])} of memory in {used['sandboxes']} live sandboxes;"
                f" {format_size(spec.limits.memory)} more would pass its quota of {format_size(quotas.memory)}",
                hint="ask for less (--memory), destroy a sandbox first, or ask an admin for a higher quota",
            )

    def run_started(self) -> None:
        """Before a run is recorded: the key's runs per minute (a token bucket, bursts of a minute's worth)."""
        actor = current()
        limit = actor.quotas.runs_per_minute
        if limit is None:
            return
        wait = self.runs.take(actor.id, limit / 60.0, float(limit))
        if wait > 0:
            self.svc.metrics.limited.labels(key=actor.name, limit="runs").inc()
            raise too_many("runs", wait, f"{limit} a minute")
