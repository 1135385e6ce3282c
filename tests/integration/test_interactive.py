"""Interactive runs: stdin forwarded while the run runs, a real terminal, window resize."""

from __future__ import annotations

import base64
import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

from tests.conftest import Daemon, hutch_env
from websockets.sync.client import unix_connect

from hutch import Sandbox


@contextlib.contextmanager
def _attach(daemon: Daemon, sbx: Sandbox, start: dict[str, Any]) -> Iterator[Any]:
    with unix_connect(str(daemon.settings.socket_path), uri=f"ws://hutch/v1/sandboxes/{sbx.id}/attach", max_size=None) as ws:
        ws.send(json.dumps({"type": "start"} | start))
        yield ws


def _read_until(ws: Any, predicate: Any, seen: list[dict[str, Any]]) -> str:
    out = ""
    while True:
        event = json.loads(ws.recv(timeout=30))
        seen.append(event)
        if event["type"] in ("stdout", "stderr"):
            out += base64.b64decode(event["data"]).decode() if event["base64"] else event["data"]
        if predicate(out, event):
            return out


def test_terminal_reports_tty_and_follows_a_resize(daemon: Daemon) -> None:
    sbx = Sandbox.create(settings=daemon.settings)
    script = "tty; stty size; read line; stty size; exit 3"
    with _attach(daemon, sbx, {"command": ["sh", "-c", script], "tty": True, "rows": 24, "cols": 80}) as ws:
        seen: list[dict[str, Any]] = []
        out = _read_until(ws, lambda text, ev: "24 80" in text, seen)
        assert "/dev/pts/" in out
        ws.send(json.dumps({"type": "resize", "rows": 40, "cols": 100}))
        ws.send(json.dumps({"type": "stdin", "data": base64.b64encode(b"go\r").decode()}))
        out += _read_until(ws, lambda text, ev: ev["type"] == "exit", seen)
        assert "40 100" in out
        assert seen[-1]["exit_code"] == 3


def test_stdin_streams_until_eof(daemon: Daemon) -> None:
    sbx = Sandbox.create(settings=daemon.settings)
    with _attach(daemon, sbx, {"command": ["sh", "-c", "while read l; do echo got:$l; done; echo bye"]}) as ws:
        seen: list[dict[str, Any]] = []
        ws.send(json.dumps({"type": "stdin", "data": base64.b64encode(b"one\n").decode()}))
        assert "got:one" in _read_until(ws, lambda text, ev: "got:one" in text, seen)  # answered before any EOF
        ws.send(json.dumps({"type": "stdin", "data": base64.b64encode(b"two\n").decode()}))
        ws.send(json.dumps({"type": "eof"}))
        out = _read_until(ws, lambda text, ev: ev["type"] == "exit", seen)
        assert out == "got:two\nbye\n" and seen[-1]["exit_code"] == 0


def test_client_leaving_hangs_up_the_session(daemon: Daemon) -> None:
    sbx = Sandbox.create(settings=daemon.settings)
    with _attach(daemon, sbx, {"command": ["sh", "-c", "echo ready; sleep 300"], "tty": True}) as ws:
        seen: list[dict[str, Any]] = []
        first = _read_until(ws, lambda text, ev: "ready" in text, seen)
        assert "ready" in first
        run_id = seen[0]["run_id"]
    run = sbx.client.wait(run_id, timeout=30)  # hung up, not left running forever
    assert run["status"] in ("killed", "failed")


