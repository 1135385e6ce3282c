"""Create, exec, destroy with nothing left behind; the daemon can die without losses."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from tests.conftest import Daemon, hutch_env

from hutch import HutchError, Sandbox
from hutch.client import Client


def _processes_in(sandbox_id: str) -> list[int]:
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if sandbox_id in Path(f"/proc/{p}/cgroup").read_text():
                    out.append(int(p))
            except OSError:
                pass
    return out


def _cgroups_of(sandbox_id: str) -> list[Path]:
    return [p for p in Path("/sys/fs/cgroup").rglob(sandbox_id)] if os.geteuid() == 0 else []


def test_destroy_leaves_nothing(daemon: Daemon) -> None:
    sbx = Sandbox.create(settings=daemon.settings)
    sbx.exec(["sh", "-c", "sleep 1000 & setsid sleep 1001 &"])
    sdir = daemon.home / "sandboxes" / sbx.id
    assert sdir.is_dir()
    if os.geteuid() == 0:
        assert _processes_in(sbx.id), "sandbox processes live in its cgroup"
        assert _cgroups_of(sbx.id)
    res = sbx.destroy()
    assert res["destroyed"] and res["existed"]
    assert not sdir.exists()
    assert _processes_in(sbx.id) == []
    assert _cgroups_of(sbx.id) == []
    assert sbx.id not in Path("/proc/self/mountinfo").read_text()
    for line in subprocess.run(["ps", "-eo", "cmd"], capture_output=True, text=True).stdout.splitlines():
        assert "sleep 1000" not in line and "sleep 1001" not in line
    again = sbx.destroy()
    assert again["destroyed"] and not again["existed"]


def test_workspace_and_processes_persist_between_commands(daemon: Daemon) -> None:
    sbx = Sandbox.create(settings=daemon.settings)
    sbx.exec("echo 1 > counter; sleep 600 &")
    r = sbx.exec("cat counter; ps -eo cmd | grep -c '^sleep 600'")
    assert r.stdout.split() == ["1", "1"]


def test_daemon_sigkill_loses_nothing(daemon: Daemon) -> None:
    sbx = Sandbox.create(name="survivor", settings=daemon.settings)
    sbx.files.write("state.txt", "before the crash")
    sbx.exec("sleep 900 &")
    doomed = Sandbox.create(settings=daemon.settings)
    daemon.kill9()
    # a sandbox that dies while the daemon is down must be marked, not forgotten
    for pid in _processes_in(doomed.id):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)
    d2 = Daemon(daemon.home).start()
    daemon.proc = d2.proc
    with d2.client() as c:
        recs = {r["id"]: r for r in c.list()}
        assert recs[sbx.id]["state"] == "running"
        assert recs[doomed.id]["state"] == "lost"
        r = c.exec("survivor", {"command": "cat state.txt; echo; ps -eo cmd | grep -c '^sleep 900'"})
        assert r["stdout"].split() == ["before", "the", "crash", "1"]
        assert c.get(doomed.id)["error"]
        assert c.destroy(doomed.id)["destroyed"]


def test_a_foreground_exec_that_loses_the_daemon_names_its_run(daemon: Daemon) -> None:
    """kill -9 of the daemon under `hutch exec`: the CLI says which run it lost and how to
    follow it; the run goes on and its end is recorded by the next daemon."""
    sbx = Sandbox.create(settings=daemon.settings)
    cli = subprocess.Popen(
        [sys.executable, "-m", "hutch", "exec", sbx.id, "--", "sh", "-c", "echo started; sleep 2; echo done"],
        env=hutch_env(daemon.home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert cli.stdout is not None and cli.stdout.readline() == "started\n"
    daemon.kill9()
    _, err = cli.communicate(timeout=60)
    assert cli.returncode == 125, err
    run_id = err.split("lost the daemon during ", 1)[1].split(" ", 1)[0]
    assert run_id.startswith("run_") and f"hutch poll --follow {run_id}" in err, err
    d2 = Daemon(daemon.home).start()
    daemon.proc = d2.proc
    with d2.client() as c:
        run = c.wait(run_id, 60)
        assert run["status"] == "completed" and run["exit_code"] == 0
        assert c.output(run_id)["stdout"]["data"] == "started\ndone\n"


def test_cli_autostarts_the_daemon(hutch_home: Path) -> None:
    env = hutch_env(hutch_home)
    try:
        r = subprocess.run(
            [sys.executable, "-m", "hutch", "run", "--", "python3", "-c", "print('hi')"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0, r.stderr
        assert r.stdout == "hi\n"
        st = subprocess.run(
            [sys.executable, "-m", "hutch", "daemon", "status", "--json"], env=env, capture_output=True, text=True
        )
        assert st.returncode == 0 and '"running": true' in st.stdout
        sock = hutch_home / "hutchd.sock"
        assert oct(sock.stat().st_mode & 0o777) == "0o600"
        ls = subprocess.run([sys.executable, "-m", "hutch", "list", "--json"], env=env, capture_output=True, text=True)
        assert ls.stdout.strip() == "[]", "run destroys its sandbox"
        pid = int(st.stdout.split('"pid": ')[1].split(",")[0].split("}")[0])
    finally:
        subprocess.run([sys.executable, "-m", "hutch", "daemon", "stop"], env=env, capture_output=True, timeout=30)
    assert not (hutch_home / "hutchd.sock").exists()
    with contextlib.suppress(FileNotFoundError):  # "stopped" means the process ended, not only its socket (a zombie
        # has ended; this machine's pid 1 may be slow to reap it)
        assert Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"


def test_bad_mounts_are_refused_and_leave_nothing(daemon: Daemon, tmp_path: Path) -> None:
    sock_path = daemon.home / "a.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(sock_path))
    cases = [f"{tmp_path}/missing:/data", "/:/host", f"{sock_path}:/s", f"{tmp_path}:/proc", f"{tmp_path}:/usr/x"]
    try:
        for m in cases:
            with pytest.raises(HutchError) as err:
                Sandbox.create(mounts=[m], settings=daemon.settings)
            assert err.value.kind == "invalid", m
            assert err.value.hint
    finally:
        s.close()
    with Client(daemon.settings, autostart=False) as c:
        assert c.list() == []
    sandboxes = daemon.home / "sandboxes"
    assert not sandboxes.exists() or list(sandboxes.iterdir()) == []


def test_mounts_ro_and_rw(daemon: Daemon, tmp_path: Path) -> None:
    base = Path(tempfile.mkdtemp(prefix="hutch-mounts-"))
    os.chmod(base, 0o755)
    ro, rw = base / "ro", base / "rw"
    ro.mkdir()
    rw.mkdir()
    os.chmod(rw, 0o777)
    (ro / "in.txt").write_text("given")
    sbx = Sandbox.create(mounts=[f"{ro}:/data:ro", f"{rw}:/out"], settings=daemon.settings)
    r = sbx.exec("cat /data/in.txt; touch /data/x; echo rc=$?; echo made > /out/o.txt")
    assert r.stdout.startswith("given") and "rc=1" in r.stdout
    assert (rw / "o.txt").read_text() == "made\n"
    assert not (ro / "x").exists()
    subprocess.run(["rm", "-rf", str(base)], check=False)
    if os.geteuid() == 0:
        hidden = tmp_path / "private"  # under pytest's 0700 directory
        hidden.mkdir()
        with pytest.raises(HutchError) as err:
            Sandbox.create(mounts=[f"{hidden}:/p"], settings=daemon.settings)
        assert err.value.kind == "invalid" and "chmod o+x" in (err.value.hint or "")


def test_name_collision_and_unknown_sandbox(daemon: Daemon) -> None:
    Sandbox.create(name="twin", settings=daemon.settings)
    with pytest.raises(HutchError) as err:
        Sandbox.create(name="twin", settings=daemon.settings)
    assert err.value.kind == "conflict" and "hutch destroy" in (err.value.hint or "")
    with pytest.raises(HutchError) as err:
        Sandbox.connect("nope", settings=daemon.settings)
    assert err.value.kind == "not_found" and "hutch list" in (err.value.hint or "")


def test_stale_socket_after_kill9_is_recovered(daemon: Daemon) -> None:
    daemon.kill9()
    assert (daemon.home / "hutchd.sock").exists()  # left behind by SIGKILL
    env = hutch_env(daemon.home)
    r = subprocess.run([sys.executable, "-m", "hutch", "list", "--json"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == "[]"


def test_unusable_state_dir_is_a_clear_error() -> None:
    env = hutch_env(Path("/proc/hutch-cannot-exist"))
    r = subprocess.run([sys.executable, "-m", "hutch", "list", "--json"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert '"kind": "unavailable"' in r.stdout
    assert "HUTCH_HOME" in r.stdout


def test_create_cut_short_by_a_crash_is_cleaned_on_restart(hutch_home: Path) -> None:
    """A daemon that died mid-create leaves a 'creating' record: the next one cleans it up."""
    from hutch.models import SandboxRecord, SandboxSpec, SandboxState, new_id
    from hutch.providers.local import cgroups
    from hutch.store import Store

    store = Store(hutch_home / "hutch.db")
    rec = SandboxRecord(
        id=new_id("sbx"),
        provider="local",
        state=SandboxState.creating,
        spec=SandboxSpec(),
        created_at=time.time(),
        updated_at=time.time(),
        data={"slot": 0},
    )
    store.sandboxes.insert(rec)
    half = hutch_home / "sandboxes" / rec.id / "workspace"
    half.mkdir(parents=True)
    layout = cgroups.detect()
    made = []
    if layout.mode != "none":
        cg, _ = cgroups.create(layout, rec.id, 1 << 30, 512, None)
        made = cg.dirs
    d = Daemon(hutch_home).start()
    try:
        with d.client() as c:
            info = c.get(rec.id)
        assert info["state"] == "failed" and "restart" in info["error"]
        assert not half.parent.exists()
        assert [p for p in made if p.exists()] == []
    finally:
        d.stop()


def test_sdk_list_filters_by_labels_and_state(daemon: Daemon) -> None:
    a = Sandbox.create(labels={"team": "red", "job": "1"}, settings=daemon.settings)
    b = Sandbox.create(labels={"team": "blue"}, settings=daemon.settings)
    assert [s.id for s in Sandbox.list(labels={"team": "red"}, settings=daemon.settings)] == [a.id]
    assert {s.id for s in Sandbox.list(settings=daemon.settings)} == {a.id, b.id}
    b.destroy()
    assert [s.id for s in Sandbox.list(state="destroyed", settings=daemon.settings)] == [b.id]
    assert [s.id for s in Sandbox.list(state="running", labels={"job": "1"}, settings=daemon.settings)] == [a.id]
