"""The HTTP edge against a real daemon: dropped keep-alive connections, body limits, hang-ups, logs."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import Daemon, destroy_all, sweep

from hutch import AsyncSandbox
from hutch.client import AsyncClient
from hutch.config import Settings
from hutch.errors import InternalError, InvalidError

pytestmark = pytest.mark.integration


@contextlib.contextmanager
def busy_cores(n: int = 2) -> Iterator[None]:
    """CPU load on every core while the block runs (busy loops, ended by PID)."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait(10)


@pytest.fixture
def short_keepalive(hutch_home: Path) -> Iterator[Daemon]:
    """A daemon that closes a connection idle for half a second."""
    d = Daemon(hutch_home, HUTCH_HTTP_KEEPALIVE="0.5").start()
    try:
        yield d
    finally:
        try:
            destroy_all(hutch_home)
        finally:
            d.stop()
            sweep(hutch_home)


async def _across_a_dropped_connection(daemon: Daemon, call: Any) -> tuple[Any, bool]:
    """Send ``call(client)`` on a kept-alive connection the daemon closes as the request arrives.

    The client keeps idle connections for half of its own ``http_keepalive`` (30 s); the daemon
    closes them after 0.5 s. The daemon is stopped while the connection idles past that, the
    request is written to the stopped daemon (its socket is not readable yet, so the pool hands
    the connection out), and on SIGCONT the daemon's keep-alive timer fires before it reads
    the request: the connection is closed under it. Returns the outcome and whether the
    request was dropped and sent again (the daemon may also read it first: then it was not).
    """
    client = AsyncClient(Settings.load(home=daemon.home), autostart=False)
    sent = 0

    async def count(_: Any) -> None:
        nonlocal sent
        sent += 1

    client.http.event_hooks["request"].append(count)
    assert daemon.proc is not None
    try:
        await client.json("GET", "/v1/health")  # the connection, now idle in the pool
        await asyncio.sleep(0.05)  # the daemon arms its keep-alive timer once it has answered
        os.kill(daemon.proc.pid, signal.SIGSTOP)
        try:
            await asyncio.sleep(1.0)  # past the daemon's keep-alive, by its clock too
            task = asyncio.ensure_future(call(client))
            for _ in range(50):  # the task takes the idle connection and writes the request
                await asyncio.sleep(0)
        finally:
            os.kill(daemon.proc.pid, signal.SIGCONT)
        outcome = await task
        assert sent - 1 in (1, 2)
        return outcome, sent - 1 == 2
    finally:
        await client.close()


ROUNDS = 10  # the daemon drops the request in most rounds; one is enough


def test_get_and_delete_survive_a_dropped_keepalive_connection(short_keepalive: Daemon) -> None:
    c = short_keepalive.client()
    sbx = c.create({"provider": "local"})

    async def gets() -> bool:
        for _ in range(ROUNDS):
            got, dropped = await _across_a_dropped_connection(short_keepalive, lambda cl: cl.get(sbx["id"]))
            assert got["id"] == sbx["id"]
            if dropped:
                return True  # the first was dropped unanswered, the retry answered
        return False

    async def deletes() -> bool:
        for _ in range(ROUNDS):
            sid = c.create({"provider": "local"})["id"]
            gone, dropped = await _across_a_dropped_connection(short_keepalive, lambda cl, sid=sid: cl.destroy(sid))
            assert gone["destroyed"] is True and gone["existed"] is True
            assert c.get(sid)["state"] == "destroyed"  # nothing left running
            if dropped:
                return True
        return False

    assert asyncio.run(gets())
    assert asyncio.run(deletes())


def test_keyed_create_survives_a_dropped_connection_once(short_keepalive: Daemon) -> None:
    async def go() -> bool:
        for n in range(1, ROUNDS + 1):
            rec, dropped = await _across_a_dropped_connection(short_keepalive, lambda cl: cl.create({"provider": "local"}))
            live = [r["id"] for r in short_keepalive.client().list()]
            assert len(live) == n and rec["id"] in live  # each created once
            if dropped:
                return True
        return False

    assert asyncio.run(go())


def test_many_sandboxes_and_execs_under_cpu_load_leave_nothing(daemon: Daemon) -> None:
    """The README's load (20 AsyncSandbox, 200 execs, gather(destroy)), twice, with both cores busy."""

    async def round_() -> list[str]:
        boxes = await asyncio.gather(*(AsyncSandbox.create(settings=daemon.settings) for _ in range(20)))
        try:
            jobs = [(b, i) for b in boxes for i in range(10)]
            results = await asyncio.gather(*(b.exec(["sh", "-c", f"echo {b.id}-{i}"]) for b, i in jobs))
            for (b, i), r in zip(jobs, results, strict=True):
                assert (r.exit_code, r.stdout) == (0, f"{b.id}-{i}\n")
        finally:
            outcomes = await asyncio.gather(*(b.destroy() for b in boxes), return_exceptions=True)
            for b in boxes:
                await b.client.close()
        assert [o for o in outcomes if isinstance(o, BaseException)] == []
        return [b.id for b in boxes]

    with busy_cores():
        for _ in range(2):
            ids = asyncio.run(round_())
            c = daemon.client()
            assert c.list() == []  # every sandbox destroyed
            assert {c.get(i)["state"] for i in ids} == {"destroyed"}


# -- item: request bodies are refused at their limit, while they are read -------------


