"""A local sandbox holds the native helper (hold.c) as its PID 2, which supervises a plain run in a
fork of itself; a run it cannot supervise brings the Python agent into that same process, under
the same isolation, with the helper's runs; a daemon killed with -9 adopts a sandbox the helper
still holds; an idle agent goes back to the helper; and with the setting idle_agent = python, the
Python agent from the start."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import Daemon, hutch_env
from tests.integration.sandboxmem import sandbox_pids

from hutch import Sandbox

ISOLATION = "id -u; id -G; grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status"


def agent(home: Path, sandbox_id: str) -> tuple[int, str]:
    """The host pid of the sandbox's PID 2 (its agent's place), and its command line."""
    for pid in sandbox_pids(home, sandbox_id):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        nspid = next(line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:"))
        if nspid[-1] == "2":
            return pid, cmdline.replace(b"\0", b" ").decode()
    raise AssertionError(f"no PID 2 in sandbox {sandbox_id}")


def status_of(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}


def test_an_idle_sandbox_holds_the_helper_which_supervises_a_plain_run_itself(daemon: Daemon) -> None:
    sbx = Sandbox.create(settings=daemon.settings, env={"GREETING": "hello"})
    pid, cmd = agent(daemon.home, sbx.id)
    assert cmd.startswith("/.hutch/hold "), cmd
    held = status_of(pid)
    # the helper is as confined as the agent it stands for: the sandbox's uid, no capabilities, the filter
    assert held["Uid"].split() == [held["Uid"].split()[0]] * 4 and held["CapEff"] == "0000000000000000"
    assert held["NoNewPrivs"] == "1" and held["Seccomp"] == "2"
    parent = "cat /proc/$PPID/cmdline | tr '\\0' ' '; echo; grep PPid /proc/$PPID/status"
    r = sbx.exec(["sh", "-c", f"{ISOLATION}; echo $GREETING; {parent}"])
    assert r.exit_code == 0, r.stderr
    assert r.stdout.startswith("1000\n1000\n"), r.stdout
    for line in ("CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "CapBnd:\t0000000000000000"):
        assert line in r.stdout
    assert "NoNewPrivs:\t1" in r.stdout and "Seccomp:\t2" in r.stdout and "hello" in r.stdout
    # the run's supervisor is a fork of the helper (PID 2): no Python agent was started for it
    assert "\n/.hutch/hold " in r.stdout and "PPid:\t2\n" in r.stdout, r.stdout
    assert agent(daemon.home, sbx.id) == (pid, cmd)
    # timeouts are the supervisor's, inside: they still hold
    t = sbx.exec(["sleep", "30"], timeout=1)
    assert t.exit_code != 0
    assert agent(daemon.home, sbx.id) == (pid, cmd)


def test_a_run_the_helper_cannot_supervise_brings_the_agent_in_place(daemon: Daemon) -> None:
    sbx = Sandbox.create(settings=daemon.settings)
    pid, cmd = agent(daemon.home, sbx.id)
    assert cmd.startswith("/.hutch/hold "), cmd
    held = status_of(pid)
    background = sbx.exec(["sleep", "60"], background=True)  # the helper's, alive while the agent takes over
    with sbx.pty(["sh", "-c", "tr '\\0' ' ' < /proc/$PPID/cmdline; echo; exit 5"]) as term:  # a terminal: the agent's
        out = b""
        while b"\n" not in out:
            out += term.read(timeout=30)
        assert term.wait(timeout=30) == 5
    supervisor = out.decode(errors="replace").splitlines()[0]
    assert "/.hutch/agent" in supervisor and not supervisor.startswith("/.hutch/hold"), out
    after, now = agent(daemon.home, sbx.id)
    assert after == pid and not now.startswith("/.hutch/hold") and "/.hutch/agent" in now  # execve in place
    woke = status_of(pid)
    assert (woke["Uid"], woke["CapEff"], woke["NoNewPrivs"], woke["Seccomp"]) == (held["Uid"], "0000000000000000", "1", "2")
    # the agent took over the helper's run: it knows it, and kills it
    assert background.kill("KILL")["signalled"] is True
    assert background.wait().exit_code == 137


def test_kill9_of_the_daemon_adopts_a_sandbox_the_helper_holds(daemon: Daemon) -> None:
    sbx = Sandbox.create(settings=daemon.settings)
    pid, cmd = agent(daemon.home, sbx.id)
    assert cmd.startswith("/.hutch/hold "), cmd
    daemon.kill9()
    daemon.start()
    env = hutch_env(daemon.home)
    r = subprocess.run([sys.executable, "-m", "hutch", "get", sbx.id, "--json"], env=env, capture_output=True, text=True)
    assert r.returncode == 0 and '"running"' in r.stdout, r.stdout + r.stderr
    assert agent(daemon.home, sbx.id) == (pid, cmd)  # the ping at adoption was answered by the helper itself
    again = Sandbox.connect(sbx.id, settings=daemon.settings)
    assert again.exec(["id", "-u"]).stdout == "1000\n"
    assert agent(daemon.home, sbx.id)[0] == pid


def test_an_idle_agent_goes_back_to_the_helper(hutch_home: Path) -> None:
    daemon = Daemon(hutch_home, HUTCH_SPARE_IDLE="1").start()
    try:
        sbx = Sandbox.create(settings=daemon.settings, env={"GREETING": "hello"}, secrets={"TOKEN": "s3cret-value"})
        pid, _ = agent(hutch_home, sbx.id)
        with sbx.pty(["true"]) as term:  # a terminal: the agent's run, which wakes it
            assert term.wait(timeout=30) == 0
        assert "/.hutch/agent" in agent(hutch_home, sbx.id)[1]
        deadline = time.monotonic() + 120
        while not agent(hutch_home, sbx.id)[1].startswith("/.hutch/hold "):  # its spare leaves after 1 s, then the agent
            assert time.monotonic() < deadline, agent(hutch_home, sbx.id)
            time.sleep(0.2)
        assert agent(hutch_home, sbx.id)[0] == pid
        r = sbx.exec(["sh", "-c", f"{ISOLATION}; echo $GREETING $TOKEN"])
        assert r.exit_code == 0 and r.stdout.startswith("1000\n"), r.stdout + r.stderr
        assert "hello [redacted:TOKEN]" in r.stdout  # its environment and secrets came back with it
        assert "NoNewPrivs:\t1" in r.stdout and "Seccomp:\t2" in r.stdout and "CapEff:\t0000000000000000" in r.stdout
        assert agent(hutch_home, sbx.id)[0] == pid
        sbx.destroy()
    finally:
        daemon.stop()


def test_the_setting_python_starts_the_python_agent(hutch_home: Path) -> None:
    daemon = Daemon(hutch_home, HUTCH_IDLE_AGENT="python").start()
    try:
        sbx = Sandbox.create(settings=daemon.settings)
        assert "/.hutch/agent" in agent(hutch_home, sbx.id)[1]
        assert sbx.exec(["id", "-u"]).stdout == "1000\n"
        r = subprocess.run(
            [sys.executable, "-m", "hutch", "doctor", "--json"],
            env=hutch_env(hutch_home, HUTCH_IDLE_AGENT="python"),
            capture_output=True,
            text=True,
        )
        assert "setting idle_agent = python" in r.stdout, r.stdout
        sbx.destroy()
    finally:
        daemon.stop()


def test_a_pool_member_waits_lean_and_its_first_plain_run_is_the_helpers(hutch_home: Path) -> None:
    from tests.integration.test_pool import full

    daemon = Daemon(hutch_home, HUTCH_POOL_SIZE="1").start()
    try:
        with daemon.client() as c:
            (member,) = full(c, 1)
        pid, cmd = agent(hutch_home, member)  # (its cgroup keeps the member's id)
        assert cmd.startswith("/.hutch/hold "), cmd  # no Python agent while it waits
        sbx = Sandbox.create(settings=daemon.settings, env={"GREETING": "hello"})
        r = sbx.exec(["sh", "-c", "id -u; echo $GREETING; cat /proc/$PPID/cmdline | tr '\\0' ' '"])
        assert r.stdout.startswith("1000\nhello\n/.hutch/hold "), r.stdout  # the hand-out's env, the helper's run
        assert agent(hutch_home, member) == (pid, cmd)  # it was the member, still lean
        sbx.destroy()
    finally:
        daemon.stop()
