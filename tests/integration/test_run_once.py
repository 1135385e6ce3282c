"""hutch run as the daemon's one use-case, end to end (real daemon, real sandboxes, the CLI
as a subprocess): a hutch run that is killed leaves no sandbox behind, the tree goes in and
comes back, piped input streams through, and the SDK's run_once does the same."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import pytest
from tests.conftest import Daemon, hutch_env

from hutch import Sandbox
from hutch.client import Client
from hutch.server.home import socket_answers


def _popen(daemon: Daemon, *args: str, stdin: int | IO[bytes] = subprocess.DEVNULL) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "hutch", "run", *args],
        env=hutch_env(daemon.home),
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _until(what: str, check: Callable[[], bool], deadline: float = 120) -> None:
    end = time.monotonic() + deadline
    while not check():
        assert time.monotonic() < end, f"gave up waiting for {what}"
        time.sleep(0.05)


def _started(c: Client) -> tuple[str, str]:
    """The one sandbox of this home and its run, once the command runs."""
    found: list[tuple[str, str]] = []

    def running() -> bool:
        for sbx in c.list():
            found[:] = [(sbx["id"], r["id"]) for r in c.runs(sbx["id"]) if r["status"] == "running"]
        return bool(found)

    _until("the command to run", running)
    return found[0]


@pytest.mark.parametrize("stdin", ["none", "unread-pipe", "endless-input"])
def test_killing_hutch_run_destroys_its_sandbox(daemon: Daemon, stdin: str) -> None:
    c = daemon.client()
    feeder = subprocess.Popen(["yes"], stdout=subprocess.PIPE) if stdin == "endless-input" else None
    read_end, write_end = os.pipe()  # a pipe nobody writes to, that stays open
    source: int | IO[bytes] = subprocess.DEVNULL
    if feeder is not None and feeder.stdout is not None:
        source = feeder.stdout
    elif stdin == "unread-pipe":
        source = read_end
    proc = _popen(daemon, "--", "sh", "-c", "echo started; sleep 300", stdin=source)
    try:
        sbx, run = _started(c)
        proc.kill()  # SIGKILL: hutch run gets no chance to clean up
        proc.wait(timeout=60)
        _until("the sandbox to be destroyed", lambda: c.get(sbx)["state"] == "destroyed", deadline=60)
        assert c.run(run)["status"] != "running"
        destroyed = c.events(sbx, types=["sandbox_destroyed"])
        assert [e["data"]["cause"] for e in destroyed] == ["its client left"]
        assert c.list() == []
    finally:
        os.close(read_end)
        os.close(write_end)
        if feeder is not None:
            feeder.kill()
            feeder.wait()


def test_a_kept_sandbox_keeps_its_run_when_hutch_run_is_killed(daemon: Daemon) -> None:
    c = daemon.client()
    proc = _popen(daemon, "--keep", "--", "sh", "-c", "sleep 300")
    sbx, run = _started(c)
    proc.kill()
    proc.wait(timeout=60)
    time.sleep(1)
    assert c.get(sbx)["state"] == "running" and c.run(run)["status"] == "running"
    c.kill(run, "KILL")
    c.destroy(sbx)


def test_the_tree_goes_in_and_comes_back(daemon: Daemon, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "src").mkdir(parents=True)
    (tree / "src" / "in.txt").write_text("from the client\n")
    script = "cat src/in.txt; echo made > out.txt; echo changed >> src/in.txt"
    r = subprocess.run(
        [sys.executable, "-m", "hutch", "run", "--sync", str(tree), "--pull", "--", script],
        env=hutch_env(daemon.home),
        capture_output=True,
        timeout=180,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == b"from the client\n" and b"hutch: pushed 1 file(s) to sbx_" in r.stderr
    assert (tree / "out.txt").read_text() == "made\n"
    assert (tree / "src" / "in.txt").read_text() == "from the client\nchanged\n"
    assert daemon.client().list() == []
    assert not list((daemon.home / "tmp").glob("*"))  # no spooled push or pull left behind


def test_piped_input_streams_through_hutch_run(daemon: Daemon) -> None:
    payload = os.urandom(5 << 20)  # several times the daemon's input window
    r = subprocess.run(
        [sys.executable, "-m", "hutch", "run", "--", "sha256sum"],
        env=hutch_env(daemon.home),
        input=payload,
        capture_output=True,
        timeout=180,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[0].decode() == hashlib.sha256(payload).hexdigest()
    doc = json.loads(
        subprocess.run(
            [sys.executable, "-m", "hutch", "run", "--json", "--", "head", "-c", "3"],
            env=hutch_env(daemon.home),
            input=b"abcdef",
            capture_output=True,
            timeout=180,
        ).stdout
    )
    assert (doc["stdout"], doc["exit_code"]) == ("abc", 0)
    assert daemon.client().list() == []


def test_the_sdk_runs_once(daemon: Daemon, tmp_path: Path) -> None:
    (tmp_path / "n.txt").write_text("41\n")
    r = Sandbox.run_once("echo $(( $(cat n.txt) + 1 )) | tee m.txt", sync=str(tmp_path), pull=True, settings=daemon.settings)
    assert (r.exit_code, r.stdout) == (0, "42\n") and (tmp_path / "m.txt").read_text() == "42\n"
    kept = Sandbox.run_once(["sh", "-c", "exit 7"], keep=True, memory="128M", settings=daemon.settings)
    assert kept.exit_code == 7 and kept.status == "failed"
    again = Sandbox.run_once("echo in the kept one", sandbox=kept.sandbox_id, settings=daemon.settings)
    assert again.sandbox_id == kept.sandbox_id and again.stdout == "in the kept one\n"
    assert [s.id for s in Sandbox.list(settings=daemon.settings)] == [kept.sandbox_id]
    daemon.client().destroy(kept.sandbox_id)


def test_a_daemon_killed_under_hutch_run_leaves_no_sandbox(daemon: Daemon) -> None:
    """The other way round: the daemon dies mid-run (kill -9); hutch run says so, and has the
    sandbox it made destroyed through the daemon it starts again."""
    c = daemon.client()
    proc = _popen(daemon, "--", "sh", "-c", "sleep 300")
    sbx, _ = _started(c)
    daemon.kill9()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 125, err
    # the daemon hutch run started on demand may still be settling its start on a loaded machine
    deadline = time.monotonic() + 60
    while not socket_answers(daemon.settings.socket_path):
        assert time.monotonic() < deadline, f"no daemon answers after hutch run: {err!r}"
        time.sleep(0.1)
    with Client(daemon.settings, autostart=False) as again:
        assert again.get(sbx)["state"] == "destroyed"
        assert again.list() == []


def test_the_next_daemon_ends_a_run_whose_daemon_and_client_are_gone(daemon: Daemon) -> None:
    """The daemon dies under hutch run before its client can act (here the client is stopped;
    on a loaded machine it may not even have heard which sandbox the run made): the next
    daemon settles the run as lost and destroys the sandbox as it starts, never adopts it."""
    c = daemon.client()
    proc = _popen(daemon, "--", "sh", "-c", "sleep 300")
    try:
        sbx, run = _started(c)
        proc.send_signal(signal.SIGSTOP)
        daemon.kill9()
        daemon.start()
        with daemon.client() as again:
            assert again.get(sbx)["state"] == "destroyed"
            assert again.list() == []
            record = again.run(run)
            assert record["status"] == "lost", record
            assert "hutch run ended with the daemon" in str(record["error"]), record
            [event] = again.events(sbx, types=["sandbox_destroyed"])
            assert "hutch run ended with the daemon" in str(event.get("cause") or event), event
    finally:
        proc.kill()
        proc.wait(30)
