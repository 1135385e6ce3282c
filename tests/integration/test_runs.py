"""Runs as durable records: background, streaming, follow, kill, timeouts, restarts."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.conftest import Daemon, hutch_env

from hutch import AsyncSandbox, HutchError, Sandbox
from hutch.client import Client


def _cli(daemon: Daemon, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "hutch", *args], env=hutch_env(daemon.home), capture_output=True, timeout=timeout
    )


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_background_run_survives_the_cli(daemon: Daemon) -> None:
    Sandbox.create(name="bg", settings=daemon.settings)
    r = _cli(daemon, "exec", "--background", "bg", "--", "sh", "-c", "for i in 1 2 3 4 5; do echo line$i; sleep 0.2; done")
    assert r.returncode == 0, r.stderr
    run_id = r.stdout.decode().strip()
    assert run_id.startswith("run_")  # returned at once, the CLI process is gone
    w = _cli(daemon, "wait", run_id, "--json")
    assert w.returncode == 0 and json.loads(w.stdout)["status"] == "completed"
    out = json.loads(_cli(daemon, "poll", run_id, "--json").stdout)
    assert out["stdout"]["data"] == "".join(f"line{i}\n" for i in range(1, 6))
    assert out["done"] is True


def test_poll_resumes_exactly_at_its_offsets(daemon: Daemon) -> None:
    sbx = Sandbox.create(settings=daemon.settings)
    run = sbx.exec(["sh", "-c", "for i in $(seq 1 400); do echo row-$i; echo err-$i >&2; done"], background=True)
    run.wait(timeout=60)
    c = Client(daemon.settings, autostart=False)
    got = {"stdout": b"", "stderr": b""}
    offsets = {"stdout": 0, "stderr": 0}
    while True:  # small pages, as after a disconnect: each request resumes from next_offset
        res = c.output(run.id, offsets["stdout"], offsets["stderr"], limit=97)
        for name in got:
            got[name] += res[name]["data"].encode()
            offsets[name] = res[name]["next_offset"]
        if res["done"]:
            break
    assert got["stdout"].decode() == "".join(f"row-{i}\n" for i in range(1, 401))
    assert got["stderr"].decode() == "".join(f"err-{i}\n" for i in range(1, 401))
    follow = _cli(daemon, "poll", run.id, "--follow", "--stdout-offset", "7", "--stderr-offset", str(offsets["stderr"]))
    assert follow.stdout.decode() == "".join(f"row-{i}\n" for i in range(1, 401))[7:]


def test_kill_term_then_kill(daemon: Daemon) -> None:
    sbx = Sandbox.create(settings=daemon.settings)
    run = sbx.exec(["sh", "-c", "trap '' TERM; (trap '' TERM; setsid sleep 300) & sleep 300"], background=True)
    time.sleep(0.5)
    assert run.kill("TERM")["signalled"]
    time.sleep(0.5)
    assert run.refresh()["status"] == "running"  # it ignores TERM
    run.kill("KILL")
    result = run.wait(timeout=30)
    assert result.status == "killed"
    assert "sleep 300" not in sbx.exec(["ps", "-eo", "cmd"]).stdout
    again = run.kill("KILL")
    assert again["signalled"] is False and "already" in again["message"]


def test_idle_output_timeout(daemon: Daemon) -> None:
    sbx = Sandbox.create(settings=daemon.settings)
    t0 = time.monotonic()
    r = sbx.exec(["sh", "-c", "echo started; sleep 100"], idle_timeout=1)
    assert r.status == "timed_out" and r.exit_code == 124
    assert r.stdout == "started\n"  # the output so far is kept
    assert time.monotonic() - t0 < 30
    cli = _cli(daemon, "exec", "--idle-output-timeout", "1", sbx.id, "--", "sleep", "100")
    assert cli.returncode == 124


def test_streaming_10mb_keeps_daemon_memory_flat(daemon: Daemon) -> None:
    sbx = Sandbox.create(settings=daemon.settings)
    c = Client(daemon.settings, autostart=False)
    assert daemon.proc is not None
    for _ in c.exec_stream(sbx.id, {"command": ["head", "-c", "1M", "/dev/urandom"]}):
        pass  # warm up
    before = _rss_kib(daemon.proc.pid)
    total = 0
    peak = before
    for n, ev in enumerate(c.exec_stream(sbx.id, {"command": ["head", "-c", "10M", "/dev/zero"], "max_output": 1024})):
        if ev["type"] == "stdout":
            total += len(base64.b64decode(ev["data"])) if ev["base64"] else len(ev["data"].encode())
        if n % 20 == 0:
            peak = max(peak, _rss_kib(daemon.proc.pid))
        if ev["type"] == "exit":
            assert ev["stdout_bytes"] == 10 << 20 and not ev["truncated"]  # max_output caps results, not streams
    assert total == 10 << 20
    assert peak - before < 8 * 1024, (before, peak)


def test_binary_output_round_trips(daemon: Daemon) -> None:
    sbx = Sandbox.create(settings=daemon.settings)
    payload = bytes(range(256)) * 64
    sbx.files.write("blob", payload)
    r = sbx.exec(["cat", "blob"])
    assert r.stdout_raw == payload
    run = sbx.exec(["cat", "blob"], background=True)
    assert run.wait(timeout=30).stdout_raw == payload
    streamed = b"".join(ev.data for ev in run.stream())
    assert streamed == payload
    cli = _cli(daemon, "exec", sbx.id, "--", "cat", "blob")
    assert cli.stdout == payload


def test_many_concurrent_runs_across_sandboxes(daemon: Daemon) -> None:
    async def go() -> None:
        boxes = await asyncio.gather(*(AsyncSandbox.create(settings=daemon.settings) for _ in range(20)))
        try:
            jobs = [(b, i) for b in boxes for i in range(10)]
            results = await asyncio.gather(*(b.exec(["sh", "-c", f"echo {b.id}-{i}; echo e{i} >&2"]) for b, i in jobs))
            for (b, i), r in zip(jobs, results, strict=True):
                assert (r.exit_code, r.stdout, r.stderr) == (0, f"{b.id}-{i}\n", f"e{i}\n")
        finally:
            await asyncio.gather(*(b.destroy() for b in boxes))

    asyncio.run(go())


def test_daemon_sigkill_leaves_no_run_missing(daemon: Daemon) -> None:
    sbx = Sandbox.create(settings=daemon.settings)
    long = sbx.exec(["sh", "-c", "for i in $(seq 1 8); do echo tick$i; sleep 0.5; done"], background=True)
    short = sbx.exec(["sh", "-c", "echo quick"], background=True)
    doomed = sbx.exec(["sh", "-c", "echo doomed; sleep 300"], background=True)
    short.wait(timeout=30)
    time.sleep(0.3)
    daemon.kill9()
    # while the daemon is down: one run finishes, one run's processes die with the daemon unaware
    victims = sbx.exec  # (the SDK cannot talk without a daemon; kill it from the host)
    del victims
    pids = subprocess.run(["pgrep", "-f", "sleep 300"], capture_output=True, text=True).stdout.split()
    for pid in pids:
        if Path(f"/proc/{pid}/cgroup").read_text().find(sbx.id) >= 0:
            os.kill(int(pid), 9)
    d2 = Daemon(daemon.home).start()
    daemon.proc = d2.proc
    c = Client(daemon.settings, autostart=False)
    statuses = {r["id"]: r["status"] for r in c.runs(sbx.id)}
    assert set(statuses) == {long.id, short.id, doomed.id}  # nothing vanished
    assert statuses[short.id] == "completed"
    assert statuses[long.id] in ("running", "completed")
    assert statuses[doomed.id] in ("killed", "lost")
    final = c.wait(long.id, timeout=60)
    assert final["status"] == "completed"
    out = c.output(long.id)
    assert out["stdout"]["data"] == "".join(f"tick{i}\n" for i in range(1, 9))  # nothing lost while down
    doomed_out = c.output(doomed.id)
    assert doomed_out["stdout"]["data"] == "doomed\n"  # partial output kept


def test_events_are_ordered_and_per_sandbox(daemon: Daemon) -> None:
    a = Sandbox.create(settings=daemon.settings)
    b = Sandbox.create(settings=daemon.settings)
    a.exec("true")
    b.exec("true")
    a.files.write("x", "1")
    a.destroy()
    lines = _cli(daemon, "events", a.id).stdout.decode().splitlines()
    evs = [json.loads(line) for line in lines]
    assert [e["type"] for e in evs] == ["sandbox_created", "run_started", "run_finished", "file_written", "sandbox_destroyed"]
    assert all(e["sandbox_id"] == a.id for e in evs)
    seqs = [e["seq"] for e in evs]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    only = _cli(daemon, "events", b.id, "--type", "run_finished").stdout.decode().splitlines()
    assert len(only) == 1 and json.loads(only[0])["data"]["status"] == "completed"
    everything = _cli(daemon, "events", "--all").stdout.decode().splitlines()
    assert len(everything) >= len(evs) + 3


def test_logs_transcript_and_follow_on_destroyed(daemon: Daemon) -> None:
    sbx = Sandbox.create(name="logbox", settings=daemon.settings)
    first = sbx.exec("echo one; sleep 0.2; echo two >&2")
    sbx.exec("echo three")
    res = json.loads(_cli(daemon, "logs", "logbox", "--json").stdout)
    assert [r["data"] for r in res["records"]] == ["one\n", "two\n", "three\n"]
    assert res["eof"] and res["next_offset"] == res["size"]
    only = json.loads(_cli(daemon, "logs", "logbox", "--run", first.run_id, "--json").stdout)
    assert [r["data"] for r in only["records"]] == ["one\n", "two\n"]
    resumed = json.loads(_cli(daemon, "logs", "logbox", "--offset", str(res["records"][2]["offset"]), "--json").stdout)
    assert [r["data"] for r in resumed["records"]] == ["three\n"]
    sbx.destroy()
    gone = _cli(daemon, "logs", sbx.id, "--follow", timeout=30)
    assert gone.returncode in (0, 1)  # ends cleanly, never hangs


def test_logs_without_follow_prints_the_whole_transcript_page_by_page(daemon: Daemon) -> None:
    """Pages of --max-bytes each, up to the transcript's size at the start: a run whose records
    come after the first page is printed too (one page with --json)."""
    sbx = Sandbox.create(settings=daemon.settings)
    for word in ("first", "second", "third"):
        sbx.exec(f"echo {word}")
    last = sbx.exec("echo last")
    out = _cli(daemon, "logs", sbx.id, "--max-bytes", "8")
    assert out.returncode == 0 and out.stdout.decode().split() == ["first", "second", "third", "last"], out
    only = _cli(daemon, "logs", sbx.id, "--run", last.run_id, "--max-bytes", "8")
    assert only.returncode == 0 and only.stdout == b"last\n"
    page = json.loads(_cli(daemon, "logs", sbx.id, "--max-bytes", "8", "--json").stdout)
    assert [r["data"] for r in page["records"]] == ["first\n"] and not page["eof"]
    mistaken = _cli(daemon, "logs", last.run_id, "--json")  # a run's id where the sandbox goes
    error = json.loads(mistaken.stdout)["error"]
    assert mistaken.returncode == 1 and error["kind"] == "not_found"
    assert f"hutch logs SANDBOX --run {last.run_id}" in error["hint"] and f"hutch poll {last.run_id}" in error["hint"]
    sbx.destroy()


def test_bad_run_input(daemon: Daemon) -> None:
    sbx = Sandbox.create(settings=daemon.settings)
    r = _cli(daemon, "poll", "run_nope", "--json")
    assert r.returncode == 1 and json.loads(r.stdout)["error"]["kind"] == "not_found"
    assert "hutch runs" in json.loads(r.stdout)["error"]["hint"]
    for args in (["--timeout", "-1"], ["--timeout", "99999999"], ["--idle-output-timeout", "0"]):
        bad = _cli(daemon, "exec", *args, sbx.id, "--", "true")
        assert bad.returncode == 2, args
    with pytest.raises(HutchError) as err:
        sbx.exec("true", timeout=-5)
    assert err.value.kind == "invalid"
    k = _cli(daemon, "kill", "--signal", "BOGUS", sbx.exec("true").run_id)
    assert k.returncode == 2


def test_background_capacity(hutch_home: Path) -> None:
    d = Daemon(hutch_home, HUTCH_MAX_BACKGROUND_RUNS="2").start()
    try:
        sbx = Sandbox.create(settings=d.settings)
        runs = [sbx.exec("sleep 30", background=True) for _ in range(2)]
        with pytest.raises(HutchError) as err:
            sbx.exec("sleep 30", background=True)
        assert err.value.kind == "capacity" and "hutch kill" in (err.value.hint or "")
        assert sbx.exec("echo fg").stdout == "fg\n"  # foreground runs are not counted
        for r in runs:
            r.kill("KILL")
    finally:
        try:
            Client(d.settings, autostart=False).destroy(sbx.id)
        finally:
            d.stop()


def test_client_disconnect_mid_stream_leaves_the_run_running(daemon: Daemon) -> None:
    sbx = Sandbox.create(settings=daemon.settings)
    c = Client(daemon.settings, autostart=False)
    stream = c.exec_stream(sbx.id, {"command": ["sh", "-c", "for i in $(seq 1 20); do echo n$i; sleep 0.1; done"]})
    first = next(stream)
    assert first["type"] == "run"
    assert next(stream)["type"] == "stdout"
    stream.close()  # the client goes away
    run = c.wait(first["run_id"], timeout=30)
    assert run["status"] == "completed"
    assert c.output(first["run_id"])["stdout"]["data"] == "".join(f"n{i}\n" for i in range(1, 21))


def test_code_snippets(daemon: Daemon, tmp_path: Path) -> None:
    r = _cli(daemon, "run", "--lang", "python", "print(6 * 7)")
    assert (r.returncode, r.stdout) == (0, b"42\n")
    multi = _cli(daemon, "run", "--lang", "python", "import sys\nprint('two lines')\nsys.exit(3)")
    assert (multi.returncode, multi.stdout) == (3, b"two lines\n")
    r = _cli(daemon, "run", "--lang", "bash", "echo $((1 + 2)); exit 5")
    assert (r.returncode, r.stdout) == (5, b"3\n")
    script = tmp_path / "job.sh"
    script.write_text("echo from a file\n")
    r = _cli(daemon, "run", "--file", str(script))
    assert (r.returncode, r.stdout) == (0, b"from a file\n")
    unknown = tmp_path / "job.xyz"
    unknown.write_text("x")
    r = _cli(daemon, "run", "--file", str(unknown))
    assert r.returncode == 2 and b"--lang" in r.stderr


def test_a_slow_streaming_client_holds_the_run_back_within_its_timeout(daemon: Daemon) -> None:
    sbx = Sandbox.create(settings=daemon.settings)
    c = Client(daemon.settings, autostart=False)
    command = "touch started; yes | head -c 40000000; sleep 30"
    stream = c.exec_stream(sbx.id, {"command": ["sh", "-c", command], "timeout": 2})
    first = next(stream)
    assert first["type"] == "run"
    # the client reads nothing until the timeout has fired, however fast or slow the machine is.
    # The run frame comes before the command exists, so first wait for the command to have
    # started (its marker stays when it is gone; a ps between two polls could miss it), then
    # for it to be gone: held back by the client (backpressure), it cannot end on its own
    # before its 2 s wall timeout kills the whole tree
    deadline = time.monotonic() + 60
    while "started" not in {e["name"] for e in c.list_files(sbx.id)}:
        assert time.monotonic() < deadline, "the command did not start"
        time.sleep(0.1)
    while any(w in p["command"] for p in c.ps(sbx.id) for w in ("yes", "sleep 30")):
        assert time.monotonic() < deadline, "the timeout did not hold while the client was slow"
        time.sleep(0.2)
    got = 0
    last = None
    for ev in stream:  # the client catches up: every byte the command wrote before it was killed
        if ev["type"] == "stdout":
            got += len(ev["data"])
        last = ev
    assert last is not None and last["type"] == "exit" and last["status"] == "timed_out"
    assert got == last["stdout_bytes"] and not last["truncated"]
    assert got < 40_000_000  # held back: it never wrote it all
    assert c.run(first["run_id"])["status"] == "timed_out"


def test_a_foreground_result_is_recorded_before_the_next_request(daemon: Daemon) -> None:
    """The daemon sends a foreground exec's result on, and records it in the same turn of its
    loop (Runs.exec ``early``): the next request already sees the run settled, with its event."""
    sbx = Sandbox.create(settings=daemon.settings)
    c = Client(daemon.settings, autostart=False)
    for i in range(40):
        res = c.exec(sbx.id, {"command": ["sh", "-c", f"exit {i % 3}"]})
        run = c.run(res["run_id"])
        assert (run["status"], run["exit_code"]) == (("completed", 0) if i % 3 == 0 else ("failed", i % 3)), run
    finished = c.events(sbx.id, types=["run_finished"])
    assert len(finished) == 40


def test_a_foreground_run_whose_client_left_is_recorded(daemon: Daemon) -> None:
    """A client that closes its connection during a foreground exec: the run goes on to its end
    and is recorded (the answer nobody waits for is dropped)."""
    sbx = Sandbox.create(settings=daemon.settings)
    c = Client(daemon.settings, autostart=False)
    body = json.dumps({"command": ["sh", "-c", "sleep 1; echo done"]}).encode()
    conn = c.endpoint.connection()
    conn.request("POST", f"/v1/sandboxes/{sbx.id}/exec", body=body, headers={"content-type": "application/json"})
    end = time.monotonic() + 30
    while not c.runs(sbx.id) and time.monotonic() < end:
        time.sleep(0.02)
    conn.close()  # gone before the answer
    (run,) = c.runs(sbx.id)
    final = c.wait(run["id"], timeout=60)
    assert (final["status"], final["exit_code"]) == ("completed", 0)
    assert c.output(run["id"])["stdout"]["data"] == "done\n"


def test_sdk_threads_share_kept_connections(daemon: Daemon) -> None:
    """Eight threads exec through their own SDK objects at once, over the process's kept
    connections (at most Kept.LIMIT): every result is its own, nothing hangs."""
    from concurrent.futures import ThreadPoolExecutor

    sbx = Sandbox.create(settings=daemon.settings)

    def work(n: int) -> list[str]:
        mine = Sandbox.connect(sbx.id, settings=daemon.settings)
        return [mine.exec(["echo", f"{n}-{i}"]).stdout for i in range(40)]

    with ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(work, range(8)))
    assert outs == [[f"{n}-{i}\n" for i in range(40)] for n in range(8)]


@pytest.mark.parametrize("end", ["stop", "kill9"])
def test_a_kept_connection_outlives_no_daemon(daemon: Daemon, end: str) -> None:
    """The SDK keeps its connection to the daemon between calls; a daemon stopped or killed
    -9 in between leaves it closed, and the next call goes to the next daemon on a new one."""
    sbx = Sandbox.create(settings=daemon.settings)
    assert sbx.exec(["echo", "one"]).stdout == "one\n"
    daemon.stop() if end == "stop" else daemon.kill9()
    d2 = Daemon(daemon.home).start()
    daemon.proc = d2.proc
    assert sbx.exec(["echo", "two"]).stdout == "two\n"
    assert [r["status"] for r in Client(daemon.settings, autostart=False).runs(sbx.id)] == ["completed", "completed"]
