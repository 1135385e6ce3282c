"""Pause/resume and lifetimes on real sandboxes with a real daemon (restarted in between)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from tests.conftest import Daemon

from hutch import HutchError, Sandbox
from hutch.client import Client

COUNTER = "i=0; while true; do i=$((i+1)); echo $i > /workspace/count; sleep 0.02; done"


def _count(daemon: Daemon, sbx: Sandbox) -> int:
    text = (daemon.home / "sandboxes" / sbx.id / "workspace" / "count").read_text().strip()
    return int(text or 0)


def _until(check: object, deadline: float = 30.0) -> None:
    end = time.monotonic() + deadline
    while not check():  # type: ignore[operator]
        assert time.monotonic() < end, "condition not reached before the deadline"
        time.sleep(0.1)


def test_pause_stops_a_counter_and_resume_continues_it(daemon: Daemon) -> None:
    sbx = Sandbox.create(settings=daemon.settings)
    sbx.exec(COUNTER, background=True)
    _until(lambda: (daemon.home / "sandboxes" / sbx.id / "workspace" / "count").exists() and _count(daemon, sbx) > 3)
    out = sbx.pause()
    assert out["changed"] and sbx.info["state"] == "paused"
    assert [s.id for s in Sandbox.list(state="paused", settings=daemon.settings)] == [sbx.id]
    frozen = _count(daemon, sbx)
    time.sleep(0.5)
    assert _count(daemon, sbx) == frozen, "a paused sandbox's counter must not move"
    with pytest.raises(HutchError) as err:
        sbx.exec("echo hi")
    assert err.value.kind == "conflict" and "hutch resume" in (err.value.hint or "")
    sbx.resume()
    assert sbx.info["state"] == "running"
    _until(lambda: _count(daemon, sbx) > frozen + 3)
    assert sbx.exec("echo hi").stdout == "hi\n"
    # pause again and destroy while frozen: nothing is left behind
    sbx.pause()
    assert sbx.destroy()["existed"]
    assert not (daemon.home / "sandboxes" / sbx.id).exists()


def test_a_paused_sandbox_stays_paused_across_a_daemon_restart(daemon: Daemon) -> None:
    sbx = Sandbox.create(settings=daemon.settings)
    sbx.exec(COUNTER, background=True)
    _until(lambda: (daemon.home / "sandboxes" / sbx.id / "workspace" / "count").exists())
    sbx.pause()
    daemon.stop()
    d2 = Daemon(daemon.home).start()
    daemon.proc = d2.proc
    assert sbx.refresh()["state"] == "paused"  # re-adopted, not marked lost
    frozen = _count(daemon, sbx)
    sbx.resume()
    _until(lambda: _count(daemon, sbx) > frozen + 3)


def test_ttl_and_idle_expire_with_the_daemon_restarted_in_between(daemon: Daemon) -> None:
    ttl = Sandbox.create(ttl="3s", settings=daemon.settings)
    idle = Sandbox.create(idle_timeout="3s", on_expire="pause", settings=daemon.settings)
    keep = Sandbox.create(ttl="1h", settings=daemon.settings)
    daemon.stop()  # no daemon, no CLI: the deadlines pass while nobody runs
    time.sleep(3.5)
    assert Path(daemon.home / "sandboxes" / ttl.id).is_dir()  # still there: nobody enforced it yet
    d2 = Daemon(daemon.home).start()
    daemon.proc = d2.proc
    c = Client(daemon.settings, autostart=False)
    _until(lambda: c.get(ttl.id)["state"] == "destroyed" and c.get(idle.id)["state"] == "paused")
    assert c.get(keep.id)["state"] == "running"
    assert not Path(daemon.home / "sandboxes" / ttl.id).exists()
    expired = {e["sandbox_id"]: e["data"] for e in c.events(types=["sandbox_expired"])}
    assert expired[ttl.id] == {"reason": "ttl", "action": "destroy"}
    assert expired[idle.id] == {"reason": "idle", "action": "pause"}
    assert keep.id not in expired


def test_a_background_run_keeps_an_idle_sandbox_alive(daemon: Daemon) -> None:
    sbx = Sandbox.create(idle_timeout="1s", settings=daemon.settings)
    run = sbx.exec("sleep 3", background=True)
    time.sleep(2)
    assert sbx.refresh()["state"] == "running"  # idle for 2 s by the API, but a run is running
    run.wait(timeout=30)
    c = Client(daemon.settings, autostart=False)
    _until(lambda: c.get(sbx.id)["state"] == "destroyed")
    assert [e["data"]["reason"] for e in c.events(sbx.id, types=["sandbox_expired"])] == ["idle"]


def test_keepalive_cli_and_bad_durations(daemon: Daemon) -> None:
    sbx = Sandbox.create(settings=daemon.settings)
    out = sbx.keepalive(ttl="2h")
    assert out["expires_at"] == pytest.approx(time.time() + 7200, abs=30)
    for bad in ("soon", "-1m", "0"):
        with pytest.raises(HutchError) as err:
            sbx.keepalive(ttl=bad)
        assert err.value.kind == "invalid"
        with pytest.raises(HutchError):
            Sandbox.create(ttl=bad, settings=daemon.settings)
    assert len(Client(daemon.settings, autostart=False).list()) == 1  # nothing half-made
