"""Sub-agents, enforced approvals and labels on real sandboxes with a real daemon."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import Daemon

from hutch import HutchError, Sandbox
from hutch.client import Client
from hutch.errors import ApprovalRequiredError


def _cli(daemon: Daemon, *args: str) -> tuple[int, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "hutch", args[0], "--json", *args[1:]],
        env=daemon.env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else None


def test_subagent_shares_the_workspace_rw_and_ro(daemon: Daemon) -> None:
    parent = Sandbox.create(name="lead", settings=daemon.settings)
    parent.exec("echo plan > plan.txt; sleep 600 &")
    rw = parent.subagent(name="worker")
    ro = parent.subagent(workspace="ro", name="reviewer")
    assert rw.info["spec"]["parent"] == parent.id and ro.info["spec"]["workspace"] == "ro"
    assert rw.exec("cat plan.txt").stdout == "plan\n"
    assert ro.exec("cat /workspace/plan.txt").stdout == "plan\n"
    assert rw.exec("echo done > result.txt").exit_code == 0
    assert parent.files.read_text("result.txt") == "done\n"  # the parent sees the child's work
    denied = ro.exec("echo x > /workspace/sneaky.txt")
    assert denied.exit_code != 0 and "Read-only" in denied.stderr
    assert ro.exec("ls /workspace").stdout.split() == ["plan.txt", "result.txt"]
    # its own process space: the parent's sleep is not visible in the child
    assert "sleep 600" not in rw.exec("ps -eo args").stdout
    assert "sleep 600" in parent.exec("ps -eo args").stdout


def test_parent_destroy_cascades_and_depth_is_limited(daemon: Daemon) -> None:
    parent = Sandbox.create(settings=daemon.settings)
    child = parent.subagent()
    grandchild = child.subagent()
    c = Client(daemon.settings, autostart=False)
    before = len(c.list(include_all=True))
    code, err = _cli(daemon, "subagent", grandchild.id)
    assert code == 1 and err["error"]["kind"] == "policy" and "limit is 2" in err["error"]["message"]
    assert len(c.list(include_all=True)) == before  # nothing half-made
    out = parent.destroy()
    assert out["children"] == [child.id]
    for sbx in (parent, child, grandchild):
        assert c.get(sbx.id)["state"] == "destroyed"
        assert not (daemon.home / "sandboxes" / sbx.id).exists()
    causes = {e["sandbox_id"]: e["data"]["cause"] for e in c.events(types=["sandbox_destroyed"])}
    assert causes[child.id] == f"parent {parent.id} destroyed"
    assert causes[grandchild.id] == f"parent {child.id} destroyed"


def test_required_approval_is_refused_then_performed_and_outlives_a_restart(daemon: Daemon) -> None:
    sbx = Sandbox.create(require_approval=["destroy", "exec:rm *"], settings=daemon.settings)
    sbx.exec("touch precious")
    with pytest.raises(ApprovalRequiredError) as err:
        sbx.exec("rm precious")
    apr = str(err.value.approval_id)
    assert apr.startswith("apr_") and sbx.exec("ls").stdout == "precious\n"  # refused: not run
    code, body = _cli(daemon, "exec", sbx.id, "--", "rm", "precious")
    assert code == 125 and body["error"]["kind"] == "approval_required" and body["error"]["approval_id"] == apr
    daemon.stop()
    d2 = Daemon(daemon.home).start()
    daemon.proc = d2.proc
    code, pending = _cli(daemon, "approvals", "--pending")
    assert code == 0 and [a["id"] for a in pending] == [apr]  # it survived the restart
    code, decided = _cli(daemon, "approve", apr)
    assert code == 0 and decided["status"] == "approved" and decided["decided_by"]
    assert sbx.exec("rm precious", approval=apr).exit_code == 0  # performed once approved
    assert sbx.exec("ls").stdout == ""
    code, body = _cli(daemon, "approve", apr)
    assert code == 1 and body["error"]["kind"] == "conflict"  # already decided
    code, body = _cli(daemon, "approve", "apr_00000000000deadbeef")
    assert code == 1 and body["error"]["kind"] == "not_found"
    code, body = _cli(daemon, "destroy", sbx.id)
    assert code == 1 and body["error"]["kind"] == "approval_required"
    gate = body["error"]["approval_id"]
    assert _cli(daemon, "approve", gate)[0] == 0
    code, body = _cli(daemon, "destroy", sbx.id, "--approval", gate)
    assert code == 0 and body[0]["existed"]
    types = [e["type"] for e in Client(daemon.settings, autostart=False).events(sbx.id)]
    for t in ("approval_requested", "approval_granted", "approval_used", "sandbox_destroyed"):
        assert t in types, t


def test_confirm_waits_for_a_human_and_times_out(daemon: Daemon) -> None:
    sbx = Sandbox.create(settings=daemon.settings)
    code, apr = _cli(daemon, "confirm", sbx.id, "deploy", "--no-wait", "--reason", "tests pass")
    assert code == 0 and apr["status"] == "pending" and apr["reason"] == "tests pass"
    waiter = subprocess.Popen(
        [sys.executable, "-m", "hutch", "confirm", sbx.id, "push", "--timeout", "2m", "--json"],
        env=daemon.env,
        stdout=subprocess.PIPE,
    )
    c = Client(daemon.settings, autostart=False)
    try:
        for _ in range(300):
            pushes = [a for a in c.approvals(pending=True) if a["action"] == "push"]
            if pushes:
                break
            subprocess.run(["sleep", "0.1"], check=True)
        code, _ = _cli(daemon, "approve", pushes[0]["id"], "--reject", "--reason", "not on a Friday")
        assert code == 0
        out, _ = waiter.communicate(timeout=60)
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()
    result = json.loads(out)
    assert waiter.returncode == 1 and result["status"] == "rejected" and result["decision_reason"] == "not on a Friday"
    code, expired = _cli(daemon, "confirm", sbx.id, "wait for nobody", "--timeout", "1s")
    assert code == 1 and expired["status"] == "expired"
    assert "approval_expired" in [e["type"] for e in c.events(sbx.id)]


def test_the_daemon_socket_is_not_reachable_from_inside(daemon: Daemon) -> None:
    sbx = Sandbox.create(settings=daemon.settings)
    sock = str(daemon.settings.socket_path)
    probe = (
        "import os, socket\n"
        f"print(os.path.exists({sock!r}))\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        f"try:\n    s.connect({sock!r}); print('connected')\nexcept OSError as e:\n    print('refused', e.errno)\n"
        "found = [os.path.join(d, f) for d, _, fs in os.walk('/', onerror=None) for f in fs if f == 'hutchd.sock']\n"
        "print(found)\n"
    )
    r = sbx.exec(["python3", "-c", probe], timeout=120)
    lines = r.stdout.splitlines()
    assert lines[0] == "False" and lines[1].startswith("refused") and lines[2] == "[]", r.stdout + r.stderr


def test_labels_on_create_label_command_and_filters(daemon: Daemon) -> None:
    a = Sandbox.create(labels={"team": "infra"}, settings=daemon.settings)
    b = Sandbox.create(labels={"team": "web"}, settings=daemon.settings)
    code, found = _cli(daemon, "list", "--label", "team=infra", "--state", "running")
    assert code == 0 and [r["id"] for r in found] == [a.id]
    code, rec = _cli(daemon, "label", b.id, "team=infra", "stage=review")
    assert code == 0 and rec["spec"]["labels"] == {"team": "infra", "stage": "review"}
    listed = Sandbox.list(labels={"team": "infra"}, settings=daemon.settings)
    assert sorted(s.id for s in listed) == sorted([a.id, b.id])
    assert _cli(daemon, "label", b.id, "stage-")[1]["spec"]["labels"] == {"team": "infra"}
    a.pause()
    assert [s.id for s in Sandbox.list(labels={"team": "infra"}, state="running", settings=daemon.settings)] == [b.id]
    code, err = _cli(daemon, "label", b.id, "bad key=v")
    assert code == 2 and err["error"]["kind"] == "invalid"
    code, err = _cli(daemon, "list", "--label", "novalue")
    assert code == 2
    with pytest.raises(HutchError):
        Sandbox.create(labels={"": "x"}, settings=daemon.settings)


def test_a_subagent_cannot_widen_its_network(daemon: Daemon) -> None:
    parent = Sandbox.create(allow_hosts=["pkgs.example.com"], require_approval=["network.change"], settings=daemon.settings)
    child = parent.subagent()
    assert child.info["spec"]["network"]["allow_hosts"] == ["pkgs.example.com"]  # the parent's, by default
    code, err = _cli(daemon, "subagent", parent.id, "--allow-host", "example.com")
    assert code == 1 and err["error"]["kind"] == "policy" and "example.com" in err["error"]["message"]
    code, err = _cli(daemon, "subagent", parent.id, "--network", "open")
    assert code == 1 and err["error"]["kind"] == "policy"
    # hutch policy keeps to the same rule; and network.change needs approval (inherited by the child)
    code, err = _cli(daemon, "policy", child.id, "--allow-host", "example.com")
    assert code == 1 and err["error"]["kind"] == "policy"
    code, err = _cli(daemon, "policy", parent.id, "--network", "none")
    assert code == 1 and err["error"]["kind"] == "policy" and child.id in err["error"]["message"]
    code, err = _cli(daemon, "policy", child.id, "--network", "none")
    assert code == 1 and err["error"]["kind"] == "approval_required"
    assert _cli(daemon, "approve", err["error"]["approval_id"])[0] == 0
    code, out = _cli(daemon, "policy", child.id, "--network", "none", "--approval", err["error"]["approval_id"])
    assert code == 0 and out["network"]["mode"] == "none"


def test_push_delete_needs_approval_and_a_read_only_subagent_refuses_pushes(daemon: Daemon, tmp_path: Path) -> None:
    sbx = Sandbox.create(require_approval=["push.delete"], settings=daemon.settings)
    src = tmp_path / "src"
    src.mkdir()
    (src / "keep.txt").write_text("keep\n")
    (src / "drop.txt").write_text("drop\n")
    for i in range(8):  # enough files that one deletion stays under the 20% guard
        (src / f"f{i}").write_text(str(i))
    code, out = _cli(daemon, "push", sbx.id, str(src))
    assert code == 0 and out["files_sent"] == 10  # sending needs no approval
    (src / "drop.txt").unlink()
    code, err = _cli(daemon, "push", sbx.id, str(src), "--delete")
    assert code == 1 and err["error"]["kind"] == "approval_required"
    assert "drop.txt" in sbx.exec("ls").stdout.split()  # nothing deleted yet
    apr = err["error"]["approval_id"]
    assert _cli(daemon, "approve", apr)[0] == 0
    code, out = _cli(daemon, "push", sbx.id, str(src), "--delete", "--approval", apr)
    assert code == 0 and out["deleted"] == 1
    assert "drop.txt" not in sbx.exec("ls").stdout.split()
    reviewer = sbx.subagent(workspace="ro")
    code, err = _cli(daemon, "push", reviewer.id, str(src))
    assert code == 1 and err["error"]["kind"] == "policy"
    code, out = _cli(daemon, "pull", reviewer.id, str(tmp_path / "out"))
    assert code == 0 and (tmp_path / "out" / "keep.txt").read_text() == "keep\n"  # it reads the parent's files
