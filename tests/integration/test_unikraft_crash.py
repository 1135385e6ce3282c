"""Crash injection: the daemon is SIGKILLed (hutch.testing.crash) at every lifecycle step of a
unikraft sandbox; then a fresh daemon's ``hutch cleanup`` must leave zero instances on the
test server, zero claims, and the server must have seen at most one create."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import Daemon, hutch_env
from tests.integration.ukc_support import ACCOUNT, SPECS, TOKEN, TestServer, validate_log

pytestmark = [pytest.mark.integration, pytest.mark.skipif(not SPECS.is_dir(), reason=f"no specs at {SPECS}")]

CREATE_POINTS = ["after_intent", "create_sent", "create_answered"]  # STEPS of hutch.service.claims
DESTROY_POINTS = ["delete_attempt", "delete_accepted", "mid_proof"]


@pytest.fixture(scope="module")
def ukc() -> Iterator[TestServer]:
    ts = TestServer()
    try:
        yield ts
    finally:
        ts.stop()


def hutch(home: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = hutch_env(home, HUTCH_UNIKRAFT_TOKEN=TOKEN, UKC_METRO=url)
    return subprocess.run([sys.executable, "-m", "hutch", *args], env=env, capture_output=True, text=True, timeout=180)


def daemon(home: Path, url: str, crash: str | None = None) -> Daemon:
    argv = ("hutch.testing.crash", crash) if crash else ("hutch", "serve")
    return Daemon(home, argv=argv, HUTCH_UNIKRAFT_TOKEN=TOKEN, UKC_METRO=url).start()


@pytest.mark.parametrize("point", CREATE_POINTS + DESTROY_POINTS)
def test_sigkill_at_every_step_then_cleanup_leaves_nothing(hutch_home: Path, ukc: TestServer, point: str) -> None:
    before = ukc.state()
    d = daemon(hutch_home, ukc.url, point)
    try:
        if point in DESTROY_POINTS:
            rec = json.loads(hutch(hutch_home, ukc.url, "create", "--provider", "unikraft", "--json").stdout)
            assert rec["state"] == "running"
            p = hutch(hutch_home, ukc.url, "destroy", rec["id"], "--json")
        else:
            p = hutch(hutch_home, ukc.url, "create", "--provider", "unikraft", "--json")
        assert p.returncode != 0 and "unavailable" in p.stdout  # the daemon died under the call
        d.proc.wait(30)  # type: ignore[union-attr]
        assert d.proc.returncode == -9  # type: ignore[union-attr]
    finally:
        d.stop()
    claims = [c for c in hutch_claims(hutch_home)]
    assert claims, f"a claim must survive the crash at {point}"
    d = daemon(hutch_home, ukc.url)
    try:
        report = json.loads(hutch(hutch_home, ukc.url, "cleanup", "--provider", "unikraft", "--json").stdout)
        assert report["ok"], report
        inv = json.loads(hutch(hutch_home, ukc.url, "list", "--provider", "unikraft", "--json").stdout)
        assert inv["items"] == []  # zero claims left
        listing = json.loads(hutch(hutch_home, ukc.url, "list", "--all", "--json").stdout)
        assert all(r["state"] in ("destroyed", "failed") for r in listing)
    finally:
        d.stop()
    after = ukc.state()
    assert [i for i in after["instances"] if i["account"] == ACCOUNT] == []  # zero leftovers
    assert after["creates"] - before["creates"] <= 1  # never created twice
    if point != "after_intent":
        assert after["creates"] - before["creates"] == 1
    validate_log(after["log"][len(before["log"]) :])


def hutch_claims(home: Path) -> list[dict[str, object]]:
    from hutch.store import Store

    return Store(home / "hutch.db").claims.all()
