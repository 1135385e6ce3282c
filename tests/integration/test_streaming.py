"""Foreground streams end to end (real daemon, real sandboxes, the CLI as a subprocess):
every byte reaches a slow reader, a cap that cuts output is loud, Ctrl-C kills the run,
piped stdin reaches the command, and a command that cannot start is named."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import pytest
from tests.conftest import Daemon, hutch_env

from hutch import Sandbox
from hutch.client import Client

HUNDRED_MB = 100 << 20


def _cli(daemon: Daemon, *args: str, stdin: bytes | None = None, timeout: float = 180) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "hutch", *args],
        env=hutch_env(daemon.home),
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        timeout=timeout,
    )


def _popen(daemon: Daemon, *args: str, stdin: int | IO[bytes] = subprocess.DEVNULL) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "hutch", *args],
        env=hutch_env(daemon.home),
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _until(what: str, check: Callable[[], bool], deadline: float = 120) -> None:
    end = time.monotonic() + deadline
    while not check():
        assert time.monotonic() < end, f"gave up waiting for {what}"
        time.sleep(0.1)


def _running(c: Client, sbx: str, word: str) -> bool:
    return any(word in p["command"] for p in c.ps(sbx))


# -- item 1: a foreground stream delivers every byte -----------------------------------


def test_a_slow_reader_gets_every_byte_and_the_run_waits_for_it(daemon: Daemon) -> None:
    sbx = Sandbox.create(settings=daemon.settings)
    c = daemon.client()
    proc = _popen(daemon, "exec", sbx.id, "--", "head", "-c", "100M", "/dev/zero")
    assert proc.stdout is not None and proc.stderr is not None
    try:
        _until("head to start", lambda: _running(c, sbx.id, "head -c 100M"))
        time.sleep(3)  # nothing is read meanwhile: the workload waits for its reader, like a pipe
        assert _running(c, sbx.id, "head -c 100M"), "the run did not wait for its slow reader"
        got = 0
        while chunk := proc.stdout.read(1 << 16):
            got += len(chunk)
            if got < 8 << 20:
                time.sleep(0.002)  # and keep reading slowly for a while
        err = proc.stderr.read()
        assert proc.wait(60) == 0, err
    finally:
        proc.kill()
        proc.wait()
    assert got == HUNDRED_MB
    assert err == b""  # nothing was cut: nothing to say
    run = c.runs(sbx.id)[-1]
    assert (run["status"], run["stdout_bytes"]) == ("completed", HUNDRED_MB)
    assert run["truncated"]  # the copy kept on disk stops at disk_cap (64 MiB): the record says so


def test_a_commands_output_pipes_have_room_for_fast_writers(daemon: Daemon) -> None:
    """stdout and stderr are pipes of 256 KiB (the kernel's default is 64 KiB), so that a fast
    writer wakes the supervisor a quarter as often (bench: stdout throughput)."""
    from hutch.providers.local.agent.spawn import PIPE_SIZE

    sbx = Sandbox.create(settings=daemon.settings)
    probe = "import fcntl, sys; print(fcntl.fcntl(1, fcntl.F_GETPIPE_SZ), fcntl.fcntl(2, fcntl.F_GETPIPE_SZ))"
    r = sbx.exec(["python3", "-c", probe])
    assert r.exit_code == 0, r.stderr
    assert r.stdout.split() == [str(PIPE_SIZE), str(PIPE_SIZE)] and PIPE_SIZE == 256 << 10
    c = daemon.client()  # a sandbox with users (root inside), and a run as another of them: the same room
    sid = str(c.create({"provider": "local", "user": "root"})["id"])
    r2 = c.exec(sid, {"command": ["python3", "-c", probe], "user": "nobody"})
    assert r2["exit_code"] == 0, r2
    assert r2["stdout"].split() == [str(PIPE_SIZE), str(PIPE_SIZE)]


def test_tar_of_a_workspace_through_exec_is_byte_exact(daemon: Daemon, tmp_path: Path) -> None:
    sbx = Sandbox.create(settings=daemon.settings)
    made = sbx.exec("mkdir -p src && head -c 70M /dev/urandom > big.bin && seq 1 5000 > src/lines.txt && sha256sum big.bin")
    assert made.exit_code == 0, made.stderr
    inside = sbx.exec("tar c -C /workspace . | sha256sum; tar c -C /workspace . | wc -c")
    want_sha, want_size = inside.stdout.split()[0], int(inside.stdout.split()[2])
    backup = tmp_path / "backup.tar"
    with open(backup, "wb") as out:
        proc = _popen(daemon, "exec", sbx.id, "--", "tar", "c", "-C", "/workspace", ".")
        assert proc.stdout is not None and proc.stderr is not None
        time.sleep(2)  # a busy reader: it starts late
        while chunk := proc.stdout.read(1 << 20):
            out.write(chunk)
        assert proc.wait(60) == 0, proc.stderr.read()
    data = backup.read_bytes()
    assert (len(data), hashlib.sha256(data).hexdigest()) == (want_size, want_sha)
    with tarfile.open(backup) as tar:
        member = tar.extractfile("./big.bin")
        assert member is not None
        assert hashlib.sha256(member.read()).hexdigest() == made.stdout.split()[0]


def test_a_cut_output_is_loud(daemon: Daemon) -> None:
    sbx = Sandbox.create(settings=daemon.settings)
    r = _cli(daemon, "exec", "--json", "--max-output", "1K", sbx.id, "--", "head", "-c", "5000", "/dev/zero")
    doc = json.loads(r.stdout)
    assert r.returncode == 125, r.stderr  # the command succeeded, but this result is not all of its output
    assert doc["truncated"] and doc["exit_code"] == 0 and doc["stdout_bytes"] == 5000
    assert b"output truncated" in r.stderr and doc["run_id"].encode() in r.stderr
    r = _cli(daemon, "exec", "--json", "--max-output", "1K", sbx.id, "--", "sh", "-c", "head -c 5000 /dev/zero; exit 3")
    assert r.returncode == 3 and json.loads(r.stdout)["truncated"] and b"output truncated" in r.stderr
    whole = _cli(daemon, "exec", "--json", sbx.id, "--", "head", "-c", "5000", "/dev/zero")
    assert whole.returncode == 0 and not json.loads(whole.stdout)["truncated"] and whole.stderr == b""
    streamed = _cli(daemon, "exec", sbx.id, "--max-output", "1K", "--", "head", "-c", "5000", "/dev/zero")
    assert (streamed.returncode, len(streamed.stdout), streamed.stderr) == (0, 5000, b"")  # live output is never cut
    lines = _cli(daemon, "exec", "--json", "--stream", sbx.id, "--", "seq", "3").stdout.splitlines()
    events = [json.loads(line) for line in lines]
    assert events[-1]["type"] == "exit" and not events[-1]["truncated"]


def test_a_stored_copy_cut_at_the_disk_cap_is_loud(hutch_home: Path) -> None:
    d = Daemon(hutch_home, HUTCH_DISK_CAP="1M").start()
    try:
        sbx = Sandbox.create(settings=d.settings)
        live = _cli(d, "exec", sbx.id, "--", "head", "-c", "3M", "/dev/zero")
        assert (live.returncode, len(live.stdout), live.stderr) == (0, 3 << 20, b"")  # the stream is whole
        run_id = d.client().runs(sbx.id)[-1]["id"]
        poll = _cli(d, "poll", run_id, "--max-bytes", "16M")
        assert poll.returncode == 1 and len(poll.stdout) == 1 << 20
        assert b"disk cap" in poll.stderr
        for args in (["--run", run_id], []):  # the transcript is the kept copy too
            logs = _cli(d, "logs", sbx.id, *args, "--follow")
            assert logs.returncode == 1 and b"disk cap" in logs.stderr and run_id.encode() in logs.stderr
        res = sbx.exec("head -c 3M /dev/zero", max_output=4 << 20)
        assert (res.truncated, res.stored_truncated, len(res.stdout_raw)) == (False, True, 3 << 20)
        bg = sbx.exec("head -c 3M /dev/zero", background=True).wait(timeout=60)
        assert bg.truncated  # what it read back is the stored copy, cut at 1 MiB
    finally:
        try:
            Client(d.settings, autostart=False).destroy(sbx.id)
        finally:
            d.stop()


# -- item 17: Ctrl-C on a foreground run -----------------------------------------------


def _interrupt(proc: subprocess.Popen[bytes], c: Client, sbx: str, shown: bytes | None = None) -> tuple[int, bytes, bytes]:
    """Ctrl-C once the run sleeps (and, with ``shown``, once the CLI printed it: output
    still on its way when Ctrl-C comes is not the CLI's to print)."""
    assert proc.stdout is not None
    _until("the run to start", lambda: any(p["command"] == "sleep 300" for p in c.ps(sbx)))
    early = b""
    while shown is not None and shown not in early:
        chunk = proc.stdout.read1(1 << 16)
        assert chunk, f"the CLI ended before printing {shown!r}"
        early += chunk
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, early + out, err


@pytest.mark.parametrize("mode", ["human", "json", "stream", "stdin"])
def test_ctrl_c_kills_the_run_and_says_so(daemon: Daemon, mode: str) -> None:
    sbx = Sandbox.create(settings=daemon.settings)
    c = daemon.client()
    flags = {"human": [], "json": ["--json"], "stream": ["--json", "--stream"], "stdin": []}[mode]
    read_end, write_end = os.pipe()  # "stdin": a pipe that stays open, so stdin is forwarded
    try:
        proc = _popen(daemon, "exec", *flags, sbx.id, "--", "sh", "-c", "echo started; sleep 300", stdin=read_end)
        code, out, err = _interrupt(proc, c, sbx.id, None if mode == "json" else b"started")
    finally:
        os.close(read_end)
        os.close(write_end)
    run = c.runs(sbx.id)[-1]
    assert run["status"] == "killed" and run["signal"] == 9, run
    assert code == 130, err
    assert not _running(c, sbx.id, "sleep 300")
    if mode in ("human", "stdin"):
        assert out == b"started\n"
        assert f"{run['id']} killed".encode() in err
    elif mode == "json":
        doc = json.loads(out)  # one document
        assert doc["run_id"] == run["id"] and doc["interrupted"] and doc["status"] == "killed"
        assert doc["stdout"] == "started\n"
    else:
        lines = [json.loads(x) for x in out.splitlines()]
        assert lines[0]["type"] == "run" and lines[-1]["type"] == "exit" and lines[-1]["interrupted"]


def test_ctrl_c_on_hutch_run_kills_the_run_and_removes_the_sandbox(daemon: Daemon) -> None:
    c = daemon.client()
    proc = _popen(daemon, "run", "--json", "--", "sh", "-c", "echo started; sleep 300")
    _until("the sandbox", lambda: any(s["state"] == "running" for s in c.list()))
    sbx = c.list()[0]["id"]
    code, out, err = _interrupt(proc, c, sbx)
    assert code == 130, err
    doc = json.loads(out)
    assert doc["interrupted"] and doc["status"] == "killed"
    _until("the sandbox to be destroyed", lambda: not c.list())


# -- item 20: a command or working directory that does not exist -----------------------


def test_a_missing_command_or_cwd_is_named_with_a_hint(daemon: Daemon) -> None:
    sbx = Sandbox.create(settings=daemon.settings)
    r = _cli(daemon, "exec", sbx.id, "--", "nosuchcmd", "arg")
    assert r.returncode == 127
    assert b"hutch: command not found: nosuchcmd\n" in r.stderr and b"hint: " in r.stderr
    assert b"Errno" not in r.stderr
    r = _cli(daemon, "exec", "--cwd", "/nope", sbx.id, "--", "true")
    assert r.returncode == 126
    assert b"hutch: working directory /nope does not exist\n" in r.stderr and b"mkdir -p /nope" in r.stderr
    assert sbx.exec(["nosuchcmd"]).error == "command not found: nosuchcmd"
    assert sbx.exec(["true"], cwd="/nope").error == "working directory /nope does not exist"
    doc = json.loads(_cli(daemon, "exec", "--json", sbx.id, "--", "nosuchcmd").stdout)
    assert (doc["exit_code"], doc["error"]) == (127, "command not found: nosuchcmd")


# -- item 22: piped stdin reaches the command ------------------------------------------


def test_piped_stdin_reaches_the_command(daemon: Daemon) -> None:
    sbx = Sandbox.create(settings=daemon.settings)
    r = _cli(daemon, "exec", sbx.id, "--", "wc", "-c", stdin=b"hi\n")
    assert (r.returncode, r.stdout.strip()) == (0, b"3")
    payload = os.urandom(5 << 20)
    r = _cli(daemon, "exec", sbx.id, "--", "wc", "-c", stdin=payload)
    assert r.stdout.strip() == str(len(payload)).encode()
    r = _cli(daemon, "exec", sbx.id, "--", "cat", stdin=payload)
    assert r.returncode == 0 and r.stdout == payload
    doc = json.loads(_cli(daemon, "exec", "--json", sbx.id, "--", "wc", "-c", stdin=b"four").stdout)
    assert doc["stdout"].strip() == "4" and doc["exit_code"] == 0  # --json is still one document
    r = _cli(daemon, "exec", sbx.id, "--", "wc", "-c")  # stdin is /dev/null: nothing
    assert r.stdout.strip() == b"0"
    r = _cli(daemon, "run", "--", "wc", "-c", stdin=b"12345")
    assert (r.returncode, r.stdout.strip()) == (0, b"5")


def _peak_rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def test_piped_stdin_is_streamed_not_held_in_memory(daemon: Daemon) -> None:
    sbx = Sandbox.create(settings=daemon.settings)
    feeder = subprocess.Popen(["head", "-c", "200M", "/dev/zero"], stdout=subprocess.PIPE)
    assert feeder.stdout is not None
    proc = _popen(daemon, "exec", sbx.id, "--", "wc", "-c", stdin=feeder.stdout)
    feeder.stdout.close()
    peak = 0
    while proc.poll() is None:
        peak = max(peak, _peak_rss_kib(proc.pid))
        time.sleep(0.05)
    out, err = proc.communicate(timeout=60)
    feeder.wait(60)
    assert (proc.returncode, out.strip()) == (0, str(200 << 20).encode()), err
    assert 0 < peak < 120 * 1024  # the CLI never held the 200 MiB
