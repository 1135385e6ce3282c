"""E2B's fork, snapshots and network updates through the official Python SDK, unchanged,
against a real ``hutch serve``: each SDK call becomes hutch's fork, snapshot or policy
change for the key that owns the sandbox, and the hutch side shows it (the children, the
restored sandbox, the policy and its events, the egress proxy letting one host through and
not another)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.conftest import destroy_all, sweep
from tests.integration.e2b_sdk import sdk_python
from tests.integration.test_e2b import E2B
from tests.integration.test_network import SERVER, Upstream, upstream  # noqa: F401 - the fixture
from tests.integration.test_remote import RemoteDaemon

from hutch.server.e2b.auth import hutch_id

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def e2b(upstream: Upstream) -> Iterator[E2B]:  # noqa: F811
    """A gateway whose egress proxy resolves the upstream namespace's test names, and one more
    server there on port 80 (E2B's domain rules are for ports 80 and 443, as hutch's allowlist)."""
    python = sdk_python()
    home = Path(tempfile.mkdtemp(prefix="hutch-e2b-copies-"))
    web = subprocess.Popen(
        ["ip", "netns", "exec", upstream.ns, sys.executable, "-c", SERVER, upstream.addr, "80", "web", str(home / "web.log")]
    )
    d = RemoteDaemon(home, "--listen", "127.0.0.1:0", HUTCH_EGRESS_HOSTS=str(upstream.hosts)).start()
    try:
        yield E2B(d, python)
    finally:
        try:
            destroy_all(home)
        finally:
            d.stop()
            web.kill()
            web.wait(5)
            sweep(home)
            shutil.rmtree(home, ignore_errors=True)


def test_fork_copies_the_workspace_into_new_sandboxes(e2b: E2B) -> None:
    out = e2b.sdk("""
        from e2b import Sandbox
        src = Sandbox.create(metadata={"case": "fork"})
        src.files.write("/workspace/seed.txt", "from the source")
        kids = src.fork(count=2, timeout=120)
        out["src"] = src.sandbox_id
        out["kids"] = [k.sandbox_id for k in kids]
        out["read"] = [k.files.read("/workspace/seed.txt") for k in kids]
        kids[0].files.write("/workspace/seed.txt", "changed in a child")
        out["source_after"] = src.files.read("/workspace/seed.txt")
        out["sibling_after"] = kids[1].files.read("/workspace/seed.txt")
        out["ran"] = kids[1].commands.run("cat /workspace/seed.txt").stdout
        out["ends"] = [(k.get_info().end_at - k.get_info().started_at).total_seconds() for k in kids]
        try:
            src.fork(count=21)
        except Exception as exc:
            out["too_many"] = type(exc).__name__
    """)
    assert len(out["kids"]) == 2 and len(set(out["kids"])) == 2
    assert out["read"] == ["from the source", "from the source"]
    assert out["source_after"] == out["sibling_after"] == out["ran"] == "from the source"
    assert all(60 < s <= 130 for s in out["ends"])  # the fork's timeout is the children's TTL
    assert out["too_many"] == "InvalidArgumentException"  # the SDK's own bound, as E2B's
    owner = e2b.owner()
    for kid in out["kids"]:
        rec = owner.get(hutch_id(kid))
        assert rec["state"] == "running" and rec["owner"] == e2b.alice["id"]
        forked = owner.events(hutch_id(kid), types=["sandbox_forked"])
        assert [e["data"]["source"] for e in forked] == [hutch_id(out["src"])]


def test_snapshot_restores_list_and_delete(e2b: E2B) -> None:
    out = e2b.sdk("""
        from e2b import Sandbox
        src = Sandbox.create()
        src.files.write("/workspace/state.txt", "v1")
        snap = src.create_snapshot(name="e2b-snap-one")
        src.files.write("/workspace/state.txt", "v2")
        out["snap"] = [snap.snapshot_id, snap.names]
        back = Sandbox.create(snap.snapshot_id, metadata={"from": "snapshot"}, timeout=120)
        out["src"], out["back"] = src.sandbox_id, back.sandbox_id
        out["restored"] = back.files.read("/workspace/state.txt")
        out["source_now"] = src.files.read("/workspace/state.txt")
        out["meta"] = back.get_info().metadata
        out["listed"] = [s.snapshot_id for s in src.list_snapshots().next_items()]
        auto = src.create_snapshot(mode="filesystem")
        out["auto"] = auto.snapshot_id
        try:
            src.create_snapshot(mode="full")
        except Exception as exc:
            out["full"] = [type(exc).__name__, str(exc)]
        out["deleted"] = [Sandbox.delete_snapshot(snap.snapshot_id), Sandbox.delete_snapshot(snap.snapshot_id)]
        out["listed_after"] = [s.snapshot_id for s in Sandbox.list_snapshots().next_items()]
    """)
    assert out["snap"] == ["e2b-snap-one", ["e2b-snap-one"]]
    assert out["restored"] == "v1" and out["source_now"] == "v2"
    assert out["meta"] == {"from": "snapshot"}
    assert out["listed"] == ["e2b-snap-one"]
    assert out["auto"].startswith("snap-")
    assert "keep files only" in out["full"][1]
    assert out["deleted"] == [True, False]
    assert out["listed_after"] == [out["auto"]]
    assert "snapshot_saved" in e2b.events(out["src"]) and "snapshot_restored" in e2b.events(out["back"])
    assert e2b.owner().get(hutch_id(out["back"]))["owner"] == e2b.alice["id"]
    # another key sees none of alice's snapshots, and cannot restore one
    other = e2b.sdk(
        f"""
        from e2b import Sandbox
        out["listed"] = [s.snapshot_id for s in Sandbox.list_snapshots().next_items()]
        try:
            Sandbox.create({out["auto"]!r})
        except Exception as exc:
            out["restore"] = [type(exc).__name__, str(exc)]
    """,
        key=e2b.bob["key"],
    )
    assert other["listed"] == [] and "404" in other["restore"][1] and "not found" in other["restore"][1]


def _curl(host: str) -> str:
    return f"curl -sS -m 10 -o /dev/null -w '%{{http_code}}' http://{host}/ || true"


def test_network_update_is_the_policy_under_the_keys_ceiling(e2b: E2B, upstream: Upstream) -> None:  # noqa: F811
    owner = e2b.owner()
    ceiling = {"mode": "allowlist", "allow_hosts": ["allowed.test", "other.test"]}
    carol = owner.create_key({"name": "carol", "network_ceiling": ceiling})
    out = e2b.sdk(
        f"""
        from e2b import Sandbox, ALL_TRAFFIC
        sbx = Sandbox.create()
        out["id"] = sbx.sandbox_id
        out["before"] = sbx.commands.run({_curl("allowed.test")!r}).stdout
        sbx.update_network({{"allow_out": ["allowed.test"], "deny_out": [ALL_TRAFFIC]}})
        out["allowed"] = sbx.commands.run({_curl("allowed.test")!r}).stdout
        out["denied"] = sbx.commands.run({_curl("denied.test")!r}).stdout
        errors = {{}}
        for name, net in [
            ("open", {{}}),
            ("wider", {{"allow_out": ["denied.test"], "deny_out": [ALL_TRAFFIC]}}),
            ("dns", {{"allow_out": ["allowed.test"], "deny_out": [ALL_TRAFFIC], "dns_servers": ["192.0.2.53"]}}),
            ("open_deny", {{"deny_out": ["192.0.2.0/24"]}}),
        ]:
            try:
                sbx.update_network(net)
                errors[name] = "no error"
            except Exception as exc:
                errors[name] = [type(exc).__name__, str(exc), getattr(exc, "status_code", None)]
        out["errors"] = errors
        out["still"] = sbx.commands.run({_curl("allowed.test")!r}).stdout
        sbx.update_network({{"allow_internet_access": False, "deny_out": ["192.0.2.0/24"]}})
        out["closed"] = sbx.commands.run({_curl("allowed.test")!r}).stdout
        try:
            Sandbox.update_network("sbx-doesnotexist", {{"allow_internet_access": False}})
        except Exception as exc:
            out["missing"] = type(exc).__name__
    """,
        key=carol["key"],
    )
    sid = hutch_id(out["id"])
    assert out["before"] == "000"  # no network at first: curl reaches nothing
    assert out["allowed"] == "200" and out["denied"] == "403"
    web = (Path(e2b.d.home) / "web.log").read_text().splitlines()
    assert web == ["GET / HTTP/1.1"] * 2  # allowed.test twice; denied.test never got there
    errors = out["errors"]
    for name in ("open", "wider"):  # wider than carol's ceiling: E2B's 403, the SDK's SandboxException
        assert errors[name][0] == "SandboxException" and errors[name][2] == 403 and "ceiling" in errors[name][1]
    assert errors["dns"][2] == 400 and "dns_servers" in errors["dns"][1]
    assert errors["open_deny"][2] == 400 and "deny all traffic" in errors["open_deny"][1]
    assert out["still"] == "200"  # a refused update changes nothing
    assert out["closed"] == "000"  # everything denied: the narrower deny adds nothing
    assert out["missing"] in ("SandboxNotFoundException", "NotFoundException")
    rec = owner.get(sid)
    assert rec["spec"]["network"]["mode"] == "none"
    changes = owner.events(sid, types=["policy_changed"])
    assert [c["data"]["after"]["mode"] for c in changes] == ["allowlist", "none"]
    assert changes[0]["data"]["after"]["allow_hosts"] == ["allowed.test"]
    deadline = time.monotonic() + 60
    while True:  # the proxy's decisions are recorded as they happen
        reasons = [e["data"]["reason"] for e in owner.events(sid, types=["egress_allowed", "egress_denied"])]
        if len(reasons) >= 2 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert reasons[:2] == ["allowed_host", "host_not_allowed"]


def test_bad_input_is_an_e2b_error_and_leaves_nothing(e2b: E2B) -> None:
    api = e2b.d.url + "/e2b/api"
    alice, bob = {"X-API-KEY": e2b.alice["key"]}, {"X-API-KEY": e2b.bob["key"]}
    made = httpx.post(api + "/sandboxes", json={"templateID": "base"}, headers=alice, timeout=120)
    assert made.status_code == 201, made.text
    sid = made.json()["sandboxID"]
    owner = e2b.owner()
    before = {s["id"] for s in owner.list()}
    cases = [
        ("POST", f"/sandboxes/{sid}/fork", {"count": 0}, alice, 400),
        ("POST", f"/sandboxes/{sid}/fork", {"count": "2"}, alice, 400),
        ("POST", f"/sandboxes/{sid}/fork", {"timeout": -1}, alice, 400),
        ("POST", f"/sandboxes/{sid}/fork", {}, bob, 404),  # another key's sandbox does not exist for it
        ("POST", f"/sandboxes/{sid}/snapshots", {"name": "no spaces allowed"}, alice, 400),
        ("POST", f"/sandboxes/{sid}/snapshots", {"name": 7}, alice, 400),
        ("POST", f"/sandboxes/{sid}/snapshots", {"memory": True}, alice, 400),
        ("POST", f"/sandboxes/{sid}/snapshots", {}, bob, 404),
        ("PUT", f"/sandboxes/{sid}/network", {"allowOut": "example.com"}, alice, 400),
        ("PUT", f"/sandboxes/{sid}/network", {"allow_internet_access": False}, bob, 404),
        ("DELETE", "/templates/no-such-snapshot", None, alice, 404),
        ("GET", "/snapshots?limit=x", None, alice, 400),
    ]
    for method, path, body, headers, status in cases:
        r = httpx.request(method, api + path, json=body, headers=headers, timeout=120)
        assert r.status_code == status, (method, path, body, r.text)
        assert r.json()["code"] == status and r.json()["message"], r.text
    assert {s["id"] for s in owner.list()} == before  # no fork child, no restored sandbox
    assert all(s["sandbox_id"] != hutch_id(sid) for s in owner.snapshots())
    assert owner.get(hutch_id(sid))["spec"]["network"]["mode"] == "none"
    httpx.delete(api + f"/sandboxes/{sid}", headers=alice, timeout=120)
