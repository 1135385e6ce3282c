"""Fork against destroy, cancel and foreign errors (the Service's part, on the fake provider):
a fork completes with every child recorded, or fails and keeps no child."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest

from hutch.errors import ConflictError
from hutch.models import SandboxRecord, SandboxSpec, SandboxState
from hutch.providers.fake import FakeProvider
from hutch.service import Service

if TYPE_CHECKING:
    from hutch.provider import CopyReport


def fake(service: Service) -> FakeProvider:
    provider = service.provider("fake")
    assert isinstance(provider, FakeProvider)
    return provider


def live(service: Service) -> list[str]:
    return [r.id for r in service.list()]


def test_a_source_destroyed_during_a_copy_fails_the_fork_and_keeps_no_child(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        src = await service.create(SandboxSpec(provider="fake"))
        copies = 0
        original = fake(service).clone_workspace

        async def clone(s: SandboxRecord, d: SandboxRecord) -> CopyReport:
            nonlocal copies
            copies += 1
            if copies == 2:  # the second child's copy: the source goes away meanwhile
                await service.destroy(src.id)
            return await original(s, d)

        monkeypatch.setattr(fake(service), "clone_workspace", clone)
        with pytest.raises(ConflictError, match="was destroyed while it was being forked"):
            await service.workspaces.fork(src.id, 3)
        assert live(service) == []  # the first child, complete, went too: the fork failed as a whole
        destroyed = [r for r in service.list(include_all=True) if r.id != src.id]
        assert len(destroyed) == 2 and all(r.state == SandboxState.destroyed for r in destroyed)

    asyncio.run(scenario())


def test_a_foreign_error_or_a_cancel_during_a_copy_keeps_no_child(service: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        src = await service.create(SandboxSpec(provider="fake"))

        async def broken(s: SandboxRecord, d: SandboxRecord) -> CopyReport:
            raise FileNotFoundError("the workspace vanished")

        monkeypatch.setattr(fake(service), "clone_workspace", broken)
        with pytest.raises(FileNotFoundError):
            await service.workspaces.fork(src.id, 1)
        assert live(service) == [src.id]

        started = asyncio.Event()

        async def stuck(s: SandboxRecord, d: SandboxRecord) -> CopyReport:
            started.set()
            await asyncio.Event().wait()
            raise AssertionError("never")

        monkeypatch.setattr(fake(service), "clone_workspace", stuck)
        task = asyncio.create_task(service.workspaces.fork(src.id, 1))
        await started.wait()
        task.cancel()  # the client went away, or the daemon stops
        with pytest.raises(asyncio.CancelledError):
            await task
        await service.workspaces.settle()
        assert live(service) == [src.id]

    asyncio.run(scenario())


def test_a_sandbox_destroyed_while_being_created_is_not_marked_running(service: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        original = fake(service).create

        async def slow(rec: SandboxRecord) -> tuple[dict[str, Any], dict[str, str]]:
            await service.destroy(rec.id)  # hutch destroy --all lists it while it is being made
            return await original(rec)

        monkeypatch.setattr(fake(service), "create", slow)
        with pytest.raises(ConflictError, match="destroyed while it was being created"):
            await service.create(SandboxSpec(provider="fake"))
        [rec] = service.list(include_all=True)
        assert rec.state == SandboxState.destroyed and rec.id not in fake(service).sandboxes

    asyncio.run(scenario())
