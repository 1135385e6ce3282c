"""The Service's side of a sandbox dying on its own (fake provider): the provider's report
makes it ``lost`` at once, with an event of what is known, and settles its runs."""

from __future__ import annotations

import asyncio

import pytest

from hutch.config import Settings
from hutch.errors import NotFoundError
from hutch.models import ExecRequest, RawOutput, SandboxSpec, SandboxState
from hutch.provider import Death
from hutch.providers.fake import FakeProvider
from hutch.service import Service, lifecycle
from hutch.service.lifecycle import death_message


def fake(service: Service) -> FakeProvider:
    provider = service.provider("fake")
    assert isinstance(provider, FakeProvider)
    return provider


def test_a_reported_death_makes_the_sandbox_lost_with_its_cause(service: Service) -> None:
    async def go() -> None:
        rec = await service.create(SandboxSpec(provider="fake", limits={"memory": "64M"}))
        service.store.runs.insert("run_going", rec.id, ["sleep", "600"], 1.0)
        service.store.runs.insert("run_ended", rec.id, ["true"], 1.0)
        fake(service).status["run_ended"] = RawOutput(exit_code=0, finished_at=2.0)  # its status file
        await fake(service).die(rec.id, Death(exit_code=137, signal=9, oom_kills=1))
        lost = service.get(rec.id)
        assert lost.state == SandboxState.lost
        assert lost.error and "out of memory" in lost.error and "SIGKILL" in lost.error
        (event,) = service.store.events.all(rec.id, types=["sandbox_lost"])
        assert event["data"] | {"message": ""} == {
            "reason": "oom",
            "message": "",
            "exit_code": 137,
            "signal": 9,
            "oom_kills": 1,
        }
        runs = {r["id"]: r for r in service.store.runs.all(rec.id)}
        assert runs["run_going"]["status"] == "lost" and "out of memory" in runs["run_going"]["error"]
        assert runs["run_ended"]["status"] == "completed"  # it ended just before: its outcome is kept
        finished = [e["run_id"] for e in service.store.events.all(rec.id) if e["type"] == "run_finished"]
        assert sorted(finished) == ["run_ended", "run_going"]

    asyncio.run(go())


def test_a_destroyed_sandbox_is_not_reported_dead(service: Service) -> None:
    async def go() -> None:
        rec = await service.create(SandboxSpec(provider="fake"))
        on_gone = fake(service).watched[rec.id]
        await service.destroy(rec.id)
        assert rec.id not in fake(service).watched
        await on_gone(rec.id, Death(signal=9))  # a late report of the kill the destroy made
        assert service.get(rec.id).state == SandboxState.destroyed
        assert service.store.events.all(rec.id, types=["sandbox_lost"]) == []

    asyncio.run(go())


def test_adopted_sandboxes_are_watched(service: Service, settings: Settings) -> None:
    async def go() -> None:
        rec = await service.create(SandboxSpec(provider="fake"))
        reborn = Service(Settings.load(home=settings.home, provider="fake"))
        fake(reborn).sandboxes[rec.id] = {}  # the sandbox outlived the daemon
        assert (await reborn.start())["adopted"] == [rec.id]
        await fake(reborn).die(rec.id, Death())
        assert reborn.get(rec.id).state == SandboxState.lost
        assert reborn.get(rec.id).error == "the sandbox died: its init process ended (how is not known)"

    asyncio.run(go())


def test_a_failed_call_waits_for_the_watchers_report(service: Service) -> None:
    async def go() -> None:
        rec = await service.create(SandboxSpec(provider="fake"))
        provider = fake(service)
        provider.sandboxes.pop(rec.id)  # dead, and the report is on its way
        report = asyncio.ensure_future(provider.die(rec.id, Death(exit_code=137, signal=9)))
        await service._check_lost(rec, "the sandbox is not answering")
        await report
        assert service.get(rec.id).error == "the sandbox died: its processes were killed by signal 9 (SIGKILL)"
        assert len(service.store.events.all(rec.id, types=["sandbox_lost"])) == 1

    asyncio.run(go())


def test_an_unanswering_sandbox_whose_watcher_saw_no_death_stays_running(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lifecycle, "NOTICE_GRACE", 0.05)

    async def go() -> None:
        rec = await service.create(SandboxSpec(provider="fake"))
        files = fake(service).sandboxes.pop(rec.id)  # does not answer (a busy machine), but lives
        await service._check_lost(rec, "the sandbox is not answering")
        assert service.get(rec.id).state == SandboxState.running
        fake(service).sandboxes[rec.id] = files
        assert (await service.exec(rec.id, ExecRequest(command=["true"]))).exit_code == 0

    asyncio.run(go())


def test_death_messages_say_what_is_known() -> None:
    assert death_message(Death(exit_code=3), 1 << 30) == "its init exited with code 3"
    assert death_message(Death(signal=15, exit_code=143), 1 << 30) == "its processes were killed by signal 15 (SIGTERM)"
    assert death_message(Death(oom_kills=2), 1 << 30) == (
        "out of memory: the kernel's OOM killer ended it (2 kills in its cgroup, memory limit 1G)"
    )
    assert death_message(Death(detail="gone from the host"), 1) == "its init process ended (how is not known); gone from the host"


def test_exec_on_a_dead_sandbox_after_the_report_is_not_found(service: Service) -> None:
    async def go() -> None:
        rec = await service.create(SandboxSpec(provider="fake"))
        await fake(service).die(rec.id, Death(signal=9))
        with pytest.raises(NotFoundError, match="lost"):
            await service.exec(rec.id, ExecRequest(command=["true"]))

    asyncio.run(go())
