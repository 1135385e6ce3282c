"""The unikraft provider end to end: a real daemon, the CLI, and the spec-built test server
whose instances are real local sandboxes. Every request and answer is checked against the
published OpenAPI files."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import Daemon, hutch_env
from tests.integration.ukc_support import ACCOUNT, OTHER_TOKEN, SPECS, TOKEN, TestServer, validate_log

from hutch import wire
from hutch.wire.pydantic import adapter

pytestmark = [pytest.mark.integration, pytest.mark.skipif(not SPECS.is_dir(), reason=f"no specs at {SPECS}")]


@pytest.fixture(scope="module")
def ukc() -> Iterator[TestServer]:
    ts = TestServer()
    try:
        yield ts
    finally:
        ts.stop()


def env(home: Path, ts: TestServer, **extra: str) -> dict[str, str]:
    base = {"HUTCH_UNIKRAFT_TOKEN": TOKEN, "UKC_METRO": ts.url, "HUTCH_UNIKRAFT_READY_TIMEOUT": "3"} | extra
    return hutch_env(home, **{k: v for k, v in base.items() if v})


def hutch(home: Path, ts: TestServer, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hutch", *args], env=env(home, ts, **extra), capture_output=True, text=True, timeout=180
    )


def js(proc: subprocess.CompletedProcess[str]) -> Any:
    assert proc.stdout.strip(), proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def ukd(hutch_home: Path, ukc: TestServer) -> Iterator[Daemon]:
    # the daemon has neither token nor metro: every command brings its caller's (issue 11, item 13)
    d = Daemon(hutch_home, HUTCH_UNIKRAFT_READY_TIMEOUT="3").start()
    try:
        yield d
    finally:
        hutch(hutch_home, ukc, "destroy", "--all")
        hutch(hutch_home, ukc, "cleanup", "--provider", "unikraft")
        d.stop()


def mine(ts: TestServer) -> list[dict[str, Any]]:
    return [i for i in ts.state()["instances"] if i["account"] == ACCOUNT]


def test_lifecycle_exec_files_and_the_spec(ukd: Daemon, ukc: TestServer) -> None:
    home = ukd.home
    ukc.reset_log()
    before = ukc.state()["creates"]
    created = js(hutch(home, ukc, "create", "--provider", "unikraft", "--name", "u1", "-e", "GREETING=hi", "--json"))
    rec = adapter(wire.SandboxRecord).validate_python(created)
    assert rec["credential"] and rec["credential"]["state"] == "in_memory"
    assert rec["state"] == "running" and rec["provider"] == "unikraft"
    assert ukc.state()["creates"] == before + 1
    inst = [i for i in mine(ukc) if i["name"].startswith("hutch-")]
    assert len(inst) == 1 and inst[0]["env"] == {"GREETING": "hi"} and inst[0]["memory_mb"] == 1024

    with ukd.client() as c:
        held = adapter(wire.Credentials).validate_python(c.json("GET", "/v1/credentials"))
        assert [a["state"] for a in held["accounts"]] == ["in_memory"] and held["accounts"][0]["sandboxes"] == [rec["id"]]
        n = len(ukc.state()["log"])
        r = c.exec("u1", {"command": ["sh", "-c", "echo out; echo err >&2; echo $GREETING; exit 3"]})
        requests = ukc.state()["log"][n:]
        assert (r["exit_code"], r["stdout"], r["stderr"]) == (3, "out\nhi\n", "err\n")
        assert len(requests) <= 3, [(e["method"], e["path"]) for e in requests]  # the JS SDK needs 5

        r = c.exec("u1", {"command": ["sh", "-c", "echo key=$API_KEY"], "secrets": {"API_KEY": "s3cr3t-value"}})
        assert (r["exit_code"], r["stdout"]) == (0, "key=[redacted:API_KEY]\n")
        r = c.exec("u1", {"command": ["cat"], "stdin": "fed"})
        assert (r["exit_code"], r["stdout"]) == (0, "fed")
        r = c.exec("u1", {"command": ["sleep", "30"], "timeout": 1})
        assert (r["status"], r["exit_code"]) == ("timed_out", 124)

        c.write_file("u1", "dir/f.txt", b"\x00binary\xff")
        assert c.read_file("u1", "dir/f.txt") == (b"\x00binary\xff", False)
        assert [e["name"] for e in c.list_files("u1", "dir")] == ["f.txt"]

        run = c.exec("u1", {"command": ["sh", "-c", "echo started; sleep 60"], "background": True})
        assert run["status"] == "running"
        while c.output(run["id"])["stdout"]["data"] != "started\n":  # poll reads the live output
            pass
        killed = c.kill(run["id"], "KILL")
        assert killed["signalled"]
        done = c.wait(run["id"], timeout=60)
        assert done["status"] == "killed", done
        out = c.output(run["id"])
        assert out["stdout"]["data"] == "started\n"
        logs = c.logs("u1")
        assert any(r["data"] == "fed" for r in logs["records"])

    gone = js(hutch(home, ukc, "destroy", "u1", "--json"))
    assert gone[0]["existed"] and "absence proven" in gone[0]["message"]
    assert js(hutch(home, ukc, "destroy", "u1", "--json"))[0]["message"] == "already gone"
    assert not [i for i in mine(ukc) if i["name"] == inst[0]["name"]]
    assert js(hutch(home, ukc, "list", "--provider", "unikraft", "--json"))["items"] == []
    checked = validate_log(ukc.state()["log"])
    assert checked > 15
    daemon_log = (home / "test-daemon.log").read_text(errors="replace")  # the Daemon helper's stdout and stderr
    assert TOKEN not in daemon_log and TOKEN not in json.dumps(ukd.client().list())


def test_run_and_status_and_inventory(ukd: Daemon, ukc: TestServer) -> None:
    home = ukd.home
    p = hutch(home, ukc, "run", "--provider", "unikraft", "--", "sh", "-c", "echo ran; exit 5")
    assert (p.returncode, p.stdout) == (5, "ran\n"), p.stderr
    js(hutch(home, ukc, "warmup", "--provider", "unikraft", "--name", "w", "--workdir", "/tmp/app", "--json"))
    st = adapter(wire.SandboxStatus).validate_python(js(hutch(home, ukc, "status", "w", "--wait", "--json")))
    assert hutch(home, ukc, "exec", "w", "--", "pwd").stdout == "/tmp/app\n"  # made at create
    assert "network:   the instance's own (not filtered by hutch)" in hutch(home, ukc, "get", "w").stdout
    assert st["state"] == "running" and st["claim"]["state"] == "ready" and st["instance"] == "running"
    inv = adapter(wire.Inventory).validate_python(js(hutch(home, ukc, "list", "--provider", "unikraft", "--json")))
    assert [i["sandbox"] for i in inv["items"]] == [st["sandbox"]] and inv["account"] == ACCOUNT
    # an instance nobody claimed (made with the raw API) shows only with --all, and cleanup leaves it
    stray = subprocess.run(
        [sys.executable, "-c", STRAY, ukc.url, TOKEN], capture_output=True, text=True, timeout=60, check=True
    ).stdout.strip()
    listed = js(hutch(home, ukc, "list", "--provider", "unikraft", "--all", "--json"))
    everything = adapter(wire.Inventory).validate_python(listed)["items"]
    assert {"claimed": False, "uuid": stray}.items() <= next(i for i in everything if i["uuid"] == stray).items()
    dry = adapter(wire.CleanupReport).validate_python(js(hutch(home, ukc, "cleanup", "--dry-run", "--json")))
    assert [a["action"] for a in dry["providers"][0]["actions"]] == ["skip-live"]
    js(hutch(home, ukc, "stop", "w", "--json"))
    assert adapter(wire.CleanupReport).validate_python(js(hutch(home, ukc, "cleanup", "--json")))["ok"]
    assert stray in [i["uuid"] for i in mine(ukc)]  # unclaimed: never touched
    ukc.delete_behind_our_back(stray)


STRAY = """
import json, sys, urllib.request
req = urllib.request.Request(sys.argv[1] + "/v1/instances", method="POST",
    data=json.dumps({"name": "not-ours", "image": "nginx:latest"}).encode(),
    headers={"authorization": "Bearer " + sys.argv[2], "content-type": "application/json"})
