"""The agent starts a run's command as subprocess.Popen does, also before it has imported
subprocess (spawn._fork, its first run's way), and its start imports none of the standard
library's heavier modules (every cold create's first run and every wake waits for it)."""

from __future__ import annotations

import ast
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hutch.providers.local.agent import spawn

AGENT = Path(spawn.__file__).parent
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


WAYS = ["popen", "fork"]  # once the agent has imported subprocess, and before (its first run)


def _run(argv: list[str], cwd: str = "/", env: dict[str, str] | None = None, way: str = "popen") -> tuple[int, bytes, bytes]:
    """Start ``argv`` with pipes on 1 and 2 and /dev/null on 0 (``way``: which of the two
    ways spawn.start takes); its status and output."""
    out_r, out_w = os.pipe2(os.O_CLOEXEC)
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    null = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
    here = os.getcwd()  # (a supervisor, one run each, starts its command from the run's directory)
    try:
        start = spawn.start if way == "popen" else spawn._fork
        pid = start(argv, (null, out_w, err_w), cwd, env if env is not None else dict(os.environ), (None, None, None), False)
    finally:
        os.chdir(here)
        for fd in (null, out_w, err_w):
            os.close(fd)
    with os.fdopen(out_r, "rb") as out, os.fdopen(err_r, "rb") as err:
        stdout, stderr = out.read(), err.read()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), stdout, stderr


@pytest.mark.parametrize("way", WAYS)
def test_a_command_gets_its_stdio_cwd_environment_and_session(tmp_path: Path, way: str) -> None:
    code, out, err = _run(
        ["/bin/sh", "-c", 'pwd; echo "$X"; echo oops >&2; ps -o sid= -p $$; echo $$; exit 3'],
        str(tmp_path),
        {"X": "y", "PATH": "/usr/bin:/bin"},
        way,
    )
    lines = out.decode().split()
    assert code == 3 and err == b"oops\n"
    assert lines[:2] == [str(tmp_path), "y"]
    assert lines[2] == lines[3]  # a session of its own: its sid is its pid


@pytest.mark.parametrize("way", WAYS)
def test_the_program_is_found_through_the_environments_path(tmp_path: Path, way: str) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "bin").mkdir()
    tool = tmp_path / "bin" / "mytool"
    tool.write_text("#!/bin/sh\necho found $0\n")
    tool.chmod(0o755)
    env = {"PATH": f"{tmp_path / 'missing'}:{tmp_path / 'empty'}:{tmp_path / 'bin'}"}
    assert _run(["mytool"], "/", env, way) == (0, f"found {tool}\n".encode(), b"")


@pytest.mark.parametrize("way", WAYS)
def test_what_cannot_start_raises_what_popen_raises(tmp_path: Path, way: str) -> None:
    plain = tmp_path / "plain"
    plain.write_text("not a program")
    cases = [
        (["no-such-command-here"], "/", "no-such-command-here"),
        ([str(tmp_path / "nothing")], "/", str(tmp_path / "nothing")),
        ([str(plain)], "/", str(plain)),
        (["true"], str(tmp_path / "no-dir"), str(tmp_path / "no-dir")),
        (["true"], str(plain), str(plain)),
    ]
    for argv, cwd, _ in cases:
        with pytest.raises(OSError) as ours:
            _run(argv, cwd, {"PATH": "/usr/bin:/bin"}, way)
        with pytest.raises(OSError) as theirs:
            subprocess.Popen(argv, cwd=cwd, env={"PATH": "/usr/bin:/bin"}, stdout=subprocess.DEVNULL)
        assert (type(ours.value), ours.value.errno, ours.value.filename) == (
            type(theirs.value),
            theirs.value.errno,
            theirs.value.filename,
        ), argv
    # and the agent's words for them
    with pytest.raises(OSError) as exc:
        _run(["true"], str(tmp_path / "no-dir"), way=way)
    assert spawn.spawn_failure(exc.value, "true", str(tmp_path / "no-dir")) == (
        126,
        f"working directory {tmp_path / 'no-dir'} does not exist",
    )
    with pytest.raises(OSError) as exc:
        _run(["no-such-command-here"], "/", way=way)
    assert spawn.spawn_failure(exc.value, "no-such-command-here", "/") == (127, "command not found: no-such-command-here")


@pytest.mark.parametrize("way", WAYS)
def test_no_other_descriptor_reaches_the_command_and_signals_are_at_their_default(way: str) -> None:
    keep = os.open("/dev/null", os.O_RDONLY)  # inheritable, not the command's
    os.set_inheritable(keep, True)
    old = signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    try:
        code, out, _ = _run(["/bin/sh", "-c", "ls /proc/self/fd; echo --; grep SigIgn /proc/self/status"], way=way)
    finally:
        signal.signal(signal.SIGPIPE, old)
        os.close(keep)
    listed, status = out.decode().split("--")
    assert code == 0 and sorted(int(x) for x in listed.split()) == [0, 1, 2, 3]  # 3: ls's own directory
    ignored = int(status.split("SigIgn:")[1].split()[0], 16)
    assert not ignored & (1 << (signal.SIGPIPE - 1))


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root (the sandbox's root in its namespace)")
def test_a_run_as_another_user_gets_its_ids_and_groups() -> None:
    out_r, out_w = os.pipe2(os.O_CLOEXEC)
    null = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
    pid = spawn.start(
        ["/bin/sh", "-c", "id -u; id -g; id -G"],
        (null, out_w, out_w),
        "/",
        {"PATH": "/usr/bin:/bin"},
        (65534, 65533, [65533, 4242]),
        False,
    )
    os.close(out_w)
    os.close(null)
    with os.fdopen(out_r) as f:
        assert f.read().split() == ["65534", "65533", "65533", "4242"]
    assert os.waitpid(pid, 0)[1] == 0


def test_the_agents_start_imports_nothing_heavy() -> None:
    if not shutil.which(PYTHON):
        pytest.skip("no python3 to run the agent under")
    code = (
        f"import sys; base = set(sys.modules); sys.path.insert(0, {str(AGENT.parent)!r});"
        " import agent.server; print(sorted(set(sys.modules) - base))"
    )
    loaded = ast.literal_eval(subprocess.run([PYTHON, "-I", "-S", "-c", code], capture_output=True, text=True, check=True).stdout)
    heavy = (
        "subprocess",
        "json",
        "re",
        "enum",
        "socket",
        "signal",
        "threading",
        "contextlib",
        "collections",
        "array",
        "typing",
        "ctypes",
    )
    assert [m for m in loaded if m.split(".")[0] in heavy] == []
