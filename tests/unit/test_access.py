"""Keys, ownership, network default and ceiling, quotas and rates in the in-process Service
(fake provider, real SQLite), and the clients' rule for a 429."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from hutch.actors import Actor, Quotas, acting
from hutch.client.retry import MAX_RATE_WAIT, backoff, rate_wait
from hutch.errors import CapacityError, NotFoundError, PolicyError, RateLimitedError, UnauthorizedError
from hutch.models import SandboxSpec
from hutch.service import Service
from hutch.service.access import Bucket
from hutch.service.keys import actor_of


def _actor(service: Service, name: str, **kw: object) -> Actor:
    made = service.keys.create(name, **kw)  # type: ignore[arg-type]
    return service.keys.authenticate(made["key"])


def test_a_key_is_checked_revoked_rotated_and_expires(service: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    made = service.keys.create("alice", scopes=["read"], quotas={"sandboxes": 2})
    assert made["scopes"] == ["read"] and made["state"] == "active" and "hash" not in made
    actor = service.keys.authenticate(made["key"])
    assert (actor.id, actor.name, actor.admin, actor.quotas) == (made["id"], "alice", False, Quotas(sandboxes=2))
    assert not actor.allows("write")
    rotated = service.keys.rotate("alice")
    with pytest.raises(UnauthorizedError, match="unknown API key"):
        service.keys.authenticate(made["key"])
    assert service.keys.authenticate(rotated["key"]).id == made["id"]
    service.keys.revoke(made["id"])
    with pytest.raises(UnauthorizedError, match="revoked"):
        service.keys.authenticate(rotated["key"])
    short = service.keys.create("bob", ttl=60)
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 61)
    with pytest.raises(UnauthorizedError, match="expired"):
        service.keys.authenticate(short["key"])
    for bad in ("", "hk_", short["key"][:-1], short["key"] + "=", "Bearer " + short["key"]):
        with pytest.raises(UnauthorizedError) as exc:
            service.keys.authenticate(bad)
        assert (len(bad) < 8 or bad not in exc.value.message) and short["key"] not in exc.value.message


def test_key_requests_are_checked(service: Service) -> None:
    service.keys.create("carol")
    with pytest.raises(Exception, match="already exists"):
        service.keys.create("carol")
    for name in ("owner", "token", "no spaces", ""):
        with pytest.raises(Exception, match=r"reserved|invalid key name"):
            service.keys.create(name)
    with pytest.raises(Exception, match="unknown scope"):
        service.keys.create("dan", scopes=["root"])
    with pytest.raises(Exception, match="wider than its ceiling"):
        service.keys.create("dan", network_default={"mode": "open"}, network_ceiling={"mode": "none"})
    assert service.keys.create("erin", admin=True)["admin"] is True


def test_a_key_sees_and_touches_only_its_own(service: Service) -> None:
    alice, bob = _actor(service, "alice"), _actor(service, "bob")

    async def go() -> None:
        with acting(alice):
            box = await service.create(SandboxSpec(provider="fake"))
            assert box.owner == alice.id
        with acting(bob):
            assert service.list(include_all=True) == []
            with pytest.raises(NotFoundError):
                service.get(box.id)
            assert (await service.destroy(box.id))["existed"] is False
            assert all(e["sandbox_id"] != box.id for e in service.events.list())
        with acting(None):  # hutch itself, and the owner, see everything
            assert [r.id for r in service.list()] == [box.id]
            created = service.events.list(box.id, types=["sandbox_created"])
            assert created[0]["actor"] == alice.id

    asyncio.run(go())


def test_network_default_ceiling_quotas_and_run_rate(service: Service) -> None:
    row = service.store.keys.find(
        service.keys.create(
            "kim",
            quotas={"sandboxes": 1, "runs_per_minute": 1},
            network_default={"mode": "allowlist", "allow_hosts": ["example.com"]},
            network_ceiling={"mode": "allowlist", "allow_hosts": ["*.example.com", "example.com"]},
        )["id"]
    )
    kim = actor_of(row)

    async def go() -> None:
        with acting(kim):
            with pytest.raises(PolicyError, match="ceiling"):
                await service.create(SandboxSpec(provider="fake", network={"mode": "open"}))
            with pytest.raises(PolicyError, match="admin"):
                await service.create(SandboxSpec(provider="fake", mounts=[{"source": "/etc", "target": "/mnt"}]))
            given = service.access.admit(SandboxSpec(provider="fake"))  # asked for no network: the key's default
            assert given.network.mode == "allowlist" and given.network.allow_hosts == ["example.com"]
            box = await service.create(SandboxSpec(provider="fake", network={"mode": "none"}))  # the fake has none
            with pytest.raises(CapacityError, match="1 live sandboxes, its quota is 1"):
                await service.create(SandboxSpec(provider="fake", network={"mode": "none"}))
            with pytest.raises(PolicyError, match="ceiling"):
                await service.policy(box.id, mode="open")
            service.access.run_started()
            with pytest.raises(RateLimitedError) as exc:
                service.access.run_started()
            assert exc.value.retry_after is not None and 0 < exc.value.retry_after <= 60

    asyncio.run(go())


def test_a_token_bucket() -> None:
    now = [0.0]
    bucket = Bucket(2.0, 2.0, clock=lambda: now[0])
    assert [bucket.take(), bucket.take()] == [0.0, 0.0]
    assert bucket.take() == pytest.approx(0.5)
    now[0] = 0.5
    assert bucket.take() == 0.0
    now[0] = 100.0  # refilled, but never beyond its burst
    assert [bucket.take(), bucket.take()] == [0.0, 0.0] and bucket.take() > 0


def test_which_429s_the_clients_send_again() -> None:
    def body(kind: str, **extra: object) -> bytes:
        return json.dumps({"error": {"kind": kind, "message": "m"} | extra}).encode()

    assert rate_wait(429, {}, body("rate_limited", retry_after=0.25)) == 0.25
    assert rate_wait(429, {"retry-after": "2"}, body("rate_limited")) == 2.0
    assert rate_wait(429, {}, body("capacity")) is None  # a quota: waiting frees nothing
    assert rate_wait(429, {}, body("rate_limited", retry_after=MAX_RATE_WAIT + 1)) is None
    assert rate_wait(429, {}, b"<html>") is None and rate_wait(500, {}, body("rate_limited", retry_after=1)) is None
    waits = [backoff(0.5, n) for n in range(8) for _ in range(20)]
    assert all(0.5 <= w <= MAX_RATE_WAIT for w in waits) and len(set(waits)) > 100  # spread, bounded
