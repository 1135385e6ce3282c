"""The warm pool's workflow (service/pool.py) on the fake provider: members handed out once
each, requests that need a different start created cold, refills, deaths while idle, the
memory cap, drains, images that go away, and members a previous daemon left."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import pytest

from hutch.config import Settings
from hutch.errors import ConflictError, InvalidError, NotFoundError
from hutch.models import ExecRequest, SandboxRecord, SandboxSpec
from hutch.provider import Capabilities, Death
from hutch.providers.fake import FakeProvider
from hutch.service import Service
from hutch.service.poolsizes import Shape

HOST = Shape("fake")
DEADLINE = 60.0


def fake(service: Service) -> FakeProvider:
    provider = service.provider("fake")
    assert isinstance(provider, FakeProvider)
    return provider


async def until(check: Callable[[], Any], what: str) -> Any:
    end = time.monotonic() + DEADLINE
    while not (value := check()):
        assert time.monotonic() < end, f"gave up waiting for {what}"
        await asyncio.sleep(0.01)
    return value


def ready(service: Service, shape: Shape = HOST) -> list[str]:
    return [m.id for m in service.pool.idle.get(shape, [])]


async def full(service: Service, shape: Shape = HOST) -> list[str]:
    await until(
        lambda: len(ready(service, shape)) >= service.pool.target(shape) and not service.pool.starting.get(shape), "a full pool"
    )
    return ready(service, shape)


def run(service: Service, body: Callable[[], Awaitable[None]]) -> None:
    async def go() -> None:
        service.pool.start()
        try:
            await body()
        finally:
            await service.close()

    asyncio.run(go())


@pytest.fixture
def settings(clean_env: pytest.MonkeyPatch, home: Any) -> Settings:
    return Settings.load(home=home, provider="fake", pool_size=3)


def test_a_create_takes_the_oldest_member_and_the_pool_refills(service: Service) -> None:
    async def body() -> None:
        members = await full(service)
        assert len(members) == 3
        rec = await service.create(SandboxSpec(provider="fake", name="warm", env={"A": "1"}, labels={"k": "v"}, ttl=60))
        assert rec.id == members[0] and rec.name == "warm" and rec.expires_at is not None
        result = await service.exec(rec.id, ExecRequest(command=["printenv", "A"]))
        assert result.stdout == "1\n"
        (created,) = service.store.events.all(rec.id, types=["sandbox_created"])
        assert created["data"]["pool"] is True
        assert [r.id for r in service.list()] == [rec.id]  # members are not sandboxes
        again = await full(service)
        assert len(again) == 3 and rec.id not in again
        assert {m.id for m in service.store.pool.members()} == set(again)

    run(service, body)


def test_a_request_that_needs_a_different_start_is_created_cold(service: Service) -> None:
    async def body() -> None:
        members = set(await full(service))
        parent = await service.create(SandboxSpec(provider="fake"))
        assert parent.id in members
        await full(service)
        members = set(ready(service))
        cold = [
            await service.create(SandboxSpec(provider="fake", tenant="t1")),
            await service.lifecycle.subagent(parent.id, SandboxSpec(provider="fake")),
        ]
        for rec in cold:
            assert rec.id not in members
            (created,) = service.store.events.all(rec.id, types=["sandbox_created"])
            assert "pool" not in created["data"]
        assert set(ready(service)) == members  # untouched
        assert service.pool.refusal(SandboxSpec(provider="fake", tenant="t"), fake(service)) == "it needs a different start"
        assert service.pool.refusal(SandboxSpec(provider="fake", limits={"memory": "2G"}), fake(service)) is None
        # cold: another start (an image is its own shape)
        for start in ({"user": "1000"}, {"provider_options": {"ssh": "1"}}, {"limits": {"disk": "1G"}}):
            assert service.pool.refusal(SandboxSpec(provider="fake", **start), fake(service)) is not None

    run(service, body)


def test_many_parallel_creates_never_get_the_same_member(service: Service) -> None:
    async def body() -> None:
        await service.pool.set(None, 20)
        members = set(await full(service))
        assert len(members) == 20
        recs = await asyncio.gather(*(service.create(SandboxSpec(provider="fake")) for _ in range(40)))
        ids = [r.id for r in recs]
        assert len(set(ids)) == 40
        pooled = [i for i in ids if i in members]
        assert len(pooled) == 20  # every member went to exactly one create, the rest were cold
        assert fake(service).calls.count(("create", pooled[0])) == 1

    run(service, body)


def test_a_taken_name_leaves_the_member_in_the_pool(service: Service) -> None:
    async def body() -> None:
        await full(service)
        await service.create(SandboxSpec(provider="fake", name="one"))
        members = await full(service)
        with pytest.raises(ConflictError):
            await service.create(SandboxSpec(provider="fake", name="one"))
        assert ready(service) == members

    run(service, body)


def test_a_member_that_died_while_idle_is_never_handed_out_and_is_replaced(service: Service) -> None:
    async def body() -> None:
        members = await full(service)
        await fake(service).die(members[0], Death(signal=9))
        assert members[0] not in ready(service)
        (event,) = service.store.events.all(types=["pool_member_destroyed"])
        assert event["data"]["member"] == members[0] and "died while idle" in event["data"]["why"]
        rec = await service.create(SandboxSpec(provider="fake"))
        assert rec.id == members[1]
        # one that died without its watcher telling (gone at the provider): skipped, destroyed
        fake(service).sandboxes.pop(members[2])
        fake(service).watched.pop(members[2])
        rec = await service.create(SandboxSpec(provider="fake"))
        assert rec.id != members[2]
        assert members[2] not in {m.id for m in service.store.pool.members()}
        assert [r.id for r in service.list(include_all=True)].count(members[2]) == 0
        assert len(await full(service)) == 3

    run(service, body)


def test_a_pool_larger_than_memory_allows_is_capped_and_doctor_says_so(service: Service) -> None:
    async def body() -> None:
        fake(service).free_memory = 64 << 20  # 16 MiB may go to members: 16 of 1 MiB each
        await full(service)
        status = await service.pool.set(None, 500)
        (pool,) = status["pools"]
        assert pool["size"] == 500 and pool["target"] < 500 and "capped" in pool["capped"]
        members = await full(service)
        assert len(members) == service.pool.target(HOST) < 500
        doctor = await service.doctor()
        (check,) = [c for c in doctor["checks"] if c["name"] == "pool"]
        assert not check["ok"] and "capped" in check["detail"] and "hutch pool set --size" in check["fix"]
        await service.pool.set(None, 2)
        await until(lambda: len(ready(service)) == 2, "the smaller pool")
        (check,) = [c for c in (await service.doctor())["checks"] if c["name"] == "pool"]
        assert check["ok"] and "host 2/2 ready (2 MiB)" in check["detail"]

    run(service, body)


def test_drain_destroys_the_members_and_keeps_the_pool_empty(service: Service) -> None:
    async def body() -> None:
        members = await full(service)
        out = await service.pool.drain()
        assert out["drained"] == {"host": 3} and out["members"] == 0
        assert all(m not in fake(service).sandboxes for m in members)
        assert service.store.pool.members() == []
        await asyncio.sleep(0.1)
        assert ready(service) == [] and service.pool.target(HOST) == 0
        status = await service.pool.set(None, 1)
        assert status["pools"][0]["size"] == 1
        assert len(await full(service)) == 1

    run(service, body)


def test_bad_pool_sizes_and_images_are_refused(service: Service) -> None:
    async def body() -> None:
        for size in (-1, 1001):
            with pytest.raises(InvalidError) as info:
                await service.pool.set(None, size)
            assert info.value.hint
        with pytest.raises(InvalidError) as info:
            await service.pool.set("alpine:3", 1)
        assert "does not boot images" in info.value.message

    run(service, body)


class ImageFake(FakeProvider):
    """A fake that boots images: ``gone:*`` no longer exists."""

    capabilities = replace(FakeProvider.capabilities, images=True)

    def __init__(self) -> None:
        super().__init__()
        self.gone = {"gone:1"}

    async def create(self, rec: SandboxRecord) -> tuple[dict[str, Any], dict[str, str]]:
        if rec.spec.image in self.gone:
            raise NotFoundError(f"no image {rec.spec.image}", hint="pull it")
        return await super().create(rec)


def test_a_pool_whose_image_is_removed_is_drained_with_an_event(service: Service) -> None:
    service._providers["fake"] = ImageFake()

    async def body() -> None:
        await service.pool.set("alpine:3", 2)
        alpine = Shape("fake", "alpine:3")
        members = await full(service, alpine)
        rec = await service.create(SandboxSpec(provider="fake", image="alpine:3"))
        assert rec.id in members  # an image's pool serves creates of that image
        names = {"alpine:3": "img-alpine"}  # what the image store resolves

        def find(text: str) -> dict[str, Any] | None:
            return {"id": names[text]} if text in names else None

        shapes = service.pool.image_ids(find)["img-alpine"]
        assert shapes == [alpine]
        del names["alpine:3"]  # hutch image rm alpine:3
        await service.pool.image_removed("img-alpine", shapes, "alpine:3", find)
        await until(lambda: not ready(service, alpine) and not service.pool.starting.get(alpine), "the drain")
        (event,) = service.store.events.all(types=["pool_drained"])
        assert event["data"]["shape"] == "alpine:3" and "removed" in event["data"]["why"]
        assert alpine not in service.pool.sizes()
        # an image that cannot start: refused at once, nothing kept
        with pytest.raises(NotFoundError):
            await service.pool.set("gone:1", 2)
        assert Shape("fake", "gone:1") not in service.pool.sizes()
        assert all(m.image != "gone:1" for m in service.store.pool.members())
        # one that goes away later, found when the pool refills: drained as well
        await service.pool.set("later:1", 1)
        fake(service).gone.add("later:1")
        later = Shape("fake", "later:1")
        member = ready(service, later)[0]
        await fake(service).die(member, Death(signal=9))
        await until(lambda: len(service.store.events.all(types=["pool_drained"])) == 2, "a second drain")
        assert later not in service.pool.sizes()
        assert rec.id in fake(service).sandboxes  # a sandbox already handed out stays

    run(service, body)


def test_members_a_previous_daemon_left_are_adopted_or_destroyed(settings: Settings) -> None:
    first = Service(settings)
    provider = fake(first)

    async def go() -> None:
        first.pool.start()
        members = await full(first)
        first.pool._running = False  # killed: nothing of it runs any more, nothing is cleaned
        await provider.die(members[0], Death(signal=9))  # died while the daemon was down
        first.store.pool.add("sbx_halfmade", "fake", "", SandboxSpec(provider="fake"))  # killed while starting one
        second = Service(settings, first.store)
        second._providers["fake"] = provider
        await second.start()
        report = second.pool.recovered
        assert sorted(report["adopted"]) == sorted(members[1:])
        assert report["cleaned"] == ["sbx_halfmade"]  # the dead one was removed when its death was told
        second.pool.start()
        again = await full(second)
        assert set(members[1:]) <= set(again) and members[0] not in again
        await second.close()
        assert second.store.pool.members() == []
        assert not any(m in provider.sandboxes for m in again)

    asyncio.run(go())


def test_a_service_that_does_not_start_the_pool_never_fills_it(service: Service) -> None:
    async def go() -> None:
        rec = await service.create(SandboxSpec(provider="fake"))
        await asyncio.sleep(0.05)
        assert ready(service) == [] and service.store.pool.members() == []
        assert (await service.pool.status())["pools"][0]["ready"] == 0
        assert rec.id in fake(service).sandboxes
        await service.close()

    asyncio.run(go())


def test_capabilities_declare_the_pool() -> None:
    assert Capabilities().pool is False
    assert FakeProvider.capabilities.pool is True
