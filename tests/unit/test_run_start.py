"""Starting background runs: acknowledged once they live in the sandbox, recorded once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from hutch.errors import HutchError, InvalidError, NotFoundError
from hutch.models import ExecRequest, ExecResult, RawOutput, RunStatus, SandboxSpec
from hutch.providers.fake import FakeProvider
from hutch.service import Service


def fake(service: Service) -> FakeProvider:
    provider = service.provider("fake")
    assert isinstance(provider, FakeProvider)
    return provider


def test_background_start_waits_until_the_provider_started_the_run(service: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = asyncio.Event()
    real_exec = FakeProvider.exec

    async def slow_to_start(self: FakeProvider, *args: Any, **kw: Any) -> RawOutput:
        await gate.wait()  # the run has not reached the sandbox yet
        return await real_exec(self, *args, **kw)

    monkeypatch.setattr(FakeProvider, "exec", slow_to_start)

    async def go() -> None:
        rec = await service.create(SandboxSpec(provider="fake"))
        start = asyncio.ensure_future(service.runs.start(rec.id, ExecRequest(command=["sleep", "0.05"], background=True)))
        for _ in range(50):
            await asyncio.sleep(0)
        assert not start.done(), "acknowledged before the run reached the sandbox"
        gate.set()
        run = await start
        assert run["status"] in ("running", "completed")
        assert (await service.runs.wait(run["id"], timeout=30))["status"] == "completed"

    asyncio.run(go())


def test_background_run_that_cannot_start_is_an_error_at_once(service: Service) -> None:
    async def go() -> None:
        rec = await service.create(SandboxSpec(provider="fake"))
        fake(service).sandboxes.clear()  # the provider lost the sandbox
        with pytest.raises(NotFoundError):
            await service.runs.start(rec.id, ExecRequest(command=["true"], background=True))
        (run,) = service.store.runs.all(rec.id)
        assert (run["status"], run["exit_code"]) == ("lost", 125)

    asyncio.run(go())


def test_a_run_is_finalized_once(service: Service) -> None:
    rec = asyncio.run(service.create(SandboxSpec(provider="fake")))
    service.store.runs.insert("run_once", rec.id, ["true"], 0.0)
    first = ExecResult(
        run_id="run_once", sandbox_id=rec.id, exit_code=125, status=RunStatus.lost, stdout="", stderr="", duration_ms=1.0
    )
    later = first.model_copy(update={"exit_code": 0, "status": RunStatus.completed})
    service.store.runs.finish(first, [("run_finished", {"status": "lost"})])
    service.store.runs.finish(later, [("run_finished", {"status": "completed"})])
    assert service.store.runs.get("run_once")["status"] == "lost"
    finished = [e for e in service.store.events.all(rec.id) if e["type"] == "run_finished"]
    assert [e["data"]["status"] for e in finished] == ["lost"]


def test_a_run_the_provider_refuses_is_failed_not_lost(service: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    """A provider that refuses a run before it starts (a cluster node's own exec --user check): the caller
    gets that refusal as it came, hint and all, from exec, the stream and a background start; the run is
    recorded failed (exit 126, the reason), never lost."""

    async def refuses(self: FakeProvider, *args: Any, **kw: Any) -> RawOutput:
        raise InvalidError("sandbox x maps one uid", hint="create the sandbox with users of its own")

    monkeypatch.setattr(FakeProvider, "exec", refuses)

    async def go() -> None:
        rec = await service.create(SandboxSpec(provider="fake"))
        req = ExecRequest(command=["id"])

        async def streamed() -> None:
            frames = [f async for f in service.runs.stream(rec.id, req)]
            assert [f["type"] for f in frames] == ["run", "error"]
            raise HutchError.from_dict(frames[-1])

        for attempt in (
            lambda: service.runs.exec(rec.id, req),
            streamed,
            lambda: service.runs.start(rec.id, ExecRequest(command=["id"], background=True)),
        ):
            with pytest.raises(InvalidError) as err:
                await attempt()
            assert (err.value.message, err.value.hint) == ("sandbox x maps one uid", "create the sandbox with users of its own")
        runs = service.store.runs.all(rec.id)
        assert [(r["status"], r["exit_code"], r["error"]) for r in runs] == [("failed", 126, "sandbox x maps one uid")] * 3

    asyncio.run(go())
