"""The Service's use-cases on the in-memory fake provider (no daemon, no bwrap)."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import pytest

from hutch.config import Settings
from hutch.errors import ConflictError, InvalidError, NotFoundError, UnavailableError
from hutch.models import ExecRequest, ExecResult, Mount, RunStatus, SandboxRecord, SandboxSpec, SandboxState
from hutch.providers.fake import FakeProvider
from hutch.service import Service

run = asyncio.run


def create(service: Service, **kw: Any) -> SandboxRecord:
    return run(service.create(SandboxSpec(provider="fake", **kw)))


def execute(service: Service, ref: str, command: str | list[str], **kw: Any) -> ExecResult:
    return run(service.exec(ref, ExecRequest(command=command, **kw)))


def fake(service: Service) -> FakeProvider:
    provider = service.provider("fake")
    assert isinstance(provider, FakeProvider)
    return provider


def event_types(service: Service, sandbox_id: str) -> list[str]:
    return [e["type"] for e in service.store.events.all(sandbox_id)]


# -- lifecycle ------------------------------------------------------------------------


def test_create_get_list_destroy(service: Service) -> None:
    rec = create(service, name="box")
    assert rec.id.startswith("sbx_")
    assert rec.state == SandboxState.running
    assert rec.provider == "fake"
    assert rec.enforcement  # the provider says how limits are enforced
    assert service.get(rec.id) == service.get("box")
    assert [r.id for r in service.list()] == [rec.id]
    assert rec.id in fake(service).sandboxes

    out = run(service.destroy("box"))
    assert out == {"sandbox": rec.id, "name": "box", "destroyed": True, "existed": True, "message": "destroyed"}
    assert service.get(rec.id).state == SandboxState.destroyed
    assert service.list() == []
    assert [r.id for r in service.list(include_all=True)] == [rec.id]
    assert rec.id not in fake(service).sandboxes


def test_destroy_is_idempotent(service: Service) -> None:
    rec = create(service)
    assert run(service.destroy(rec.id))["existed"] is True
    again = run(service.destroy(rec.id))
    assert again["destroyed"] is True
    assert again["existed"] is False
    assert "already gone" in again["message"]
    assert event_types(service, rec.id).count("sandbox_destroyed") == 1


def test_destroy_unknown_ref_succeeds(service: Service) -> None:
    out = run(service.destroy("never-existed"))
    assert out["destroyed"] is True
    assert out["existed"] is False
    assert out["sandbox"] == "never-existed"


def test_duplicate_live_name_conflicts(service: Service) -> None:
    first = create(service, name="same")
    with pytest.raises(ConflictError) as info:
        create(service, name="same")
    assert info.value.hint
    assert [r.id for r in service.list(include_all=True)] == [first.id]
    run(service.destroy("same"))
    second = create(service, name="same")
    assert service.get("same").id == second.id


def test_unsupported_mounts_rejected_before_any_record(service: Service) -> None:
    spec = SandboxSpec(provider="fake", name="m", mounts=[Mount.parse("/tmp:/data:ro")])
    with pytest.raises(InvalidError) as info:
        run(service.create(spec))
    assert "mount" in info.value.message
    assert service.list(include_all=True) == []
    assert service.store.events.all() == []
    assert fake(service).calls == []


def test_unknown_provider_rejected_before_any_record(service: Service) -> None:
    with pytest.raises(InvalidError) as info:
        run(service.create(SandboxSpec(provider="no-such-provider")))
    assert "fake" in (info.value.hint or "")
    assert service.list(include_all=True) == []


def test_provider_create_failure_marks_failed(service: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    async def broken(rec: SandboxRecord) -> Any:
        raise UnavailableError("no capacity left", hint="try later")

    monkeypatch.setattr(fake(service), "create", broken)
    with pytest.raises(UnavailableError):
        create(service, name="fails")
    (rec,) = service.list(include_all=True)
    assert rec.state == SandboxState.failed
    assert rec.error == "no capacity left"
    assert service.list() == []
    monkeypatch.undo()
    assert create(service, name="fails").state == SandboxState.running  # the name is free again


# -- exec -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "code", "status"),
    [
        (["true"], 0, RunStatus.completed),
        (["false"], 1, RunStatus.failed),
        (["exit", "3"], 3, RunStatus.failed),
        (["exit", "0"], 0, RunStatus.completed),
        (["/usr/bin/echo", "x"], 0, RunStatus.completed),
        (["no-such-program"], 127, RunStatus.failed),
    ],
)
def test_exec_result_mapping(service: Service, command: list[str], code: int, status: RunStatus) -> None:
    rec = create(service)
    result = execute(service, rec.id, command)
    assert result.exit_code == code
    assert result.status == status
    assert result.sandbox_id == rec.id
    assert result.run_id.startswith("run_")
    assert result.duration_ms >= 0
    assert result.truncated is False


def test_exec_output(service: Service) -> None:
    rec = create(service)
    result = execute(service, rec.id, ["echo", "hello", "world"])
    assert (result.stdout, result.stderr) == ("hello world\n", "")
    assert result.stdout_bytes == 12
    assert result.stdout_base64 is False


def test_exec_unknown_command_is_127_with_error(service: Service) -> None:
    rec = create(service)
    result = execute(service, rec.id, ["frobnicate", "--now"])
    assert result.exit_code == 127
    assert "frobnicate" in result.stderr
    assert result.error and "frobnicate" in result.error


def test_exec_timeout(service: Service) -> None:
    rec = create(service)
    result = execute(service, rec.id, ["sleep", "30"], timeout=0.05)
    assert result.status == RunStatus.timed_out
    assert result.exit_code == 124
    assert result.duration_ms < 5000
    (r,) = service.store.runs.all(rec.id)
    assert (r["status"], r["exit_code"]) == ("timed_out", 124)


def test_exec_sleep_within_timeout_completes(service: Service) -> None:
    rec = create(service)
    result = execute(service, rec.id, ["sleep", "0.01"], timeout=5)
    assert (result.status, result.exit_code) == (RunStatus.completed, 0)


def test_exec_truncates_at_max_output(service: Service) -> None:
    rec = create(service)
    result = execute(service, rec.id, ["echo", "hello"], max_output=3)
    assert result.stdout == "hel"
    assert result.stdout_bytes == 6
    assert result.truncated is True


def test_exec_stdin_text_and_binary(service: Service) -> None:
    rec = create(service)
    assert execute(service, rec.id, ["cat"], stdin="piped").stdout == "piped"
    raw = b"\xff\x00\xfe"
    result = execute(service, rec.id, ["cat"], stdin=base64.b64encode(raw).decode(), stdin_base64=True)
    assert result.stdout_base64 is True
    assert base64.b64decode(result.stdout) == raw


def test_exec_empty_command_is_invalid_and_records_no_run(service: Service) -> None:
    rec = create(service)
    with pytest.raises(InvalidError) as info:
        execute(service, rec.id, [])
    assert info.value.hint
    assert service.store.runs.all(rec.id) == []


def test_runs_are_recorded(service: Service) -> None:
    rec = create(service)
    results = [execute(service, rec.id, c) for c in (["true"], ["false"], ["exit", "7"])]
    runs = service.store.runs.all(rec.id)
    assert [r["id"] for r in runs] == [r.run_id for r in results]
    assert [r["command"] for r in runs] == [["true"], ["false"], ["exit", "7"]]
    assert [(r["status"], r["exit_code"]) for r in runs] == [("completed", 0), ("failed", 1), ("failed", 7)]
    assert all(r["finished_at"] is not None for r in runs)


def test_events_in_order(service: Service) -> None:
    rec = create(service)
    result = execute(service, rec.id, ["echo", "x"], env={"SECRET_KEY": "s3cr3t"})
    run(service.destroy(rec.id))
    events = service.store.events.all(rec.id)
    assert [e["type"] for e in events] == ["sandbox_created", "run_started", "run_finished", "sandbox_destroyed"]
    assert [e["seq"] for e in events] == sorted(e["seq"] for e in events)
    started, finished = events[1], events[2]
    assert started["run_id"] == finished["run_id"] == result.run_id
    assert started["data"]["command"] == ["echo", "x"]
    assert finished["data"]["exit_code"] == 0 and finished["data"]["status"] == "completed"
    assert "s3cr3t" not in repr(events)  # env values never reach the event stream


def test_exec_on_destroyed_sandbox_is_not_found_with_hint(service: Service) -> None:
    rec = create(service, name="old")
    run(service.destroy(rec.id))
    for ref in (rec.id, "old"):
        with pytest.raises(NotFoundError) as info:
            execute(service, ref, ["true"])
        assert "destroyed" in info.value.message
        assert info.value.hint and "hutch create" in info.value.hint


def test_exec_on_unknown_sandbox_is_not_found(service: Service) -> None:
    with pytest.raises(NotFoundError) as info:
        execute(service, "sbx_nope", ["true"])
    assert info.value.hint


def test_exec_when_provider_lost_the_sandbox_records_a_lost_run(service: Service) -> None:
    rec = create(service)
    fake(service).sandboxes.clear()
    with pytest.raises(NotFoundError):
        execute(service, rec.id, ["true"])
    (r,) = service.store.runs.all(rec.id)
    assert (r["status"], r["exit_code"]) == ("lost", 125)
    assert event_types(service, rec.id)[-1] == "run_finished"


# -- files ----------------------------------------------------------------------------


def test_files_round_trip(service: Service) -> None:
    rec = create(service)
    data = bytes(range(256))
    out = run(service.write_file(rec.id, "dir/blob.bin", data))
    assert out == {"sandbox": rec.id, "path": "/workspace/dir/blob.bin", "size": 256}
    assert run(service.read_file(rec.id, "/workspace/dir/blob.bin")) == (data, False)
    assert run(service.read_file(rec.id, "dir/blob.bin", limit=10)) == (data[:10], True)
    assert [(e.name, e.type) for e in run(service.list_files(rec.id))] == [("dir", "dir")]
    assert [(e.name, e.size) for e in run(service.list_files(rec.id, "dir"))] == [("blob.bin", 256)]
    assert {"file_written", "file_read"} <= set(event_types(service, rec.id))


def test_file_empty_path_is_invalid(service: Service) -> None:
    rec = create(service)
    with pytest.raises(InvalidError):
        run(service.write_file(rec.id, "", b"x"))


# -- restart --------------------------------------------------------------------------


def test_start_adopts_sandboxes_the_provider_still_has(service: Service) -> None:
    rec = create(service)
    report = run(service.start())
    assert report == {"adopted": [rec.id], "lost": [], "cleaned": [], "incompatible": []}
    assert service.get(rec.id).state == SandboxState.running


def test_start_marks_sandboxes_the_provider_forgot_as_lost(service: Service, settings: Settings) -> None:
    rec = create(service, name="ghost")
    service.store.runs.insert("run_inflight", rec.id, ["sleep", "100"], 0.0)
    reborn = Service(Settings.load(home=settings.home, provider="fake"))  # a fresh fake: it knows no sandboxes
    report = run(reborn.start())
    assert report["lost"] == [rec.id]
    assert report["adopted"] == []
    lost = reborn.get("ghost")
    assert lost.state == SandboxState.lost
    assert lost.error
    assert [r.id for r in reborn.list()] == [rec.id]  # lost sandboxes are still listed
    assert reborn.store.runs.all(rec.id)[0]["status"] == "lost"
    assert event_types(reborn, rec.id)[-1] == "sandbox_lost"
    with pytest.raises(NotFoundError) as info:
        run(reborn.exec("ghost", ExecRequest(command=["true"])))
    assert info.value.hint
    assert run(reborn.destroy("ghost"))["destroyed"] is True
    assert reborn.get(rec.id).state == SandboxState.destroyed


@pytest.mark.parametrize(
    ("interrupted", "final"), [(SandboxState.creating, SandboxState.failed), (SandboxState.destroying, SandboxState.destroyed)]
)
def test_start_cleans_interrupted_transitions(
    service: Service, settings: Settings, interrupted: SandboxState, final: SandboxState
) -> None:
    rec = create(service)
    service.store.sandboxes.update(rec.id, state=interrupted)
    reborn = Service(Settings.load(home=settings.home, provider="fake"))
    report = run(reborn.start())
    assert report["cleaned"] == [rec.id]
    assert reborn.get(rec.id).state == final


# -- health ---------------------------------------------------------------------------


def test_doctor_on_fake(service: Service) -> None:
    report = run(service.doctor())
    assert report["ok"] is True
    assert {c["name"] for c in report["checks"]} >= {"state dir", "fake"}


def test_doctor_unknown_provider_reports_instead_of_raising(service: Service) -> None:
    report = run(service.doctor("no-such-provider"))
    assert report["ok"] is False
    assert any(c["fix"] for c in report["checks"] if not c["ok"])


def test_a_run_whose_sandbox_is_destroyed_is_lost_and_says_why(service: Service) -> None:
    # The destroy marks its sandbox's runs lost as soon as the provider is done, often before
    # the run's own task learns it (a loaded machine): its record must say why all the same.
    rec = create(service)

    async def scenario() -> dict[str, Any]:
        started = await service.runs.start(rec.id, ExecRequest(command=["sleep", "300"]))
        await service.destroy(rec.id)
        for _ in range(10):  # whatever the run's own task records afterwards does not change it
            await asyncio.sleep(0)
        return service.runs.get(started["id"])

    record = run(scenario())
    assert record["status"] == "lost", record
    assert "destroyed" in record["error"], record


def test_a_disk_cap_an_image_or_the_host_ca_is_refused_by_a_provider_without_it(service: Service) -> None:
    with pytest.raises(InvalidError, match="cannot cap what a sandbox writes"):
        create(service, limits={"disk": "1G"})
    with pytest.raises(InvalidError, match="does not boot images"):
        create(service, image="busybox:latest")
    with pytest.raises(InvalidError, match="cannot add this machine's CA bundle") as info:
        create(service, host_ca=True)
    assert "drop --host-ca" in info.value.hint
    assert service.list() == []  # refused before anything was made


def test_exec_user_on_a_provider_that_cannot_switch_users_is_refused_before_a_run(service: Service) -> None:
    rec = create(service)
    with pytest.raises(InvalidError) as info:
        execute(service, rec.id, "id -u", user="root")
    assert "cannot run a command as another user" in info.value.message and "runuser" in (info.value.hint or "")
    assert service.store.runs.all(rec.id) == []  # nothing recorded, nothing ran
    for bad in ("../etc", "a:b:c", "root\n", "-1", "1234567890", ""):
        with pytest.raises(InvalidError) as info:
            ExecRequest(command="id", user=bad)
        assert "invalid --user" in info.value.message, bad
