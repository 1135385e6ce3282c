"""When the warm pool refills (service/pool.py), on the fake provider: a create that finds a
member starting does not wait for it; a ``hutch run`` holds
refills while it lasts and lets them start at once when it ends (a script's next run finds a
member), but no longer than JOB_HOLD; a plain create still keeps REFILL_QUIET for its first
runs."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from tests.unit.test_pool import fake, ready, run, until

from hutch.config import Settings
from hutch.models import ExecRequest, SandboxRecord, SandboxSpec
from hutch.service import Service
from hutch.service import pool as pool_module
from hutch.service.oneshot import Job, RunOnce
from hutch.service.poolsizes import Shape

HOST = Shape("fake")
DEADLINE = 60.0
NEVER = 3600.0  # a quiet time no test waits out: a refill that comes came for another reason


@pytest.fixture
def settings(clean_env: pytest.MonkeyPatch, home: Any) -> Settings:
    return Settings.load(home=home, provider="fake", pool_size=1)


def gate_creates(service: Service, monkeypatch: pytest.MonkeyPatch) -> tuple[asyncio.Event, list[str]]:
    """Member starts (creates of records marked pool_member) wait for the returned event."""
    provider = fake(service)
    real = provider.create
    opened = asyncio.Event()
    started: list[str] = []

    async def create(rec: SandboxRecord) -> tuple[dict[str, Any], dict[str, str]]:
        if rec.data.get("pool_member"):
            started.append(rec.id)
            await opened.wait()
        return await real(rec)

    monkeypatch.setattr(provider, "create", create)
    return opened, started


async def drain_frames(job: Job) -> list[dict[str, Any]]:
    frames = []
    while (frame := await job.next()) is not None:
        frames.append(frame)
    return frames


def test_a_create_does_not_wait_for_a_member_that_is_starting(service: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    """The member starts at the lowest cpu priority: on a busy machine a create waiting for it
    would wait longer than a cold create takes."""

    async def body() -> None:
        opened, started = gate_creates(service, monkeypatch)
        await until(lambda: started, "a member starting")
        rec = await asyncio.wait_for(service.create(SandboxSpec(provider="fake")), DEADLINE)  # the gate stays shut
        assert rec.id not in started and service.pool.starting.get(HOST) == 1
        (event,) = service.store.events.all(rec.id, types=["sandbox_created"])
        assert "pool" not in event["data"]
        opened.set()
        assert await until(lambda: ready(service), "the member, ready after all") == started

    run(service, body)


def test_a_hutch_run_lets_the_pool_refill_as_soon_as_it_ends(service: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pool_module, "REFILL_QUIET", NEVER)

    async def body() -> None:
        (member,) = await until(lambda: ready(service), "a member")
        job = service.oneshot.start(RunOnce(exec=ExecRequest(command=["true"]), spec=SandboxSpec(provider="fake")))
        frames = await drain_frames(job)
        assert frames[0]["sandbox_id"] == member and frames[-1]["type"] == "done" and frames[-1]["destroyed"]
        (again,) = await until(lambda: ready(service), "a refill after the run's end")
        assert again != member
        # a plain create keeps its quiet time: no refill follows it here
        rec = await service.create(SandboxSpec(provider="fake"))
        assert rec.id == again
        await asyncio.sleep(0.3)
        assert ready(service) == [] and not service.pool.starting.get(HOST)

    run(service, body)


def test_a_long_hutch_run_holds_refills_no_longer_than_job_hold(service: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pool_module, "REFILL_QUIET", 0.0)
    monkeypatch.setattr(pool_module, "JOB_HOLD", NEVER)

    async def body() -> None:
        (member,) = await until(lambda: ready(service), "a member")
        job = service.oneshot.start(RunOnce(exec=ExecRequest(command=["sleep", "30"]), spec=SandboxSpec(provider="fake")))
        assert (await job.next() or {}).get("sandbox_id") == member
        await asyncio.sleep(0.3)
        assert ready(service) == [] and not service.pool.starting.get(HOST)  # held while the run goes on
        monkeypatch.setattr(pool_module, "JOB_HOLD", 0.1)
        service.pool._wake()  # the filler looks again (it would at its next timeout)
        (again,) = await until(lambda: ready(service), "a refill while the long run goes on")
        assert again != member
        job.leave()
        assert job.task is not None
        await asyncio.wait_for(job.task, DEADLINE)

    run(service, body)


def test_a_refill_that_stopped_on_an_error_is_started_again_by_the_next_create(
    service: Service, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def body() -> None:
        (member,) = await until(lambda: ready(service), "a member")
        real = service.pool._wait_quiet
        calls = 0

        async def broken() -> None:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise RuntimeError("a bug in the refill")
            await real()

        monkeypatch.setattr(service.pool, "_wait_quiet", broken)
        assert (await service.create(SandboxSpec(provider="fake"))).id == member  # its refill dies on the bug
        await until(lambda: service.pool._fillers[HOST].done(), "the refill's end")
        assert ready(service) == [] and "the pool's refill stopped on an error" in caplog.text
        cold = await service.create(SandboxSpec(provider="fake"))  # none ready: created cold, and the refill goes on
        assert cold.id != member
        (again,) = await until(lambda: ready(service), "a member again")
        assert again not in (member, cold.id)

    run(service, body)


def test_the_end_of_a_hutch_run_hurries_the_members_still_starting(service: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    """They start at the lowest cpu priority; a script's next run comes in a few ms."""

    async def body() -> None:
        opened, started = gate_creates(service, monkeypatch)
        await until(lambda: started, "a member starting")
        await service.create(SandboxSpec(provider="fake"))  # a plain create: nothing hurried
        assert not [c for c in fake(service).calls if c[0] == "hurry"]
        job = service.oneshot.start(RunOnce(exec=ExecRequest(command=["true"]), spec=SandboxSpec(provider="fake")))
        frames = await drain_frames(job)
        assert frames[-1]["type"] == "done"
        assert job.task is not None
        await asyncio.wait_for(job.task, DEADLINE)
        assert ("hurry", started[0]) in fake(service).calls
        opened.set()
        await until(lambda: ready(service), "the member, ready")

    run(service, body)