def _peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def _put_raw(sock_path: Path, url: str, total: int, *, chunked: bool) -> tuple[int, dict[str, Any]]:
    """PUT ``total`` zero bytes without holding them; the daemon's answer once it refused them."""
    import http.client
    import json
    import socket

    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(120)
    s.connect(str(sock_path))
    size = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {total}"
    s.sendall(f"PUT {url} HTTP/1.1\r\nHost: hutch\r\n{size}\r\n\r\n".encode())
    block = b"\0" * (1 << 20)
    try:
        for _ in range(total // len(block)):
            s.sendall(b"%x\r\n%s\r\n" % (len(block), block) if chunked else block)
        if chunked:
            s.sendall(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError, TimeoutError):
        pass  # the daemon answered and closed before taking it all
    resp = http.client.HTTPResponse(s)  # type: ignore[arg-type]
    resp.begin()
    body = json.loads(resp.read())
    s.close()
    return resp.status, body


def test_a_1gib_put_is_refused_without_being_held_in_memory(daemon: Daemon) -> None:
    c = daemon.client()
    sid = c.create({"provider": "local"})["id"]
    assert daemon.proc is not None
    before = _peak_rss_kib(daemon.proc.pid)
    url = f"/v1/sandboxes/{sid}/files?path=big.bin"
    for chunked in (False, True):  # announced by Content-Length, or found out while reading
        status, body = _put_raw(daemon.settings.socket_path, url, 1 << 30, chunked=chunked)
        assert status == 413, body
        assert body["error"]["kind"] == "invalid" and "67108864 bytes" in body["error"]["message"]
    assert _peak_rss_kib(daemon.proc.pid) - before < 256 << 10  # was +2 GiB: the body was read whole first
    assert "big.bin" not in [e["name"] for e in c.list_files(sid)]
    with pytest.raises(InvalidError):  # the client reads the refusal, though it was still sending
        c.write_file(sid, "big.bin", b"z" * ((64 << 20) + 1))
    c.write_file(sid, "ok.bin", b"z" * (64 << 20))  # at the limit: accepted
    assert c.read_page(sid, "ok.bin", (64 << 20) - 1, 10)[0] == b"z"


# -- item: a wait ends when its client hangs up -----------------------------------------


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _until(check: Any, what: str, deadline: float = 60.0) -> None:
    import time

    end = time.monotonic() + deadline
    while not check():
        assert time.monotonic() < end, f"still waiting for {what}"
        time.sleep(0.05)


def test_approval_waits_end_when_their_clients_hang_up(daemon: Daemon) -> None:
    import socket

    c = daemon.client()
    apr = c.request_approval({"action": "deploy to staging"})
    base = c.health()["tasks"]
    socks = []
    for _ in range(50):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(str(daemon.settings.socket_path))
        s.sendall(f"POST /v1/approvals/{apr['id']}/wait HTTP/1.1\r\nHost: hutch\r\nContent-Length: 0\r\n\r\n".encode())
        socks.append(s)
    _until(lambda: c.health()["approval_waits"] == 50, "50 waits")
    assert c.health()["tasks"] >= base + 50
    for s in socks:
        s.close()  # the clients hang up
    _until(lambda: c.health()["approval_waits"] == 0, "the waits to end")
    _until(lambda: c.health()["tasks"] <= base, "their tasks to end")
    assert c.approval(apr["id"])["status"] == "pending"  # hanging up decides nothing
    assert c.wait_approval(apr["id"], timeout=0.1)["status"] == "pending"  # and a new wait still works


# -- item: NUL in paths, internal errors in the daemon's log ---------------------------


def test_nul_paths_are_invalid_and_internal_errors_reach_the_daemon_log(daemon: Daemon, tmp_path: Path) -> None:
    import shutil

    c = daemon.client()
    sid = c.create({"provider": "local"})["id"]
    for call in (
        lambda: c.read_file(sid, "a\x00b"),
        lambda: c.write_file(sid, "a\x00b", b"x"),
        lambda: c.list_files(sid, "/workspace/\x00"),
    ):
        with pytest.raises(InvalidError, match="NUL"):
            call()
    # a damaged state directory: the daemon's scratch directory is a file
    scratch = daemon.home / "tmp"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.write_text("not a directory")
    (tmp_path / "a.txt").write_text("a")
    try:
        with pytest.raises(InternalError):
            c.push(sid, str(tmp_path))
    finally:
        scratch.unlink()
    log = (daemon.home / "test-daemon.log").read_text()
    assert f"internal error on POST /v1/sandboxes/{sid}/push" in log
    after = log[log.index("internal error on POST") :]
    assert "FileExistsError" in after
    assert after.count("Traceback (most recent call last)") == 1  # once: not again by the HTTP server


# -- item: statuses: a call racing a destroy ---------------------------------------------


def test_exec_racing_destroy_is_a_conflict(daemon: Daemon) -> None:
    import threading

    from hutch.errors import ConflictError, HutchError

    c = daemon.client()
    sid = c.create({"provider": "local"})["id"]
    failed: list[HutchError] = []

    def run() -> None:
        try:
            c.exec(sid, {"command": ["sleep", "300"]})
        except HutchError as exc:
            failed.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    _until(lambda: bool(c.runs(sid, "running")), "the run to start")
    c.destroy(sid)
    thread.join(120)
    [err] = failed
    assert isinstance(err, ConflictError), err  # was: unavailable, "the sandbox went away during the run"
    assert "destroyed" in err.message
    [record] = c.runs(sid)
    assert record["status"] == "lost" and "destroyed" in record["error"]
