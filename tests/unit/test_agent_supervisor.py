"""The run supervisor's state machine, driven over the agent protocol.

Each test runs one supervisor the way a sandbox does: the agent's files as a package of
their own (no hutch), under the host's python3 -I -S, its end of a socketpair as the
daemon's connection. What it sends, the status it writes and the states it went
through are checked.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from hutch.providers.local.agent import wire

AGENT = Path(wire.__file__).parent
SCRIPT = """
import json, socket, sys
sys.path.insert(0, sys.argv[1])
from agent.output import RunDir
from agent.supervisor import Supervisor

trail = []
class Traced(Supervisor):
    def __setattr__(self, name, value):
        if name == "state":
            trail.append(value)
        super().__setattr__(name, value)

sock = socket.socket(fileno=int(sys.argv[2]))
rundir = RunDir(sys.argv[5])
if sys.argv[6] == "prepared":
    rundir.prepare()  # as a spare does while it waits
run = Traced(sock, json.loads(sys.argv[4]), int(sys.argv[3]), rundir)
run.run()
print(json.dumps({"trail": trail, "outcome": run.outcome}))
"""


class Run:
    """One supervisor in a child process, and the daemon's end of its connection."""

    def __init__(self, tmp: Path, argv: list[str], prepared: bool = True, **req: Any) -> None:
        self.runs = tmp / "runs"
        self.runs.mkdir(exist_ok=True)
        ours, theirs = socket.socketpair()
        stdin = os.open(os.devnull, os.O_RDONLY)
        request = {"type": "exec", "run_id": "run_test", "argv": argv, "cwd": str(tmp), "env": {"PATH": "/usr/bin:/bin"}} | req
        python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable  # as in a sandbox
        args = [str(AGENT.parent), str(theirs.fileno()), str(stdin), json.dumps(request), str(self.runs)]
        args.append("prepared" if prepared else "not")
        self.proc = subprocess.Popen(
            [python, "-I", "-S", "-B", "-c", SCRIPT, *args],
            pass_fds=(theirs.fileno(), stdin),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        theirs.close()
        os.close(stdin)
        self.sock = ours
        self.sock.settimeout(60)
        self.reader = wire.Reader()

    def frame(self) -> tuple[int, bytes] | None:
        while (got := self.reader.next()) is None:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                return None
            self.reader.feed(chunk)
        return got

    def message(self) -> dict[str, Any]:
        got = self.frame()
        assert got is not None and got[0] == wire.MESSAGE, got
        msg: dict[str, Any] = wire.decode(got[1])
        return msg

    def rest(self) -> tuple[dict[str, bytes], dict[str, Any]]:
        """The output until the end, and the last message."""
        out = {"stdout": b"", "stderr": b""}
        while True:
            got = self.frame()
            assert got is not None, "the connection closed without a finished message"
            if got[0] in wire.OUTPUT:
                out[wire.OUTPUT[got[0]]] += got[1]
                continue
            return out, wire.decode(got[1])

    def send(self, frames: bytes) -> None:
        self.sock.sendall(frames)

    def end(self) -> dict[str, Any]:
        stdout, stderr = self.proc.communicate(timeout=60)
        assert self.proc.returncode == 0, stderr.decode()
        self.sock.close()
        result: dict[str, Any] = json.loads(stdout)
        return result

    def status_file(self) -> dict[str, Any]:
        status: dict[str, Any] = json.loads((self.runs / "run_test" / "status").read_text())
        return status


def test_a_run_that_exits_goes_starting_running_draining_finished(tmp_path: Path) -> None:
    run = Run(tmp_path, ["sh", "-c", "echo out; echo err >&2; exit 3"])
    started = run.message()
    assert started["type"] == "started" and started["pid"] > 0
    out, finished = run.rest()
    assert out == {"stdout": b"out\n", "stderr": b"err\n"}
    assert finished["type"] == "finished"
    assert (finished["exit"], finished["signal"], finished["reason"]) == (3, 0, None)
    assert (finished["stdout_bytes"], finished["stderr_bytes"], finished["truncated"]) == (4, 4, False)
    assert run.end() == {"trail": ["starting", "running", "draining", "finished"], "outcome": "exited"}
    assert run.status_file() == finished  # on disk too, the same words
    assert (run.runs / "run_test" / "stdout").read_bytes() == b"out\n"


def test_a_command_that_cannot_start_goes_straight_to_finished(tmp_path: Path) -> None:
    run = Run(tmp_path, ["no-such-command-here"])
    finished = run.message()
    assert finished["type"] == "finished"
    assert (finished["exit"], finished["reason"]) == (127, "spawn")
    assert finished["spawn_error"] == "command not found: no-such-command-here"
    assert run.frame() is None  # and the supervisor is done
    assert run.end() == {"trail": ["starting", "finished"], "outcome": "failed"}


def test_the_wall_timeout_is_enforced_by_the_supervisor(tmp_path: Path) -> None:
    run = Run(tmp_path, ["sh", "-c", "sleep 60 & sleep 60"], timeout=0.5)
    assert run.message()["type"] == "started"
    _, finished = run.rest()
    assert (finished["exit"], finished["signal"], finished["reason"]) == (137, 9, "timeout")
    assert run.end() == {"trail": ["starting", "running", "draining", "finished"], "outcome": "timed_out"}


def test_a_signal_from_the_daemon_kills_the_run_and_gives_the_reason(tmp_path: Path) -> None:
    run = Run(tmp_path, ["sleep", "60"])
    assert run.message()["type"] == "started"
    run.send(wire.message({"type": "signal", "signal": 15, "reason": "killed"}))
    _, finished = run.rest()
    assert (finished["exit"], finished["signal"], finished["reason"]) == (143, 15, "killed")
    assert run.end()["outcome"] == "killed"


def test_input_reaches_an_interactive_run_until_eof(tmp_path: Path) -> None:
    run = Run(tmp_path, ["cat"], interactive=True)
    assert run.message()["type"] == "started"
    run.send(wire.data(wire.STDIN, b"hello ") + wire.data(wire.STDIN, b"world\n") + wire.message({"type": "eof"}))
    out, finished = run.rest()
    assert out["stdout"] == b"hello world\n"
    assert (finished["exit"], finished["reason"]) == (0, None)
    assert run.end()["outcome"] == "exited"


def test_a_run_outlives_its_daemon_and_keeps_its_status(tmp_path: Path) -> None:
    run = Run(tmp_path, ["sh", "-c", "sleep 0.3; echo done"])
    assert run.message()["type"] == "started"
    run.sock.close()  # the daemon went away: a plain run goes on, its output on disk
    assert run.end() == {"trail": ["starting", "running", "draining", "finished"], "outcome": "exited"}
    status = run.status_file()
    assert (status["exit"], status["stdout_bytes"]) == (0, 5)
    assert (run.runs / "run_test" / "stdout").read_bytes() == b"done\n"


def test_a_frame_over_the_limit_drops_the_connection_not_the_run(tmp_path: Path) -> None:
    run = Run(tmp_path, ["sh", "-c", "sleep 0.5; echo still"])
    assert run.message()["type"] == "started"
    run.send((wire.MAX_FRAME + 1).to_bytes(4, "big") + b"I")
    deadline = time.monotonic() + 60
    while run.frame() is not None:  # the supervisor hangs up on a broken protocol
        assert time.monotonic() < deadline
    assert run.end()["outcome"] == "exited"
    assert run.status_file()["exit"] == 0
    assert (run.runs / "run_test" / "stdout").read_bytes() == b"still\n"


def test_a_run_whose_directory_was_not_made_ahead_makes_it(tmp_path: Path) -> None:
    (tmp_path / "runs" / "run_test").mkdir(parents=True)
    (tmp_path / "runs" / "run_test" / "killed").write_text("15")  # a kill that came before the run
    run = Run(tmp_path, ["sleep", "60"])
    assert run.message()["type"] == "started"
    _, finished = run.rest()
    assert (finished["reason"], finished["signal"]) == ("killed", 15)
    assert run.end()["outcome"] == "killed"
    assert run.status_file() == finished
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["run_test"]  # the spare's directory went away
    plain = Run(tmp_path / "runs", ["true"], prepared=False, run_id="run_plain")
    plain.rest()
    plain.end()
    assert json.loads((tmp_path / "runs" / "runs" / "run_plain" / "status").read_text())["exit"] == 0