print(json.loads(urllib.request.urlopen(req).read())["data"]["instances"][0]["uuid"])
"""


def test_standby_is_woken_transparently(ukd: Daemon, ukc: TestServer) -> None:
    ukc.faults(standby=True, wake_seconds=0.5)
    try:
        rec = js(hutch(ukd.home, ukc, "create", "--provider", "unikraft", "--json"))
    finally:
        ukc.faults(standby=False)
    with ukd.client() as c:
        assert c.exec(rec["id"], {"command": ["echo", "awake"]})["stdout"] == "awake\n"
    statuses = [e["response"]["status"] for e in ukc.state()["log"] if "/plugins/" in e["path"]]
    assert 503 in statuses


def test_ambiguous_creates_adopt_exactly_one(ukd: Daemon, ukc: TestServer) -> None:
    for fault in ("drop_create", "create_500"):
        before = ukc.state()["creates"]
        ukc.faults(**{fault: 1})
        rec = js(hutch(ukd.home, ukc, "create", "--provider", "unikraft", "--json"))
        assert rec["state"] == "running", (fault, rec)
        assert ukc.state()["creates"] == before + 1, fault  # adopted, never created twice
        with ukd.client() as c:
            assert c.exec(rec["id"], {"command": ["true"]})["exit_code"] == 0


def test_partial_delete_keeps_the_claim_and_a_retry_finishes(ukd: Daemon, ukc: TestServer) -> None:
    rec = js(hutch(ukd.home, ukc, "create", "--provider", "unikraft", "--json"))
    ukc.faults(partial_delete=1)
    p = hutch(ukd.home, ukc, "destroy", rec["id"], "--json")
    assert p.returncode == 1 and js(p)["error"]["kind"] == "unavailable"
    claims = js(hutch(ukd.home, ukc, "list", "--provider", "unikraft", "--json"))["items"]
    assert [c["claim_state"] for c in claims] == ["delete_attempt"]
    assert js(hutch(ukd.home, ukc, "cleanup", "--json"))["ok"]
    assert js(hutch(ukd.home, ukc, "list", "--provider", "unikraft", "--json"))["items"] == []
    assert not [i for i in mine(ukc) if i["name"] == claims[0]["name"]]


def test_redirects_that_would_change_a_mutation_are_refused(ukd: Daemon, ukc: TestServer) -> None:
    before = ukc.state()["creates"]
    # the quotas read is the first request of a create; then the POST gets the redirect
    ukc.faults(redirect={"status": 302, "location": "/v1/instances"}, redirect_after=1)
    p = hutch(ukd.home, ukc, "create", "--provider", "unikraft", "--json")
    assert p.returncode == 1 and "change the method" in js(p)["error"]["message"]
    assert ukc.state()["creates"] == before
    assert js(hutch(ukd.home, ukc, "cleanup", "--json"))["ok"]  # the intent is proven absent and dropped
    assert js(hutch(ukd.home, ukc, "list", "--provider", "unikraft", "--json"))["items"] == []
    ukc.faults(redirect={"status": 307, "location": "http://evil.example:1/v1/users/quotas"}, redirect_after=0)
    p = hutch(ukd.home, ukc, "doctor", "--provider", "unikraft", "--json")
    assert "another origin" in p.stdout


def test_bad_input_is_refused_before_anything_is_made(ukd: Daemon, ukc: TestServer) -> None:
    home = ukd.home
    before = ukc.state()["creates"]
    p = hutch(home, ukc, "create", "--provider", "unikraft", "--unikraft-metro", "mars", "--json")
    assert p.returncode == 2 and "metro" in js(p)["error"]["message"]
    p = hutch(home, ukc, "create", "--provider", "unikraft", "--unikraft-metro", "http://example.com", "--json")
    assert p.returncode == 2 and "loopback" in js(p)["error"]["message"]
    p = hutch(home, ukc, "create", "--provider", "unikraft", "--unikraft-metro", ukc.url + "/api?x=1", "--json")
    assert p.returncode == 2
    p = hutch(home, ukc, "create", "--provider", "unikraft", "--image", "no-such:image", "--json")
    assert p.returncode == 2 and "not found" in js(p)["error"]["message"]
    ukc.faults(quota_instances=len(mine(ukc)))
    try:
        p = hutch(home, ukc, "create", "--provider", "unikraft", "--json")
        assert p.returncode == 1 and js(p)["error"]["kind"] == "capacity"
    finally:
        ukc.faults(quota_instances=100)
    p = hutch(home, ukc, "create", "--provider", "local", "--image", "x", "--json")
    assert p.returncode == 1 and js(p)["error"]["kind"] == "not_found"  # local boots images; this one is not stored
    assert "hutch image pull x" in js(p)["error"]["hint"]
    assert ukc.state()["creates"] == before  # nothing was made (the image was refused by the create call itself)
    assert js(hutch(home, ukc, "list", "--provider", "unikraft", "--json"))["items"] == []


def test_plugin_never_ready_deletes_the_instance(ukd: Daemon, ukc: TestServer, monkeypatch: pytest.MonkeyPatch) -> None:
    ukc.faults(plugin_never_ready=True)
    try:
        p = hutch(ukd.home, ukc, "create", "--provider", "unikraft", "--json")
    finally:
        ukc.faults(plugin_never_ready=False)
    assert p.returncode == 1 and "never became ready" in js(p)["error"]["message"]
    assert "deleted" in js(p)["error"]["message"]
    assert js(hutch(ukd.home, ukc, "list", "--provider", "unikraft", "--json"))["items"] == []
    assert not [i for i in mine(ukc) if i["name"].startswith("hutch-")]


def test_tokens_missing_or_of_another_account(hutch_home: Path, ukc: TestServer) -> None:
    d = Daemon(hutch_home, UKC_METRO=ukc.url).start()  # no token at all
    try:
        p = hutch(hutch_home, ukc, "create", "--provider", "unikraft", "--json", HUTCH_UNIKRAFT_TOKEN="")
        err = js(p)["error"]
        assert err["kind"] == "unauthorized" and "HUTCH_UNIKRAFT_TOKEN" in err["hint"] and "UKC_TOKEN" in err["hint"]
    finally:
        d.stop()
    d = Daemon(hutch_home, HUTCH_UNIKRAFT_TOKEN=TOKEN, UKC_METRO=ukc.url).start()
    try:
        rec = js(hutch(hutch_home, ukc, "create", "--provider", "unikraft", "--json"))
    finally:
        d.stop()
    d = Daemon(hutch_home, UKC_TOKEN=OTHER_TOKEN, UKC_METRO=ukc.url).start()
    try:
        p = hutch(hutch_home, ukc, "destroy", rec["id"], "--json", HUTCH_UNIKRAFT_TOKEN="", UKC_TOKEN=OTHER_TOKEN)
        assert js(p)["error"]["kind"] == "unauthorized" and "another" in js(p)["error"]["message"]
        assert OTHER_TOKEN not in p.stdout + p.stderr
        other = {"HUTCH_UNIKRAFT_TOKEN": "", "UKC_TOKEN": OTHER_TOKEN}
        assert js(hutch(hutch_home, ukc, "list", "--provider", "unikraft", "--json", **other))["items"] == []  # not in scope
        # the caller's own token counts, whatever the daemon was started with
        assert len(js(hutch(hutch_home, ukc, "list", "--provider", "unikraft", "--json"))["items"]) == 1
    finally:
        d.stop()
    d = Daemon(hutch_home, HUTCH_UNIKRAFT_TOKEN=TOKEN, UKC_METRO=ukc.url).start()
    try:
        assert js(hutch(hutch_home, ukc, "destroy", rec["id"], "--json"))[0]["existed"]
    finally:
        d.stop()


SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "live-smoke-unikraft"


def test_live_smoke_skips_unless_asked(tmp_path: Path) -> None:
    for extra in (
        {},
        {"HUTCH_LIVE": "1"},
        {"HUTCH_LIVE_PROVIDERS": "unikraft"},
        {"HUTCH_LIVE": "1", "HUTCH_LIVE_PROVIDERS": "ssh"},
    ):
        env = hutch_env(tmp_path, **extra)  # no HUTCH_* from this environment
        p = subprocess.run([sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)
        assert (p.returncode, "skipped" in p.stdout) == (0, True), (extra, p.stdout, p.stderr)


def test_live_smoke_passes_against_the_test_server(tmp_path: Path, ukc: TestServer) -> None:
    out = tmp_path / "live"
    env = hutch_env(tmp_path, HUTCH_LIVE="1", HUTCH_LIVE_PROVIDERS="unikraft", UKC_TOKEN=TOKEN, UKC_METRO=ukc.url)
    env["HUTCH_LIVE_DIR"] = str(out)
    p = subprocess.run([sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "PASS" in p.stdout and TOKEN not in p.stdout and ukc.url not in p.stdout
    log = out / "live-smoke.log"
    assert log.stat().st_mode & 0o077 == 0 and TOKEN not in log.read_text()


def test_a_slow_create_times_out_and_is_adopted(hutch_home: Path, ukc: TestServer) -> None:
    d = Daemon(hutch_home, HUTCH_UNIKRAFT_TOKEN=TOKEN, UKC_METRO=ukc.url, HUTCH_UNIKRAFT_TIMEOUT="1").start()
    try:
        before = ukc.state()["creates"]
        ukc.faults(slow_create=2.5)
        try:
            rec = js(hutch(hutch_home, ukc, "create", "--provider", "unikraft", "--json"))
        finally:
            ukc.faults(slow_create=0)
        assert rec["state"] == "running" and ukc.state()["creates"] == before + 1
        assert js(hutch(hutch_home, ukc, "destroy", rec["id"], "--json"))[0]["existed"]
    finally:
        d.stop()


def test_two_instances_of_one_name_are_never_guessed_between(ukd: Daemon, ukc: TestServer) -> None:
    before = ukc.state()["creates"]
    ukc.faults(double_create=1, duplicate_names=True)
    try:
        p = hutch(ukd.home, ukc, "create", "--provider", "unikraft", "--json")
    finally:
        ukc.faults(duplicate_names=False)
    assert p.returncode == 1 and "2 matches" in js(p)["error"]["message"] and "cleanup" in js(p)["error"]["hint"]
    assert ukc.state()["creates"] == before + 2  # both made by the server in one create; hutch sent one
    [claim] = js(hutch(ukd.home, ukc, "list", "--provider", "unikraft", "--json"))["items"]
    assert claim["claim_state"] == "intent"
    report = js(hutch(ukd.home, ukc, "cleanup", "--json"))
    assert not report["ok"] and report["providers"][0]["actions"][0]["error"]["kind"] == "conflict"
    twins = [i for i in mine(ukc) if i["name"] == claim["name"]]
    assert len(twins) == 2  # left alone: which one is ours cannot be told
    for twin in twins:
        ukc.delete_behind_our_back(twin["uuid"])
    assert js(hutch(ukd.home, ukc, "cleanup", "--json"))["ok"]  # now proven absent: the intent goes
    assert js(hutch(ukd.home, ukc, "list", "--provider", "unikraft", "--json"))["items"] == []


def test_forget_missing_drops_claims_the_provider_deleted(ukd: Daemon, ukc: TestServer) -> None:
    rec = js(hutch(ukd.home, ukc, "create", "--provider", "unikraft", "--json"))
    [item] = js(hutch(ukd.home, ukc, "list", "--provider", "unikraft", "--json"))["items"]
    ukc.delete_behind_our_back(item["uuid"])
    [item] = js(hutch(ukd.home, ukc, "list", "--provider", "unikraft", "--json"))["items"]
    assert item["missing"] and item["instance_state"] == "missing"
    report = js(hutch(ukd.home, ukc, "cleanup", "--json"))
    assert report["providers"][0]["actions"][0]["action"] == "report-missing"
    report = js(hutch(ukd.home, ukc, "cleanup", "--forget-missing", "--json"))
    assert report["ok"] and report["providers"][0]["actions"][0]["action"] == "forget"
    assert js(hutch(ukd.home, ukc, "list", "--provider", "unikraft", "--json"))["items"] == []
    assert js(hutch(ukd.home, ukc, "get", rec["id"], "--json"))["state"] == "lost"


def test_the_sdk_drives_unikraft_sandboxes(ukd: Daemon, ukc: TestServer, monkeypatch: pytest.MonkeyPatch) -> None:
    from hutch import Sandbox

    monkeypatch.setenv("UKC_TOKEN", TOKEN)  # the SDK's process: its token travels with its requests

    with Sandbox.create(provider="unikraft", image="hutch/sandbox:latest", unikraft_metro=ukc.url, settings=ukd.settings) as sbx:
        assert sbx.exec("echo from-sdk; exit 2").exit_code == 2
        assert sbx.exec(["cat"], stdin="in").stdout == "in"
        quiet = sbx.exec("echo once; sleep 30", idle_timeout=1)
        assert (quiet.status, quiet.exit_code, quiet.stdout) == ("timed_out", 124, "once\n")
        [inst] = [i for i in mine(ukc) if i["name"] == js(hutch(ukd.home, ukc, "status", sbx.id, "--json"))["claim"]["name"]]
        assert inst["image"] == "hutch/sandbox:latest"
    assert js(hutch(ukd.home, ukc, "list", "--provider", "unikraft", "--json"))["items"] == []


def test_a_ttl_expiry_deletes_the_instance_through_its_claim(ukd: Daemon, ukc: TestServer) -> None:
    rec = js(hutch(ukd.home, ukc, "create", "--provider", "unikraft", "--ttl", "1s", "--json"))
    with ukd.client() as c:
        for _ in range(300):  # the daemon's reaper checks every second
            if c.get(rec["id"])["state"] == "destroyed":
                break
            time.sleep(0.1)
        assert c.get(rec["id"])["state"] == "destroyed"
    assert js(hutch(ukd.home, ukc, "list", "--provider", "unikraft", "--json"))["items"] == []
    assert not [i for i in mine(ukc) if i["name"] == "hutch-" + rec["id"].removeprefix("sbx_")]
