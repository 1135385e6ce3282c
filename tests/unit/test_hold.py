"""The idle helper (hold.c): built once per source and machine, checked before use, the Python
agent when it cannot be; and the real binary speaking the agent protocol, then handing over
to its agent in place (a stand-in agent here, which reports what it was given)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from hutch.providers.local import hold
from hutch.providers.local.agent import wire

# What the helper execs in these tests: it reports its pid, argv and what --held= gave it, answers
# the handed-over connection (or accepts the one waiting on exec.sock), and exits.
STAND_IN = textwrap.dedent(
    """
    import json, os, socket, sys
    held = [int(x) for x in sys.argv[-1].removeprefix("--held=").split(",")]
    agent, exec_fd, state, conn, pending, listener, stdin, runs = held
    def read_all(fd):
        os.lseek(fd, 0, os.SEEK_SET)
        out = b""
        while chunk := os.read(fd, 65536):
            out += chunk
        return out
    report = {"pid": os.getpid(), "argv": sys.argv[1:], "state": read_all(state).hex(),
              "inheritable": [os.get_inheritable(fd) for fd in (agent, exec_fd)]}
    if listener >= 0:
        report["listener"] = socket.socket(fileno=listener).getsockname()[1]
    if runs >= 0:
        report["runs"] = read_all(runs).decode()
    if stdin >= 0:  # an exec the helper hands over: the connection, what it read, the run's stdin
        report["pending"] = read_all(pending).hex()
        report["stdin"] = os.read(stdin, 100).decode()
        socket.socket(fileno=conn).sendall(b"handed over")
    elif conn >= 0:
        report["pending"] = read_all(pending).hex()
        body = json.dumps({"type": "ok", "from": "agent"}).encode()
        socket.socket(fileno=conn).sendall(len(body).to_bytes(4, "big") + b"J" + body)
    else:
        sock = socket.socket(fileno=exec_fd)
        sock.setblocking(True)
        taken, _ = sock.accept()
        report["exec"] = taken.recv(100).decode()
    with open(os.environ["REPORT"], "w") as f:
        json.dump(report, f)
    """
)


def built(home: Path) -> str:
    if not any(shutil.which(cc) for cc, _ in hold.COMPILERS):
        pytest.skip("no C compiler here: the fallback is what test_no_compiler_means_the_python_agent tests")
    found = hold.prepare(home)
    assert found.path is not None, found.detail
    return found.path


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    hold.forget()
    yield
    hold.forget()


def test_built_once_per_source_and_checked(tmp_path: Path) -> None:
    (tmp_path / "hold").mkdir()
    (tmp_path / "hold" / "hold-0123456789abcdef-x86_64").write_bytes(b"an earlier source's")
    path = built(tmp_path)
    assert [p.name for p in (tmp_path / "hold").iterdir()] == [Path(path).name]  # the earlier one pruned
    assert Path(path).name == f"hold-{hold.source_key()}-{os.uname().machine}"
    assert hold.answers(Path(path), hold.source_key())
    assert Path(path).stat().st_mode & 0o777 == 0o755 and (tmp_path / "hold").stat().st_mode & 0o777 == 0o711
    assert not [p for p in (tmp_path / "hold").iterdir() if p.name.startswith(".build-")]  # no temporary left
    mtime = Path(path).stat().st_mtime_ns
    hold.forget()
    assert hold.prepare(tmp_path).path == path and Path(path).stat().st_mtime_ns == mtime  # reused, not rebuilt
    check = hold.check(tmp_path, "native")
    assert check.ok and "native helper" in check.detail and path in check.detail and check.fix is None


@pytest.mark.parametrize("damage", [b"", b"\x7fELF\x02\x01\x01 cut short", b"#!/bin/sh\necho hutch-hold 0000\n"])
def test_a_damaged_cached_binary_is_built_again(tmp_path: Path, damage: bytes) -> None:
    path = Path(built(tmp_path))
    hold.forget()  # another daemon, later
    path.write_bytes(damage)
    path.chmod(0o755)
    again = hold.prepare(tmp_path)
    assert again.path == str(path)
    assert path.read_bytes() != damage and hold.answers(path, hold.source_key())


def test_no_compiler_means_the_python_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    found = hold.prepare(tmp_path / "home")
    assert found.path is None and "no C compiler" in found.detail
    check = hold.check(tmp_path / "home", "native")
    assert check.ok and "the Python agent" in check.detail and "no C compiler" in check.detail
    assert check.fix is not None and "musl-tools" in check.fix


def test_a_failing_build_means_the_python_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = tmp_path / "bin"
    broken.mkdir()
    for name in ("musl-gcc", "cc", "gcc"):
        (broken / name).write_text("#!/bin/sh\necho 'cc: internal error' >&2\nexit 1\n")
        (broken / name).chmod(0o755)
    monkeypatch.setenv("PATH", str(broken))
    found = hold.prepare(tmp_path / "home")
    assert found.path is None and "internal error" in found.detail
    assert not [p for p in (tmp_path / "home" / "hold").iterdir()]  # nothing half-built left


def test_the_setting_python_turns_it_off(tmp_path: Path) -> None:
    assert hold.prepare(tmp_path, "python").path is None
    check = hold.check(tmp_path, "python")
    assert "setting idle_agent = python" in check.detail and check.fix is None
    assert not (tmp_path / "hold").exists()


# -- the binary itself ---------------------------------------------------------------------


def request(path: Path, msg: dict[str, object]) -> tuple[dict[str, object] | None, list[int]]:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(30)
        s.connect(str(path))
        s.sendall(wire.message(msg))
        data, fds, _, _ = socket.recv_fds(s, 65536, 2)
        while len(data) < 5 or len(data) < 5 + int.from_bytes(data[:4], "big"):
            more = s.recv(65536)
            if not more:
                return None, fds
            data += more
        return wire.decode(data[5:]), fds


class Helper:
    def __init__(self, path: str, tmp: Path) -> None:
        self.ctl = tmp / "ctl"
        self.ctl.mkdir()
        self.report = tmp / "report.json"
        (tmp / "agent.py").write_text(STAND_IN)
        ready_r, ready_w = os.pipe()
        argv = [path, "7", str(self.ctl / "agent.sock"), str(ready_w), "--", sys.executable, "-I", str(tmp / "agent.py")]
        env = {"PATH": os.environ.get("PATH", ""), "REPORT": str(self.report)}
        self.proc = subprocess.Popen(argv, pass_fds=[ready_w], env=env, stderr=subprocess.PIPE)
        os.close(ready_w)
        with os.fdopen(ready_r, "rb") as r:
            assert r.read(6) == b"ready\n"
        self.sock = self.ctl / "agent.sock"

    def result(self) -> dict[str, object]:
        assert self.proc.wait(60) == 0, self.proc.stderr.read() if self.proc.stderr else ""
        return dict(json.loads(self.report.read_text()))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def test_the_helper_answers_what_an_idle_sandbox_is_asked(tmp_path: Path) -> None:
    helper = Helper(built(tmp_path / "home"), tmp_path)
    try:
        assert oct(os.stat(helper.sock).st_mode & 0o777) == "0o600" and (helper.ctl / "exec.sock").exists()
        assert request(helper.sock, {"type": "ping"})[0] == {"type": "ok", "pid": helper.proc.pid, "protocol": 7}
        assert request(helper.sock, {"type": "runs"})[0] == {"type": "ok", "alive": []}
        first = {"type": "configure", "env": {"A": '1 "quoted" {x}'}, "secrets": {"S": "v"}, "spare_idle": 5}
        second = {"spare_idle": 9, "env": {"B": "2"}, "type": "configure"}  # the type need not come first
        assert request(helper.sock, first)[0] == {"type": "ok"}
        assert request(helper.sock, second)[0] == {"type": "ok"}
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()
        reply, fds = request(helper.sock, {"type": "listen", "port": port})
        assert reply == {"type": "ok"} and len(fds) == 1
        listener = socket.socket(fileno=fds[0])
        assert listener.getsockname() == ("127.0.0.1", port)
        again, more = request(helper.sock, {"type": "listen", "port": port})  # the same one, kept
        assert again == {"type": "ok"} and socket.socket(fileno=more[0]).getsockname()[1] == port
        # what breaks the protocol ends that connection only
        for junk in (b"\x00\x00\x00\x02Jxx", b"\x7f\xff\xff\xffJ", b"\x00\x00\x00\x05Jnull!", b"\x00\x00\x00\x02J{}"):
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(str(helper.sock))
                s.sendall(junk)
                s.settimeout(30)
                assert s.recv(10) == b""
        assert request(helper.sock, {"type": "ping"})[0] == {"type": "ok", "pid": helper.proc.pid, "protocol": 7}
        # anything else: the agent, in place, with the request it read, the state and the listener
        ps = {"type": "ps"}
        assert request(helper.sock, ps)[0] == {"type": "ok", "from": "agent"}
        got = helper.result()
        assert got["pid"] == helper.proc.pid  # execve: the same process
        assert got["argv"][:2] == [str(helper.sock), "-1"] and str(got["argv"][2]).startswith("--held=")
        assert got["inheritable"] == [True, True]  # (the agent makes them its own: non-inheritable)
        assert bytes.fromhex(str(got["state"])) == wire.message(first) + wire.message(second)
        assert bytes.fromhex(str(got["pending"])) == wire.message(ps)
        assert got["listener"] == port
        listener.close()
    finally:
        helper.stop()


def exec_request(ctl: Path, req: dict[str, object], stdin: bytes) -> socket.socket:
    r, w = os.pipe()
    os.write(w, stdin)
    os.close(w)
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(30)
    s.connect(str(ctl / "exec.sock"))
    socket.send_fds(s, [wire.message(req)], [r])
    os.close(r)
    return s


def test_a_run_it_cannot_supervise_wakes_the_agent_with_the_connection(tmp_path: Path) -> None:
    helper = Helper(built(tmp_path / "home"), tmp_path)
    try:
        req = {"type": "exec", "run_id": "run_x", "argv": ["true"], "redact": {}, "tty": True}  # a terminal: the agent's
        with exec_request(helper.ctl, req, b"its input") as s:
            assert s.recv(100) == b"handed over"
        got = helper.result()
        assert got["pid"] == helper.proc.pid and bytes.fromhex(str(got["pending"])) == wire.message(req)
        assert got["stdin"] == "its input" and "runs" not in got
    finally:
        helper.stop()


def test_what_is_not_an_exec_request_is_refused_on_the_exec_socket(tmp_path: Path) -> None:
    helper = Helper(built(tmp_path / "home"), tmp_path)
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(30)
            s.connect(str(helper.ctl / "exec.sock"))
            s.sendall(wire.message({"type": "exec", "run_id": "run_x", "argv": ["true"]}))  # no stdin descriptor
            data = s.recv(65536)
        assert wire.decode(data[5:])["error"]["kind"] == "invalid"
        assert request(helper.sock, {"type": "ping"})[0] == {"type": "ok", "pid": helper.proc.pid, "protocol": 7}
    finally:
        helper.stop()


def test_the_user_switch_happens_before_the_sockets_are_made(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("switching users needs root")
    path = built(tmp_path / "home")
    top = Path(tempfile.mkdtemp(prefix="hutch-hold-"))  # (pytest's tmp_path is root's only)
    top.chmod(0o711)
    ctl = top / "ctl"
    ctl.mkdir()
    os.chown(ctl, 4242, 4242)
    ready_r, ready_w = os.pipe()
    argv = [path, "2", str(ctl / "agent.sock"), str(ready_w), "--user=4242:4243:4244:4245", "--", "/bin/true"]
    proc = subprocess.Popen(argv, pass_fds=[ready_w])
    os.close(ready_w)
    try:
        with os.fdopen(ready_r, "rb") as r:
            assert r.read(6) == b"ready\n"
        st = os.stat(ctl / "agent.sock")
        assert (st.st_uid, st.st_gid) == (4242, 4243)
        status = Path(f"/proc/{proc.pid}/status").read_text()
        assert "Uid:\t4242\t4242\t4242\t4242" in status and "Gid:\t4243\t4243\t4243\t4243" in status
        assert "Groups:\t4244 4245" in status and "CapEff:\t0000000000000000" in status
    finally:
        proc.kill()
        proc.wait(10)
        shutil.rmtree(top)
