"""The CLI's exit-code and JSON contract, against a real daemon on the fake provider.

``hutch.cli.main`` is called in process (it owns the error -> exit code mapping); the
daemon is a ``python -m hutch serve`` subprocess with its own HUTCH_HOME.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hutch.cli import main
from hutch.server.home import socket_answers

UNSET = "HUTCH_TEST_SURELY_UNSET_VARIABLE"


def _daemon_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HUTCH_")}
    return env | {"HUTCH_HOME": str(home), "HUTCH_PROVIDER": "fake", "HUTCH_POOL_SIZE": "0"}  # no pool unless asked


def _start_daemon(home: Path) -> subprocess.Popen[bytes]:
    log = open(home / "test-daemon.log", "ab")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(
        [sys.executable, "-m", "hutch", "serve"],
        env=_daemon_env(home),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
    )
    log.close()
    deadline = time.monotonic() + 20
    while not socket_answers(home / "hutchd.sock"):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            pytest.fail("the test daemon did not start: " + (home / "test-daemon.log").read_text(errors="replace"))
        time.sleep(0.02)
    return proc


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=60)  # a stop takes about a second; far longer on a loaded machine
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _stop_strays(home: Path, ours: int) -> None:
    """If a CLI call auto-started another daemon for this home, stop it too (by its pid).

    Only a live ``hutch serve`` process is signalled: a stale pid file may name a reused pid.
    """
    with contextlib.suppress(OSError, ValueError):
        pid = int((home / "hutchd.pid").read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if pid != ours and b"hutch" in cmdline and b"serve" in cmdline:
            os.kill(pid, signal.SIGTERM)


@pytest.fixture(scope="module")
def daemon_home() -> Iterator[Path]:
    # a short path: unix socket paths are limited to ~107 bytes
    home = Path(tempfile.mkdtemp(prefix="hutch-cli-"))
    proc = _start_daemon(home)
    try:
        yield home
    finally:
        _stop(proc)
        _stop_strays(home, proc.pid)
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def cli(daemon_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Any:
    for key in list(os.environ):
        if key.startswith("HUTCH_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("HUTCH_HOME", str(daemon_home))
    monkeypatch.setenv("HUTCH_PROVIDER", "fake")
    monkeypatch.delenv(UNSET, raising=False)

    class Cli:
        def __call__(self, *args: str) -> tuple[int, str, str]:
            capsys.readouterr()
            code = main(list(args))
            out, err = capsys.readouterr()
            return code, out, err

        def json(self, *args: str) -> tuple[int, Any]:
            code, out, _ = self(*args)
            return code, one_json(out)

        def live_ids(self) -> set[str]:
            code, recs = self.json("list", "--json")
            assert code == 0
            return {r["id"] for r in recs}

    return Cli()


def one_json(out: str) -> Any:
    """stdout must hold exactly one JSON document."""
    text = out.strip()
    assert text, "nothing on stdout"
    doc, end = json.JSONDecoder().raw_decode(text)
    assert end == len(text), f"more than one JSON document on stdout: {out!r}"
    return doc


def assert_json_error(doc: Any, kind: str) -> dict[str, Any]:
    assert set(doc) == {"error"}, doc
    err = doc["error"]
    assert err["kind"] == kind, doc
    assert err["message"]
    return dict(err)


@pytest.fixture
def sbx(cli: Any) -> Iterator[str]:
    code, out, _ = cli("create")
    assert code == 0
    sandbox_id = out.split()[0]
    assert sandbox_id.startswith("sbx_")
    yield sandbox_id
    cli("destroy", sandbox_id)


# -- usage errors: exit 2 ------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["create", "--no-such-option"],
        ["list", "--bogus"],
        ["exec", "SBX"],  # missing command
        ["run"],  # missing command
        ["get"],  # missing sandbox
        ["no-such-command"],
        ["destroy"],  # neither sandboxes nor --all
        ["create", "--pids", "many"],
    ],
)
def test_usage_errors_exit_2(cli: Any, args: list[str]) -> None:
    code, out, err = cli(*args)
    assert code == 2
    assert out == ""
    assert err  # said on stderr
    code, doc = cli.json(*args, "--json")
    assert code == 2
    assert_json_error(doc, "invalid")["hint"]


def test_no_arguments_is_usage(cli: Any) -> None:
    code, out, _ = cli()
    assert code == 2
    assert "Usage" in out


def test_json_after_double_dash_belongs_to_the_workload(cli: Any, sbx: str) -> None:
    # `--json` after `--` is an argument of the command, not of hutch: no JSON on stdout
    code, out, err = cli("exec", sbx, "--no-such-option", "--", "echo", "--json")
    assert code == 2
    assert out == ""
    assert "no-such-option" in err


def test_help_and_version_exit_0(cli: Any) -> None:
    assert cli("--help")[0] == 0
    code, out, _ = cli("--version")
    assert code == 0 and "hutch" in out


# -- other commands: 0 ok, 1 failed ------------------------------------------------


def test_get_unknown_is_not_found_with_hint(cli: Any) -> None:
    code, doc = cli.json("get", "nope", "--json")
    assert code == 1
    err = assert_json_error(doc, "not_found")
    assert "hutch list" in err["hint"]
    code, out, stderr = cli("get", "nope")
    assert code == 1
    assert out == ""
    assert "not_found" in stderr and "hutch list" in stderr


@pytest.mark.parametrize("ref", ["run", "exec"])
def test_get_sandbox_named_like_a_run_command_exits_1(cli: Any, ref: str) -> None:
    # `get` is not a run command: its failures exit 1 whatever the sandbox is called
    code, doc = cli.json("get", ref, "--json")
    assert_json_error(doc, "not_found")
    assert code == 1


def test_create_bad_memory_is_invalid(cli: Any) -> None:
    before = cli.live_ids()
    code, doc = cli.json("create", "--memory", "banana", "--json")
    assert code == 2  # bad input is a usage error
    err = assert_json_error(doc, "invalid")
    assert "banana" in err["message"] and err["hint"]
    assert cli.live_ids() == before


def test_create_env_from_unset_variable_is_invalid(cli: Any) -> None:
    code, doc = cli.json("create", "--env", UNSET, "--json")
    assert code == 2
    err = assert_json_error(doc, "invalid")
    assert UNSET in err["message"] and err["hint"]


def test_create_get_list_json(cli: Any) -> None:
    code, rec = cli.json("create", "--name", "cli-box", "--memory", "256M", "--label", "team=x", "--json")
    assert code == 0
    assert rec["name"] == "cli-box" and rec["provider"] == "fake"
    assert rec["spec"]["limits"]["memory"] == 256 << 20
    try:
        code, got = cli.json("get", "cli-box", "--json")
        assert code == 0 and got["id"] == rec["id"]
        assert rec["id"] in cli.live_ids()
        code, doc = cli.json("create", "--name", "cli-box", "--json")
        assert code == 1
        assert_json_error(doc, "conflict")["hint"]
    finally:
        cli("destroy", rec["id"])


def test_destroy_twice_succeeds(cli: Any) -> None:
    code, out, _ = cli("create")
    sandbox_id = out.split()[0]
    code, first = cli.json("destroy", sandbox_id, "--json")
    assert code == 0
    assert first == [{"sandbox": sandbox_id, "name": None, "destroyed": True, "existed": True, "message": "destroyed"}]
    code, second = cli.json("destroy", sandbox_id, "--json")
    assert code == 0
    assert second[0]["destroyed"] is True and second[0]["existed"] is False
    code, out, _ = cli("destroy", sandbox_id)
    assert code == 0 and "already gone" in out
    code, out, _ = cli("destroy", "never-was")
    assert code == 0


# -- exec: the workload's exit code ---------------------------------------------------


@pytest.mark.parametrize(
    ("command", "code"),
    [(["true"], 0), (["false"], 1), (["exit", "3"], 3), (["exit", "42"], 42), (["no-such-program"], 127)],
)
def test_exec_exit_code_passes_through(cli: Any, sbx: str, command: list[str], code: int) -> None:
    assert cli("exec", sbx, "--", *command)[0] == code
    rc, doc = cli.json("exec", sbx, "--json", "--", *command)
    assert rc == code
    assert doc["exit_code"] == code
    if code != 127:
        assert doc.get("error") is None


def test_exec_output(cli: Any, sbx: str) -> None:
    code, out, err = cli("exec", sbx, "--", "echo", "hello", "there")
    assert (code, out, err) == (0, "hello there\n", "")
    code, doc = cli.json("exec", sbx, "--json", "--", "echo", "hi")
    assert (code, doc["stdout"], doc["stderr"], doc["status"]) == (0, "hi\n", "", "completed")


def test_exec_timeout_exits_124(cli: Any, sbx: str) -> None:
    code, _, err = cli("exec", sbx, "--timeout", "0.05", "--", "sleep", "30")
    assert code == 124
    assert "timed out" in err
    code, doc = cli.json("exec", sbx, "--timeout", "0.05", "--json", "--", "sleep", "30")
    assert (code, doc["exit_code"], doc["status"]) == (124, 124, "timed_out")


def test_exec_unknown_sandbox_exits_125(cli: Any) -> None:
    code, out, err = cli("exec", "nope", "--", "true")
    assert code == 125
    assert out == ""
    assert "not_found" in err
    code, doc = cli.json("exec", "nope", "--json", "--", "true")
    assert code == 125
    assert_json_error(doc, "not_found")["hint"]


def test_exec_env_from_unset_variable_is_invalid(cli: Any, sbx: str) -> None:
    code, doc = cli.json("exec", sbx, "--env", UNSET, "--json", "--", "true")
    assert code == 2
    assert_json_error(doc, "invalid")


def test_exec_bad_max_output_is_invalid(cli: Any, sbx: str) -> None:
    code, doc = cli.json("exec", sbx, "--max-output", "lots", "--json", "--", "true")
    assert code == 2
    assert_json_error(doc, "invalid")


# -- run: create, exec, destroy --------------------------------------------------------


def test_run_prints_output_and_leaves_no_sandbox(cli: Any) -> None:
    before = cli.live_ids()
    code, out, _ = cli("run", "--", "echo", "hi")
    assert (code, out) == (0, "hi\n")
    assert cli.live_ids() == before


def test_run_exit_code_and_json(cli: Any) -> None:
    before = cli.live_ids()
    code, doc = cli.json("run", "--json", "--", "exit", "5")
    assert code == 5 and doc["exit_code"] == 5 and doc["status"] == "failed"
    code, doc = cli.json("run", "--timeout", "0.05", "--json", "--", "sleep", "30")
    assert code == 124 and doc["status"] == "timed_out"
    assert cli.live_ids() == before


def test_run_keep(cli: Any) -> None:
    code, _, err = cli("run", "--keep", "--", "true")
    assert code == 0
    kept = err.split("kept sandbox")[1].split()[0]
    try:
        assert kept in cli.live_ids()
    finally:
        cli("destroy", kept)


def test_run_hutch_failure_exits_125(cli: Any) -> None:
    before = cli.live_ids()
    code, doc = cli.json("run", "--memory", "banana", "--json", "--", "true")
    assert code == 2  # bad input: usage
    assert_json_error(doc, "invalid")
    code, doc = cli.json("run", "--sandbox", "no-such-sandbox", "--json", "--", "true")
    assert code == 125  # hutch's own failure
    assert_json_error(doc, "not_found")
    assert cli.live_ids() == before


# -- files ---------------------------------------------------------------------------


def test_write_read_ls(cli: Any, sbx: str, tmp_path: Path) -> None:
    src = tmp_path / "in.bin"
    src.write_bytes(b"\x00\x01binary\xff")
    code, doc = cli.json("write", sbx, "dir/in.bin", "--from", str(src), "--json")
    assert code == 0 and doc["size"] == 9 and doc["path"] == "/workspace/dir/in.bin"
    code, doc = cli.json("read", sbx, "dir/in.bin", "--json")
    assert code == 0 and doc["base64"] is True and doc["size"] == 9
    code, out, _ = cli("ls", sbx)
    assert (code, out) == (0, "dir/\n")
    code, doc = cli.json("read", sbx, "missing", "--json")
    assert code == 1
    assert_json_error(doc, "not_found")


# -- bad input from the command line is a usage error (exit 2, kind invalid) -------------


@pytest.mark.parametrize(
    "args",
    [
        ["create", "--name", "nl-demo\n"],
        ["create", "--env", "A\x01B=1"],
        ["create", "--memory", "8M"],
        ["create", "--memory", "18446744074246422528"],
        ["create", "--pids", "1000000000000"],
        ["create", *(arg for i in range(65) for arg in ("--label", f"k{i}=v"))],
        ["snapshot", "save", "SBX", "snapnl\n"],
    ],
    ids=["name-newline", "env-control", "memory-small", "memory-wraps", "pids-huge", "labels", "snapshot-newline"],
)
def test_bad_input_is_exit_2(cli: Any, sbx: str, args: list[str]) -> None:
    before = cli.live_ids()
    code, doc = cli.json(*[sbx if a == "SBX" else a for a in args], "--json")
    assert code == 2, doc
    assert_json_error(doc, "invalid")
    assert cli.live_ids() == before


@pytest.mark.parametrize(
    "args",
    [
        ["exec", "SBX", "--env", "A\nB=1", "--", "true"],
        ["write", "SBX", "f", "--mode", "7777"],
        ["write", "SBX", "f", "--mode", "4755"],
    ],
    ids=["exec-env-newline", "mode-7777", "mode-setuid"],
)
def test_bad_exec_and_file_input_is_exit_2(cli: Any, sbx: str, args: list[str], tmp_path: Path) -> None:
    src = tmp_path / "in"
    src.write_bytes(b"x")
    argv = [sbx if a == "SBX" else a for a in args]
    if argv[0] == "write":
        argv += ["--from", str(src)]
    code, out, err = cli(*argv)
    assert code == 2, (out, err)
    assert "invalid" in err


# -- the daemon ----------------------------------------------------------------------


def test_daemon_sigterm_cleans_up() -> None:
    # `hutch daemon stop` falls back to SIGTERM: the daemon must still remove its socket and pid file
    home = Path(tempfile.mkdtemp(prefix="hutch-term-"))
    proc = _start_daemon(home)
    try:
        assert (home / "hutchd.pid").read_text().strip() == str(proc.pid)
        _stop(proc)
        assert not (home / "hutchd.sock").exists()
        assert not (home / "hutchd.pid").exists()
    finally:
        _stop_strays(home, proc.pid)
        shutil.rmtree(home, ignore_errors=True)


def test_a_sigterm_as_the_pid_file_is_written_still_cleans_up() -> None:
    # The pid file comes just before the socket answers, and a caller that sees either may send
    # SIGTERM at once: from then on the signal must mean a clean stop. The pid file is made a
    # FIFO whose buffer is full, so the daemon is held inside the write while the signal comes.
    home = Path(tempfile.mkdtemp(prefix="hutch-term-"))
    os.mkfifo(home / "hutchd.pid", 0o600)
    fifo = os.open(home / "hutchd.pid", os.O_RDWR | os.O_NONBLOCK)  # a reader, so the daemon's open does not wait
    proc = None
    try:
        with contextlib.suppress(BlockingIOError):
            while True:
                os.write(fifo, b"\0" * 4096)
        log = open(home / "test-daemon.log", "ab")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen([sys.executable, "-m", "hutch", "serve"], env=_daemon_env(home), stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + 60
        while str(home / "hutchd.pid") not in _fds(proc.pid):
            assert proc.poll() is None and time.monotonic() < deadline, (home / "test-daemon.log").read_text(errors="replace")
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)  # the daemon is inside the pid file's write
        written = b""
        while proc.poll() is None and time.monotonic() < deadline:  # let the write through
            with contextlib.suppress(BlockingIOError):
                written += os.read(fifo, 65536)
            time.sleep(0.01)
        assert proc.wait(timeout=60) == 0, (home / "test-daemon.log").read_text(errors="replace")
        assert written.strip(b"\0") == f"{proc.pid}\n".encode()
        assert not (home / "hutchd.sock").exists()
        assert not (home / "hutchd.pid").exists()
    finally:
        os.close(fifo)
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(home, ignore_errors=True)  # nothing else serves this home: no CLI call ran


def _fds(pid: int) -> list[str]:
    """What the process's open descriptors point at (one closed meanwhile is left out)."""
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return []
    out = []
    for fd in names:
        with contextlib.suppress(OSError):
            out.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
    return out