def test_cli_interactive_and_tty(daemon: Daemon) -> None:
    sbx = Sandbox.create(settings=daemon.settings)
    env = hutch_env(daemon.home)
    r = subprocess.run(
        [sys.executable, "-m", "hutch", "exec", "-i", sbx.id, "--", "cat"],
        input=b"piped in\n",
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert (r.returncode, r.stdout) == (0, b"piped in\n")
    r = subprocess.run(
        [sys.executable, "-m", "hutch", "exec", "-it", sbx.id, "--", "sh"],
        input=b"test -t 0 && echo TTY; exit 4\n",
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert r.returncode == 4 and b"TTY" in r.stdout
    r = subprocess.run(
        [sys.executable, "-m", "hutch", "shell", sbx.id],
        input=b"echo in-shell; exit 0\n",
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert r.returncode == 0 and b"in-shell" in r.stdout


def test_sdk_pty_sync_and_async(daemon: Daemon) -> None:
    import asyncio

    from hutch import AsyncSandbox

    sbx = Sandbox.create(settings=daemon.settings)
    with sbx.pty(["sh", "-c", "stty size; read x; stty size; exit 6"], rows=30, cols=90) as term:
        out = b""
        while b"30 90" not in out:
            out += term.read(timeout=30)
        term.resize(50, 120)
        term.send("\r")
        assert term.wait(timeout=30) == 6
        assert term.run_id and term.run_id.startswith("run_")

    async def go() -> int:
        asbx = await AsyncSandbox.connect(sbx.id, settings=daemon.settings)
        async with await asbx.pty(["sh", "-c", "tty; exit 2"]) as t:
            seen = b""
            while True:
                chunk = await t.read(timeout=30)
                if not chunk:
                    break
                seen += chunk
            assert b"/dev/pts/" in seen
            return await t.wait()

    assert asyncio.run(go()) == 2


def test_one_large_stdin_message_reaches_the_run_whole(daemon: Daemon) -> None:
    """A client may send more input at once than one frame to the sandbox's agent may carry."""
    sbx = Sandbox.create(settings=daemon.settings)
    data = bytes(range(256)) * (3 * 4096)  # 3 MiB in one message
    with _attach(daemon, sbx, {"command": ["sh", "-c", "cat | wc -c"]}) as ws:
        seen: list[dict[str, Any]] = []
        ws.send(json.dumps({"type": "stdin", "data": base64.b64encode(data).decode()}))
        ws.send(json.dumps({"type": "eof"}))
        out = _read_until(ws, lambda text, ev: ev["type"] == "exit", seen)
        assert (out.strip(), seen[-1]["exit_code"]) == (str(len(data)), 0)


def test_terminal_sizes_are_bounded_and_a_bad_resize_keeps_the_session(daemon: Daemon) -> None:
    sbx = Sandbox.create(settings=daemon.settings)
    with _attach(daemon, sbx, {"command": ["true"], "tty": True, "rows": 1 << 20, "cols": 80}) as ws:
        event = json.loads(ws.recv(timeout=30))
        assert event["type"] == "error" and event["error"]["kind"] == "invalid", event
        assert "65535" in event["error"]["message"]
    script = "read line; stty size"
    with _attach(daemon, sbx, {"command": ["sh", "-c", script], "tty": True, "rows": 24, "cols": 80}) as ws:
        for bad in ({"rows": 70000, "cols": 80}, {"rows": -1, "cols": 80}, {"rows": "x", "cols": 80}, {"cols": 80}):
            ws.send(json.dumps({"type": "resize"} | bad))
        ws.send(json.dumps({"type": "resize", "rows": 30, "cols": 90}))
        ws.send(json.dumps({"type": "stdin", "data": base64.b64encode(b"go\r").decode()}))
        seen: list[dict[str, Any]] = []
        out = _read_until(ws, lambda text, ev: ev["type"] == "exit", seen)
        assert "30 90" in out
        assert seen[-1]["exit_code"] == 0
    assert sbx.client.get(sbx.id)["state"] == "running"


def test_what_is_typed_before_the_terminal_session_is_up_is_kept(daemon: Daemon) -> None:
    """Keys typed while `hutch exec -it` starts (before it puts the terminal in raw mode) reach
    the command: switching modes keeps the terminal's pending input."""
    import os
    import select
    import time

    sbx = Sandbox.create(settings=daemon.settings)
    master, slave = os.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "hutch", "exec", "-it", sbx.id, "--", "sh"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=hutch_env(daemon.home),
        start_new_session=True,
    )
    os.close(slave)
    os.write(master, b"echo TYPED$((40+2))\n")  # ahead: the CLI is still starting
    out = b""
    deadline = time.monotonic() + 60
    sent_exit = False
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the CLI exited: the terminal hung up
                    break
                if not chunk:
                    break
                out += chunk
            if b"TYPED42" in out and not sent_exit:
                os.write(master, b"exit 3\n")
                sent_exit = True
            if proc.poll() is not None and not ready:
                break
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    assert b"TYPED42" in out, out
    assert code == 3
