"""Unikraft credentials come from the caller: the token and metro of the shell a command runs
in travel with the request, the daemon keeps them in memory only, uses them for the
account's later work (expiry, cleanup), says which one it holds, and after a restart shows
the account's credential as missing until a caller brings it again (or an owner-only
credentials file arms an unattended daemon). Real daemons, the CLI, and the spec-built
test server whose instances are real local sandboxes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import Daemon, hutch_env
from tests.integration.ukc_support import ACCOUNT, OTHER_TOKEN, SPECS, TOKEN, TestServer, validate_log

from hutch.credentials import fingerprint

pytestmark = [pytest.mark.integration, pytest.mark.skipif(not SPECS.is_dir(), reason=f"no specs at {SPECS}")]
WAIT = 120.0  # generous: the machine may be loaded


@pytest.fixture(scope="module")
def ukc() -> Iterator[TestServer]:
    ts = TestServer()
    try:
        yield ts
    finally:
        ts.stop()


def env(home: Path, **extra: str) -> dict[str, str]:
    """An environment without any Unikraft variable of this process, plus ``extra``."""
    base = hutch_env(home, HUTCH_UNIKRAFT_READY_TIMEOUT="3")
    for var in ("UKC_TOKEN", "UKC_API_KEY", "UKC_METRO"):
        base.pop(var, None)
    return base | extra


def hutch(home: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hutch", *args], env=env(home, **extra), capture_output=True, text=True, timeout=180
    )


def js(proc: subprocess.CompletedProcess[str]) -> Any:
    assert proc.stdout.strip(), proc.stderr
    return json.loads(proc.stdout)


def caller(ts: TestServer) -> dict[str, str]:
    return {"UKC_TOKEN": TOKEN, "UKC_METRO": ts.url}


def daemon(home: Path, argv: Sequence[str] = ("hutch", "serve"), **extra: str) -> Daemon:
    """A daemon whose own environment has neither a Unikraft token nor a metro."""
    d = Daemon(home, argv=argv, **extra)
    d.env = env(home, **extra)
    return d.start()


def mine(ts: TestServer) -> list[dict[str, Any]]:
    return [i for i in ts.state()["instances"] if i["account"] == ACCOUNT]


def wait_for(what: str, check: Any) -> Any:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def assert_token_nowhere(home: Path) -> None:
    """Neither token is in any file of HUTCH_HOME (store, WAL, logs, run output) nor the daemon log."""
    for path in home.rglob("*"):
        if path.is_file() and not path.is_socket():
            data = path.read_bytes()
            assert TOKEN.encode() not in data and OTHER_TOKEN.encode() not in data, path


def test_the_callers_token_and_metro_travel_with_each_request(hutch_home: Path, ukc: TestServer) -> None:
    d = daemon(hutch_home)
    try:
        doctor = js(hutch(hutch_home, "doctor", "--provider", "unikraft", "--json", **caller(ukc)))
        [token] = [c for c in doctor["checks"] if c["name"] == "unikraft token"]
        assert token["ok"] and token["detail"] == "from UKC_TOKEN"

        rec = js(hutch(hutch_home, "create", "--provider", "unikraft", "--json", **caller(ukc)))
        assert rec["state"] == "running", rec
        held = {"state": "in_memory", "origin": "caller", "source": "UKC_TOKEN", "fingerprint": fingerprint(TOKEN)}
        assert {k: rec["credential"][k] for k in held} == held and rec["credential"]["account"] == ACCOUNT
        assert len(mine(ukc)) == 1

        # a caller without any token: what the daemon holds for the account serves it
        p = hutch(hutch_home, "exec", rec["id"], "--", "echo", "from-memory")
        assert (p.returncode, p.stdout) == (0, "from-memory\n"), p.stderr
        got = js(hutch(hutch_home, "get", rec["id"], "--json"))
        assert {k: got["credential"][k] for k in held} == held
        human = hutch(hutch_home, "get", rec["id"]).stdout
        assert f"credential: in memory (from caller, UKC_TOKEN, token {fingerprint(TOKEN)})" in human
        checks = [c for c in js(hutch(hutch_home, "doctor", "--json"))["checks"] if c["name"] == "unikraft credential"]
        assert len(checks) == 1 and checks[0]["ok"] and ACCOUNT in checks[0]["detail"] and rec["id"] in checks[0]["detail"]

        # the caller's metro counts for the inventory too; another account's token is refused
        assert len(js(hutch(hutch_home, "list", "--provider", "unikraft", "--json", **caller(ukc)))["items"]) == 1
        p = hutch(hutch_home, "list", "--provider", "unikraft", "--json", UKC_TOKEN=OTHER_TOKEN, UKC_METRO=ukc.url)
        assert js(p)["items"] == []  # another account's claims are not in its scope

        gone = js(hutch(hutch_home, "destroy", rec["id"], "--json"))  # no token: from memory
        assert gone[0]["existed"] and "absence proven" in gone[0]["message"]
        assert mine(ukc) == []
    finally:
        d.stop()
    validate_log(ukc.state()["log"])
    assert_token_nowhere(hutch_home)


def test_no_token_anywhere_says_where_to_put_it(hutch_home: Path, ukc: TestServer) -> None:
    d = daemon(hutch_home)
    try:
        p = hutch(hutch_home, "create", "--provider", "unikraft", "--json", UKC_METRO=ukc.url)
        err = js(p)["error"]
        assert p.returncode == 1 and err["kind"] == "unauthorized"
        assert "UKC_TOKEN" in err["hint"] and "--credentials-file" in err["hint"] and "restart" not in err["hint"]
    finally:
        d.stop()


def events(d: Daemon, sandbox: str) -> list[str]:
    with d.client() as c:
        return [e["type"] for e in c.events(sandbox)]


def test_a_ttl_expiry_across_a_kill_9_waits_for_the_credential_then_deletes(hutch_home: Path, ukc: TestServer) -> None:
    d = daemon(hutch_home)
    try:
        rec = js(hutch(hutch_home, "create", "--provider", "unikraft", "--ttl", "4s", "--json", **caller(ukc)))
        assert rec["state"] == "running", rec
        [inst] = mine(ukc)
    finally:
        d.kill9()
    wait_for("the TTL to pass", lambda: time.time() > rec["expires_at"] + 1)
    d = daemon(hutch_home)
    try:
        # the reaper finds it due, but the restarted daemon holds no credential: it says so
        wait_for("an expiry-pending event", lambda: "sandbox_expiry_pending" in events(d, rec["id"]))
        got = js(hutch(hutch_home, "get", rec["id"], "--json"))  # a caller without a token
        assert got["state"] == "running" and got["credential"]["state"] == "missing", got
        assert "credential: missing" in hutch(hutch_home, "get", rec["id"]).stdout
        [listed] = [r for r in js(hutch(hutch_home, "list", "--json")) if r["id"] == rec["id"]]
        assert listed["credential"]["state"] == "missing"
        assert "running, credential missing" in hutch(hutch_home, "list").stdout
        p = hutch(hutch_home, "doctor", "--json")
        [check] = [c for c in js(p)["checks"] if c["name"] == "unikraft credential"]
        assert p.returncode == 1 and not check["ok"] and rec["id"] in check["detail"] and "UKC_TOKEN" in check["fix"]
        assert [i["uuid"] for i in mine(ukc)] == [inst["uuid"]]  # not deleted, and not silently kept either

        # any command of a caller of that account brings the credential back: the expiry goes on
        assert js(hutch(hutch_home, "list", "--json", **caller(ukc)))
        wait_for("the expiry", lambda: js(hutch(hutch_home, "get", rec["id"], "--json"))["state"] == "destroyed")
        assert mine(ukc) == []
        assert js(hutch(hutch_home, "list", "--provider", "unikraft", "--json", **caller(ukc)))["items"] == []  # claim gone
        seen = events(d, rec["id"])
        assert seen.index("sandbox_expiry_pending") < seen.index("sandbox_expired") < seen.index("sandbox_destroyed")
        assert "claim_dropped" in seen
    finally:
        d.stop()
    assert_token_nowhere(hutch_home)


def test_a_credentials_file_must_be_owner_only(hutch_home: Path, tmp_path: Path) -> None:
    path = tmp_path / "creds.toml"
    path.write_text(f'[unikraft]\ntoken = "{TOKEN}"\n')
    path.chmod(0o644)
    p = subprocess.run(
        [sys.executable, "-m", "hutch", "serve", "--credentials-file", str(path), "--json"],
        env=env(hutch_home),
        capture_output=True,
        text=True,
        timeout=60,
    )
    err = js(p)["error"]
    assert p.returncode == 2 and err["kind"] == "invalid" and "group or others" in err["message"]
    assert f"chmod 600 {path}" in err["hint"] and TOKEN not in p.stdout + p.stderr
    assert not (hutch_home / "hutchd.sock").exists()


def test_a_credentials_file_arms_an_unattended_daemon_after_a_kill_9(hutch_home: Path, ukc: TestServer, tmp_path: Path) -> None:
    path = tmp_path / "creds.toml"
    path.write_text(f'[[unikraft]]\ntoken = "{OTHER_TOKEN}"\n\n[[unikraft]]\ntoken = "{TOKEN}"\n')
    path.chmod(0o600)
    d = daemon(hutch_home)
    try:
        keep = js(hutch(hutch_home, "create", "--provider", "unikraft", "--json", **caller(ukc)))
        short = js(hutch(hutch_home, "create", "--provider", "unikraft", "--ttl", "4s", "--json", **caller(ukc)))
    finally:
        d.kill9()
    wait_for("the TTL to pass", lambda: time.time() > short["expires_at"] + 1)
    d = daemon(hutch_home, HUTCH_CREDENTIALS_FILE=str(path))
    try:  # no caller brings anything: the file's token of that account serves the reaper
        wait_for("the expiry", lambda: js(hutch(hutch_home, "get", short["id"], "--json"))["state"] == "destroyed")
        got = js(hutch(hutch_home, "get", keep["id"], "--json"))
        assert got["credential"]["state"] == "in_memory" and got["credential"]["origin"] == "credentials file"
        assert got["credential"]["fingerprint"] == fingerprint(TOKEN)
        assert "sandbox_expiry_pending" not in events(d, short["id"])
        assert js(hutch(hutch_home, "destroy", keep["id"], "--json"))[0]["existed"]
        assert mine(ukc) == []
    finally:
        d.stop()
    os.unlink(path)
    assert_token_nowhere(hutch_home)


def test_once_a_caller_brings_the_credential_leftover_claims_and_runs_are_settled(hutch_home: Path, ukc: TestServer) -> None:
    d = daemon(hutch_home)
    try:
        keep = js(hutch(hutch_home, "create", "--provider", "unikraft", "--json", **caller(ukc)))
        # the run goes on until the test lets it end (a fixed sleep could end before the restarts
        # below on a loaded machine, and a daemon that had the caller's credential settle it early)
        gate = "until [ -e /tmp/go ]; do sleep 0.1; done; echo late"
        run = js(hutch(hutch_home, "exec", keep["id"], "--background", "--json", "--", "sh", "-c", gate))
        [kept] = mine(ukc)
        assert run["status"] == "running", run
    finally:
        d.kill9()
    d = daemon(hutch_home, ("hutch.testing.crash", "create_answered"))  # a create that dies once its instance exists
    try:
        p = hutch(hutch_home, "create", "--provider", "unikraft", "--json", **caller(ukc))
        assert p.returncode != 0
        d.proc.wait(60)  # type: ignore[union-attr]
    finally:
        d.stop()
    assert len(mine(ukc)) == 2  # the kept sandbox and the interrupted create's instance
    d = daemon(hutch_home)
    try:
        with d.client() as c:  # no caller token: the run waits, neither lost nor settled
            assert c.run(run["id"])["status"] == "running"
            [failed] = [r for r in c.list(include_all=True) if r["state"] == "failed"]
        assert len(mine(ukc)) == 2
        ukc.write_behind_our_back(kept["uuid"], "/tmp/go", "")  # the run may end now
        js(hutch(hutch_home, "list", "--json", **caller(ukc)))  # any command brings it
        wait_for("the leftover instance to go", lambda: len(mine(ukc)) == 1)
        wait_for("the run to be settled", lambda: d.client().run(run["id"])["status"] != "running")
        with d.client() as c:
            done = c.wait(run["id"], timeout=60)
            assert (done["status"], done["exit_code"]) == ("completed", 0), done
            assert c.output(run["id"])["stdout"]["data"] == "late\n"
            # the claim is dropped once the instance is proven absent, a step after its delete was accepted
            wait_for("the claim to be dropped", lambda: "claim_dropped" in [e["type"] for e in c.events(failed["id"])])
        [claim] = js(hutch(hutch_home, "list", "--provider", "unikraft", "--json", **caller(ukc)))["items"]
        assert claim["sandbox"] == keep["id"]
        assert js(hutch(hutch_home, "destroy", keep["id"], "--json"))[0]["existed"]
    finally:
        d.stop()
    assert mine(ukc) == []
    assert_token_nowhere(hutch_home)
