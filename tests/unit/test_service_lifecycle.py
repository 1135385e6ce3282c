"""Pause, lifetimes, sub-agents, approvals and labels in the Service, on the fake provider."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from hutch.errors import ApprovalRequiredError, ConflictError, InvalidError, NotFoundError, PolicyError
from hutch.models import ExecRequest, NetworkPolicy, SandboxRecord, SandboxSpec, SandboxState
from hutch.service import Service
from hutch.service.lifecycle import network_wider
from hutch.store import Store
from hutch.units import parse_duration

run = asyncio.run


def create(service: Service, **kw: Any) -> SandboxRecord:
    return run(service.create(SandboxSpec(provider="fake", **kw)))


def events(service: Service, sandbox_id: str | None = None) -> list[dict[str, Any]]:
    return service.store.events.all(sandbox_id)


def test_durations() -> None:
    assert parse_duration("30m") == 1800 and parse_duration("2h") == 7200 and parse_duration(45) == 45
    assert parse_duration("1.5d") == 1.5 * 86400 and parse_duration("250ms") == 0.25
    for bad in ("", "soon", "-5m", "0", "10 parsecs"):
        with pytest.raises(InvalidError):
            parse_duration(bad)
    with pytest.raises(InvalidError, match="longer than a year"):
        SandboxSpec(ttl="400d")


def test_pause_blocks_calls_until_resume(service: Service) -> None:
    rec = create(service)
    out = run(service.lifecycle.pause(rec.id))
    assert out["state"] == "paused" and out["changed"]
    assert run(service.lifecycle.pause(rec.id))["changed"] is False  # idempotent
    assert service.get(rec.id).state == SandboxState.paused
    with pytest.raises(ConflictError) as err:
        run(service.exec(rec.id, ExecRequest(command=["echo", "hi"])))
    assert "hutch resume" in (err.value.hint or "")
    with pytest.raises(ConflictError):
        run(service.write_file(rec.id, "a", b"x"))
    assert [r.id for r in service.list(state="paused")] == [rec.id]
    run(service.lifecycle.resume(rec.id))
    assert run(service.exec(rec.id, ExecRequest(command=["echo", "hi"]))).stdout == "hi\n"
    types = [e["type"] for e in events(service, rec.id)]
    assert "sandbox_paused" in types and "sandbox_resumed" in types
    run(service.destroy(rec.id))
    with pytest.raises(ConflictError):
        run(service.lifecycle.pause(rec.id))


def test_ttl_destroys_and_idle_pauses(service: Service) -> None:
    ttl = create(service, ttl="10s")
    idle = create(service, idle_timeout="10s", on_expire="pause")
    plain = create(service)
    assert ttl.expires_at is not None and abs(ttl.expires_at - (ttl.created_at + 10)) < 0.01
    now = time.time()
    assert run(service.lifecycle.reap_once(now + 5)) == []
    fired = run(service.lifecycle.reap_once(now + 11))
    assert sorted(fired) == sorted([(ttl.id, "ttl"), (idle.id, "idle")])
    assert service.get(ttl.id).state == SandboxState.destroyed
    assert service.get(idle.id).state == SandboxState.paused
    assert service.get(plain.id).state == SandboxState.running
    expired = [e for e in events(service) if e["type"] == "sandbox_expired"]
    assert {(e["sandbox_id"], e["data"]["reason"], e["data"]["action"]) for e in expired} == {
        (ttl.id, "ttl", "destroy"),
        (idle.id, "idle", "pause"),
    }
    assert run(service.lifecycle.reap_once(now + 100)) == []  # a paused sandbox is not expired again


def test_activity_and_keepalive_push_the_idle_deadline(service: Service) -> None:
    rec = create(service, idle_timeout="10s")
    now = time.time()
    service.store.sandboxes.touch(rec.id, now + 8)  # activity 8 s in
    assert run(service.lifecycle.reap_once(now + 15)) == []
    out = service.lifecycle.keepalive(rec.id, ttl=parse_duration("1h"))
    assert out["expires_at"] == pytest.approx(time.time() + 3600, abs=5)
    assert out["idle_expires_at"] == pytest.approx(time.time() + 10, abs=5)
    assert service.get(rec.id).spec.ttl == 3600


def test_a_running_background_run_is_activity(service: Service) -> None:
    rec = create(service, idle_timeout="1s")
    service.store.runs.insert("run_x", rec.id, ["sleep", "100"], time.time(), background=True)
    assert run(service.lifecycle.reap_once(time.time() + 50)) == []
    assert service.get(rec.id).state == SandboxState.running


def test_subagents_share_files_nest_and_cascade(service: Service) -> None:
    parent = create(service, require_approval=["exec:rm *"])
    run(service.write_file(parent.id, "/workspace/a", b"from parent"))
    child = run(service.lifecycle.subagent(parent.id, SandboxSpec(provider="fake", workspace="ro")))
    assert child.spec.parent == parent.id and child.spec.workspace == "ro"
    assert child.spec.require_approval == ["exec:rm *"]  # not wider than the parent
    assert run(service.read_file(child.id, "/workspace/a"))[0] == b"from parent"
    with pytest.raises(PolicyError, match="read-only"):
        run(service.lifecycle.subagent(child.id, SandboxSpec(provider="fake", workspace="rw")))
    grandchild = run(service.lifecycle.subagent(child.id, SandboxSpec(provider="fake")))
    assert grandchild.spec.workspace == "ro"
    before = len(service.list(include_all=True))
    with pytest.raises(PolicyError, match="limit is 2"):
        run(service.lifecycle.subagent(grandchild.id, SandboxSpec(provider="fake")))
    assert len(service.list(include_all=True)) == before  # nothing half-made
    out = run(service.destroy(parent.id))
    assert out["children"] == [child.id]
    for rec in (parent, child, grandchild):
        assert service.get(rec.id).state == SandboxState.destroyed
    causes = {e["sandbox_id"]: e["data"]["cause"] for e in events(service) if e["type"] == "sandbox_destroyed"}
    assert causes[child.id] == f"parent {parent.id} destroyed" and causes[grandchild.id] == f"parent {child.id} destroyed"


def test_subagent_bad_input(service: Service) -> None:
    with pytest.raises(NotFoundError):
        run(service.lifecycle.subagent("nope", SandboxSpec(provider="fake")))
    with pytest.raises(InvalidError, match="only for sub-agents"):
        create(service, workspace="ro")
    parent = create(service)
    run(service.destroy(parent.id))
    with pytest.raises(NotFoundError):
        run(service.lifecycle.subagent(parent.id, SandboxSpec(provider="fake")))


def test_approval_required_then_performed_once(service: Service) -> None:
    rec = create(service, require_approval=["destroy", "exec:rm *"])
    assert run(service.exec(rec.id, ExecRequest(command=["echo", "ok"]))).exit_code == 0  # not gated
    with pytest.raises(ApprovalRequiredError) as err:
        run(service.exec(rec.id, ExecRequest(command=["rm", "-rf", "x"])))
    apr_id = err.value.approval_id
    assert apr_id and apr_id.startswith("apr_") and apr_id in (err.value.hint or "")
    with pytest.raises(ApprovalRequiredError) as again:  # asking again gives the same pending request
        run(service.exec(rec.id, ExecRequest(command=["rm", "-rf", "x"])))
    assert again.value.approval_id == apr_id
    assert len(service.store.runs.all(rec.id)) == 1  # the refused command never ran
    service.approvals.decide(apr_id, True, by="alice")
    with pytest.raises(InvalidError):  # an approval is for exactly that command
        run(service.exec(rec.id, ExecRequest(command=["rm", "-rf", "y"], approval=apr_id)))
    res = run(service.exec(rec.id, ExecRequest(command=["rm", "-rf", "x"], approval=apr_id)))
    assert res.exit_code == 127  # performed (the fake has no rm)
    with pytest.raises(ConflictError, match="already used"):
        run(service.exec(rec.id, ExecRequest(command=["rm", "-rf", "x"], approval=apr_id)))
    with pytest.raises(ApprovalRequiredError) as gate:
        run(service.destroy(rec.id))
    service.approvals.decide(str(gate.value.approval_id), False, reason="not today", by="bob")
    with pytest.raises(PolicyError, match="not today"):
        run(service.destroy(rec.id, gate.value.approval_id))
    assert service.get(rec.id).state == SandboxState.running
    types = [e["type"] for e in events(service, rec.id)]
    for t in ("approval_requested", "approval_granted", "approval_used", "approval_rejected"):
        assert t in types, t


def test_decide_bad_input_and_expiry(service: Service) -> None:
    with pytest.raises(NotFoundError):
        service.approvals.decide("apr_nope", True)
    apr = service.approvals.request("deploy", reason="r")
    service.approvals.decide(apr.id, True, by="alice")
    with pytest.raises(ConflictError, match="already approved by alice"):
        service.approvals.decide(apr.id, False)
    short = service.approvals.request("deploy", timeout=0.05)
    got = run(service.approvals.wait(short.id, 5))
    assert got.status == "expired"
    with pytest.raises(ConflictError, match="already expired"):
        service.approvals.decide(short.id, True)
    pending = service.approvals.request("other")
    assert run(service.approvals.wait(pending.id, 0.1)).status == "pending"
    assert [a.id for a in service.approvals.list(pending=True)] == [pending.id]
    with pytest.raises(InvalidError):
        SandboxSpec(require_approval=["launch.missiles"])


def test_approvals_survive_a_new_store(service: Service) -> None:
    apr = service.approvals.request("deploy")
    again = Store(service.settings.db_path)
    assert again.approvals.get(apr.id).status == "pending"


def test_labels_set_remove_and_filter(service: Service) -> None:
    a = create(service, labels={"team": "infra", "stage": "dev"})
    b = create(service, labels={"team": "web"})
    assert [r.id for r in service.list(labels={"team": "infra"})] == [a.id]
    rec = service.lifecycle.label(b.id, {"team": "infra", "x": "1"}, [])
    assert rec.spec.labels == {"team": "infra", "x": "1"}
    assert {r.id for r in service.list(labels={"team": "infra"})} == {a.id, b.id}
    assert service.lifecycle.label(a.id, {}, ["stage"]).spec.labels == {"team": "infra"}
    assert [r.id for r in service.list(labels={"team": "infra", "x": "1"})] == [b.id]
    with pytest.raises(InvalidError):
        service.lifecycle.label(a.id, {"bad key": "v"}, [])
    with pytest.raises(InvalidError):
        service.lifecycle.label(a.id, {"k": "v"}, ["k"])
    with pytest.raises(InvalidError):
        service.list(state="sleeping")


def _net(**kw: Any) -> NetworkPolicy:
    return NetworkPolicy.model_validate(kw)


def test_a_child_network_is_never_wider() -> None:
    parent = _net(mode="allowlist", allow_hosts=["pkgs.example.com", "*.github.com"], deny_hosts=["evil.github.com"])
    ok = [
        _net(),
        _net(mode="allowlist", allow_hosts=["pkgs.example.com"], deny_hosts=["evil.github.com"]),
        _net(mode="allowlist", allow_hosts=["api.github.com", "*.x.github.com"], deny_hosts=["evil.github.com"]),
        _net(mode="allowlist", allow_hosts=["pkgs.example.com"], ports=[443], deny_hosts=["evil.github.com"]),
    ]
    for child in ok:
        assert network_wider(parent, child) is None, child
    wider = [
        _net(mode="open", deny_hosts=["evil.github.com"]),
        _net(mode="allowlist", allow_hosts=["example.com"], deny_hosts=["evil.github.com"]),
        _net(mode="allowlist", allow_hosts=["*.github.com"], deny_hosts=["evil.github.com"], ports=[22]),
        _net(mode="allowlist", allow_hosts=["pkgs.example.com"]),  # drops the parent's deny
        _net(mode="allowlist", allow_hosts=["github.com"], deny_hosts=["evil.github.com"]),  # *.x is not x itself
        _net(mode="allowlist", cidrs=["10.0.0.0/8"], deny_hosts=["evil.github.com"]),
    ]
    for child in wider:
        assert network_wider(parent, child), child
    opened = _net(mode="open", cidrs=["10.0.0.0/8"], ports=[443, 8443])
    assert network_wider(opened, _net(mode="allowlist", allow_hosts=["x.org"], cidrs=["10.1.0.0/16"], ports=[443])) is None
    assert network_wider(opened, _net(mode="open")) is not None  # any port is wider than 443 and 8443
    assert network_wider(_net(), _net(mode="allowlist", allow_hosts=["x.org"])) is not None


def test_subagents_inherit_and_cannot_widen_the_network(service: Service) -> None:
    parent = create(service)
    child = run(service.lifecycle.subagent(parent.id, SandboxSpec(provider="fake")))
    assert child.spec.network.mode == "none"
    with pytest.raises(PolicyError, match="wider than the parent"):
        run(
            service.lifecycle.subagent(
                parent.id, SandboxSpec(provider="fake", network={"mode": "allowlist", "allow_hosts": ["x.org"]})
            )
        )


def test_approvals_of_a_destroyed_sandbox_are_closed(service: Service) -> None:
    rec = create(service)
    pending = service.approvals.request("deploy", rec.id)
    run(service.destroy(rec.id))
    closed = service.store.approvals.get(pending.id)
    assert closed.status == "expired" and closed.decided_by == "hutch (sandbox destroyed)"
    with pytest.raises(ConflictError, match="destroyed"):
        service.approvals.request("deploy", rec.id)


def test_the_reaper_reads_only_the_sandboxes_with_a_deadline(service: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every second it ran over every live record: with 1000 idle sandboxes, a pass parsed
    1000 records on the daemon's event loop and every exec waited behind it."""
    import hutch.store.sandboxes as table

    ttl = create(service, ttl="10s")
    idle = create(service, idle_timeout="10s")
    plain = [create(service) for _ in range(5)]
    parsed: list[str] = []
    real = table._record

    def counted(row: Any) -> SandboxRecord:
        parsed.append(row["id"])
        return real(row)

    monkeypatch.setattr(table, "_record", counted)
    assert run(service.lifecycle.reap_once(time.time() + 5)) == []
    assert sorted(parsed) == sorted([ttl.id, idle.id])
    fired = run(service.lifecycle.reap_once(time.time() + 11))
    assert sorted(fired) == sorted([(ttl.id, "ttl"), (idle.id, "idle")])
    assert all(service.get(p.id).state == SandboxState.running for p in plain)
