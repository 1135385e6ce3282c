"""Short ids: any unique prefix of a real id that keeps its type tag works wherever the id
does (the Service resolves it, so the CLI, SDK, MCP and HTTP API all get it); an exact
name wins over a prefix; a prefix several ids share is a ``conflict`` naming them."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from hutch.errors import ConflictError, NotFoundError
from hutch.models import ExecRequest, SandboxRecord, SandboxSpec
from hutch.service import Service

run = asyncio.run


def create(service: Service, **kw: Any) -> SandboxRecord:
    return run(service.create(SandboxSpec(provider="fake", **kw)))


def common_prefix(ids: list[str]) -> str:
    first, last = min(ids), max(ids)
    n = next((i for i, (a, b) in enumerate(zip(first, last, strict=False)) if a != b), len(first))
    return first[:n]


def shortest_unique(target: str, others: list[str]) -> str:
    """The shortest prefix of ``target`` (past its tag) that no other id starts with."""
    for n in range(len("sbx_") + 1, len(target) + 1):
        if not any(o.startswith(target[:n]) for o in others if o != target):
            return target[:n]
    raise AssertionError("ids are not unique")


def test_a_unique_prefix_finds_the_sandbox(service: Service) -> None:
    recs = [create(service) for _ in range(3)]
    ids = [r.id for r in recs]
    for rec in recs:
        short = shortest_unique(rec.id, ids)
        assert len(short) < len(rec.id)
        assert service.get(short).id == rec.id
        assert service.live(short).id == rec.id
        result = run(service.exec(short, ExecRequest(command=["echo", "hi"])))
        assert result.sandbox_id == rec.id and result.stdout == "hi\n"
    # and it destroys the right one (idempotent teardown still holds for the whole id)
    short = shortest_unique(ids[0], ids)
    assert run(service.destroy(short))["sandbox"] == ids[0]
    assert {r.id for r in service.list()} == set(ids[1:])


def test_an_ambiguous_prefix_is_a_conflict_naming_the_candidates(service: Service) -> None:
    ids = [create(service).id for _ in range(3)]
    shared = common_prefix(ids)
    assert len(shared) > len("sbx_"), ids  # real ids made together share their time part
    with pytest.raises(ConflictError) as err:
        service.get(shared)
    for sandbox_id in ids:
        assert sandbox_id in err.value.message
    assert err.value.hint and "more characters" in err.value.hint
    with pytest.raises(ConflictError):  # never guessed: an ambiguous destroy destroys nothing
        run(service.destroy(shared))
    assert {r.id for r in service.list()} == set(ids)


def test_the_tag_is_required_and_nothing_else_matches(service: Service) -> None:
    rec = create(service)
    bare = rec.id.removeprefix("sbx_")
    for ref in (bare, "sbx_", "run_" + bare[:6], rec.id + "0", "sbx_" + "z" * 6):
        with pytest.raises(NotFoundError):
            service.get(ref)


def test_an_exact_name_wins_over_a_prefix(service: Service) -> None:
    first = create(service)
    named = create(service, name="box")
    # a sandbox whose *name* is the start of the first one's id: new names may not start with
    # sbx_, but a record from before that rule may have one
    with service.store.db.transaction() as conn:
        conn.execute("UPDATE sandboxes SET name = ? WHERE id = ?", (first.id[:9], named.id))
    assert service.get(first.id[:9]).id == named.id
    assert service.get(first.id).id == first.id  # the whole id is still the first one


def test_short_run_and_approval_ids(service: Service) -> None:
    rec = create(service, require_approval=["destroy"])

    async def background_runs() -> list[str]:  # one loop, as in the daemon: background runs go on between calls
        runs = [await service.runs.start(rec.id, ExecRequest(command=["echo", str(i)])) for i in range(3)]
        run_ids = [r["id"] for r in runs]
        for run_id in run_ids:
            short = shortest_unique(run_id, run_ids)
            assert service.runs.get(short)["id"] == run_id
            done = await service.runs.wait(short, 30)
            assert done["id"] == run_id and done["status"] == "completed"
            page = await service.runs.poll(short, {}, 1024)
            assert page["run"]["id"] == run_id and page["stdout"]["data"] == f"{run_ids.index(run_id)}\n"
            killed = await service.runs.kill(short, "TERM")
            assert killed["run_id"] == run_id
        return run_ids

    run_ids = run(background_runs())
    with pytest.raises(ConflictError):
        service.runs.get(common_prefix(run_ids))

    apr = service.approvals.request("deploy", rec.id)
    other = service.approvals.request("deploy again", rec.id)
    short = shortest_unique(apr.id, [apr.id, other.id])
    decided = service.approvals.decide(short, True, by="test")
    assert decided.id == apr.id and decided.status == "approved"
    with pytest.raises(ConflictError):
        service.approvals.get(common_prefix([apr.id, other.id]))


def test_http_api_takes_short_ids(app_client: Any) -> None:
    ids = [app_client.post("/v1/sandboxes", json={"provider": "fake"}).json()["id"] for _ in range(2)]
    short = shortest_unique(ids[1], ids)
    got = app_client.get(f"/v1/sandboxes/{short}")
    assert got.status_code == 200 and got.json()["id"] == ids[1]
    shared = app_client.get(f"/v1/sandboxes/{common_prefix(ids)}")
    assert shared.status_code == 409
    assert shared.json()["error"]["kind"] == "conflict"
