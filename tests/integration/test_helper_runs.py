"""A plain run is the same whichever supervisor runs it: the idle helper's own (hold.c, holdsup.c)
or the Python agent's (the setting idle_agent = python). Each case runs under both, on real
sandboxes, and every field a user sees is compared; the helper's side is checked to be the
helper's (the command's parent is /.hutch/hold), so neither side can pass by being the other."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import Daemon, hutch_env, serving

from hutch import Sandbox

SETUP = (
    "printf 'echo never\\n' > /workspace/noexec; "
    "printf '#!/nonexistent/interp\\necho no\\n' > /workspace/badshebang; chmod +x /workspace/badshebang; "
    "mkdir -p /workspace/sub; echo inside > /workspace/sub/file"
)

CASES: list[tuple[str, list[str], dict[str, Any]]] = [
    ("exit code and both streams", ["sh", "-c", "echo out; echo err >&2; exit 3"], {}),
    ("not found", ["no-such-command"], {}),
    ("missing working directory", ["true"], {"cwd": "/no/such/dir"}),
    ("working directory is a file", ["true"], {"cwd": "/workspace/noexec"}),
    ("not executable", ["/workspace/noexec"], {}),
    ("missing interpreter", ["/workspace/badshebang"], {}),
    ("relative program in a working directory", ["cat", "file"], {"cwd": "/workspace/sub"}),
    ("environment layers", ["sh", "-c", "echo $BASE $OWN $PATH_SEEN"], {"env": {"OWN": "run's", "BASE": "overridden"}}),
    ("input", ["sh", "-c", "cat; echo; cat | wc -c"], {"stdin": "line one\nline two"}),
    ("unicode", ["printf", "%s|%s", "héllo ✓", "𝄞 \u00a0tab\there"], {}),
    ("killed by a signal", ["sh", "-c", "kill -TERM $$"], {}),
    ("timeout", ["sh", "-c", "echo before; sleep 30"], {"timeout": 1}),
    ("idle timeout", ["sh", "-c", "echo once; sleep 30"], {"idle_timeout": 1}),
    ("descendant holding the pipes", ["sh", "-c", "(sleep 5; echo late) & echo now"], {}),
    ("output past max_output", ["sh", "-c", "head -c 300000 /dev/zero | tr '\\0' x"], {"max_output": 1000}),
    ("signals reset", ["sh", "-c", "grep -E '^Sig(Ign|Blk)' /proc/self/status"], {}),
    (
        "session and descriptors",
        ["sh", "-c", "ls /proc/self/fd | wc -l; ps -o sid= -p $$ 2>/dev/null || cat /proc/self/stat"],
        {},
    ),
]


SECRETS = {"TOKEN": "s3cret-value", "LONGER": "s3cret-value-2", "SHORT": "abc"}
SECRET_CASES: list[tuple[str, list[str], dict[str, Any]]] = [
    ("secret in output", ["sh", "-c", "echo $TOKEN; echo $LONGER >&2; echo $SHORT"], {}),
    ("secret split across writes", ["sh", "-c", "printf 'a s3cr'; sleep 0.3; printf 'et-value b\\n'"], {}),
    ("a prefix of a secret at the end", ["printf", "tail s3cret-va"], {}),
    ("the run's own secret", ["sh", "-c", "echo $RUNSEC $TOKEN"], {"secrets": {"RUNSEC": "run-only-secret"}}),
    ("no redaction asked", ["sh", "-c", "echo $TOKEN"], {"redact": False}),
    ("secrets through a lot of output", ["sh", "-c", 'for i in $(seq 3000); do echo "$i $TOKEN"; done'], {}),
]


def seen(r: Any) -> dict[str, Any]:
    out = {k: getattr(r, k) for k in ("exit_code", "status", "stdout", "stderr", "truncated", "signal", "error")}
    out["stdout_bytes"], out["stderr_bytes"] = r.stdout_bytes, r.stderr_bytes
    return out


def normal(name: str, result: dict[str, Any]) -> dict[str, Any]:
    if name == "session and descriptors":  # the session id is a pid: only its being the command's own matters
        lines = str(result["stdout"]).splitlines()
        result["stdout"] = lines[0]
    return result


def outcomes(agent: str) -> dict[str, dict[str, Any]]:
    home = Path(tempfile.mkdtemp(prefix="hutch-test-"))  # (not pytest's 0700 tmp: sandboxes' uids enter it)
    found: dict[str, dict[str, Any]] = {}
    try:
        with serving(home, HUTCH_IDLE_AGENT=agent, HUTCH_POOL_SIZE="0") as daemon:
            sbx = Sandbox.create(settings=daemon.settings, env={"BASE": "sandbox's", "PATH_SEEN": "yes"})
            assert sbx.exec(["sh", "-c", SETUP]).exit_code == 0
            for name, argv, options in CASES:
                found[name] = normal(name, seen(sbx.exec(argv, **options)))
            found["supervisor"] = {"parent": sbx.exec(["sh", "-c", "tr '\\0' ' ' < /proc/$PPID/cmdline"]).stdout}
            secret = Sandbox.create(settings=daemon.settings, secrets=SECRETS)
            for name, argv, options in SECRET_CASES:
                found[name] = seen(secret.exec(argv, **options))
            found["supervisor"]["with secrets"] = secret.exec(["sh", "-c", "tr '\\0' ' ' < /proc/$PPID/cmdline"]).stdout
            # input arriving while it runs (hutch run with a pipe; the E2B API's commands): more than a pipe holds
            env = hutch_env(home, HUTCH_IDLE_AGENT=agent)
            piped = [sys.executable, "-m", "hutch", "run", "--", "sh", "-c", "wc -c; tr '\\0' ' ' < /proc/$PPID/cmdline"]
            done = subprocess.run(piped, input=b"x" * 300_000, env=env, capture_output=True, timeout=120, check=False)
            counted, _, parent = done.stdout.decode().partition("\n")
            found["interactive input"] = {"code": done.returncode, "counted": counted.strip(), "stderr": done.stderr.decode()}
            found["supervisor"]["interactive parent"] = parent
    finally:
        subprocess.run(["rm", "-rf", str(home)], check=False)
    return found


@pytest.fixture(scope="module")
def both() -> dict[str, dict[str, dict[str, Any]]]:
    return {agent: outcomes(agent) for agent in ("native", "python")}


def test_the_helper_supervised_one_side_and_the_agent_the_other(both: dict[str, dict[str, dict[str, Any]]]) -> None:
    for key in ("parent", "interactive parent", "with secrets"):
        assert str(both["native"]["supervisor"][key]).startswith("/.hutch/hold "), both["native"]["supervisor"]
        python = str(both["python"]["supervisor"][key])
        assert "/.hutch/agent" in python and not python.startswith("/.hutch/hold"), python


def test_input_arriving_while_it_runs_is_the_same_under_both(both: dict[str, dict[str, dict[str, Any]]]) -> None:
    assert both["native"]["interactive input"] == both["python"]["interactive input"]
    assert both["native"]["interactive input"] == {"code": 0, "counted": "300000", "stderr": ""}


@pytest.mark.parametrize("name", [name for name, _, _ in CASES + SECRET_CASES])
def test_a_plain_run_is_the_same_under_both_supervisors(name: str, both: dict[str, dict[str, dict[str, Any]]]) -> None:
    assert both["native"][name] == both["python"][name]


def test_the_cases_say_what_they_should(both: dict[str, dict[str, dict[str, Any]]]) -> None:
    """The comparison above is only worth something if the cases do what they are named for."""
    got = both["native"]
    assert (got["exit code and both streams"]["exit_code"], got["exit code and both streams"]["stderr"]) == (3, "err\n")
    assert got["not found"]["exit_code"] == 127 and "command not found" in str(got["not found"]["error"])
    assert got["missing working directory"]["exit_code"] == 126 and "does not exist" in str(
        got["missing working directory"]["error"]
    )
    assert "not a directory" in str(got["working directory is a file"]["error"])
    assert "permission denied" in str(got["not executable"]["error"])
    assert "interpreter" in str(got["missing interpreter"]["error"])
    assert got["relative program in a working directory"]["stdout"] == "inside\n"
    assert got["environment layers"]["stdout"] == "overridden run's yes\n"
    assert got["input"]["stdout"] == "line one\nline two\n0\n"  # all of it, then its end
    assert got["unicode"]["stdout"] == "héllo ✓|𝄞 \u00a0tab\there"
    assert got["killed by a signal"]["exit_code"] == 143
    assert got["timeout"]["stdout"] == "before\n" and got["timeout"]["status"] != "completed"
    assert got["idle timeout"]["stdout"] == "once\n" and got["idle timeout"]["status"] != "completed"
    assert got["descendant holding the pipes"]["stdout"] == "now\n"
    assert got["output past max_output"]["truncated"] and got["output past max_output"]["stdout_bytes"] == 300000
    assert "SigIgn:\t0000000000000000" in str(got["signals reset"]["stdout"])
    assert got["secret in output"]["stdout"] == "[redacted:TOKEN]\nabc\n"  # (3 bytes: too short to look for)
    assert got["secret in output"]["stderr"] == "[redacted:LONGER]\n"  # the longest value first
    assert got["secret split across writes"]["stdout"] == "a [redacted:TOKEN] b\n"
    assert got["a prefix of a secret at the end"]["stdout"] == "tail s3cret-va"  # held back, then given at the end
    assert got["the run's own secret"]["stdout"] == "[redacted:RUNSEC] [redacted:TOKEN]\n"
    assert got["no redaction asked"]["stdout"] == "s3cret-value\n"
    lots = str(got["secrets through a lot of output"]["stdout"])
    assert lots.count("[redacted:TOKEN]") == 3000 and "s3cret" not in lots


def test_a_helper_run_survives_the_daemon_and_is_adopted(hutch_home: Path) -> None:
    daemon = Daemon(hutch_home, HUTCH_POOL_SIZE="0").start()
    try:
        sbx = Sandbox.create(settings=daemon.settings)
        run = sbx.exec(["sh", "-c", "echo start; sleep 3; echo end"], background=True)
        time.sleep(0.5)
        daemon.kill9()
        daemon.start()
        again = Sandbox.connect(sbx.id, settings=daemon.settings)
        result = again.runs.get(run.id).wait(timeout=60)
        assert (result.exit_code, result.stdout) == (0, "start\nend\n")
        parent = again.exec(["sh", "-c", "tr '\\0' ' ' < /proc/$PPID/cmdline"]).stdout
        assert parent.startswith("/.hutch/hold "), parent
        again.destroy()
    finally:
        daemon.stop()


HOSTILE = r"""
import os, socket, struct
path = "/.hutch/ctl/exec.sock"
def send(data, fds=None):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(15)
    try:
        s.connect(path)
        if fds:
            socket.send_fds(s, [data], fds)
        else:
            s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        while s.recv(65536):
            pass
    except OSError:
        pass
    finally:
        s.close()
def frame(body, kind=b"J"):
    return struct.pack(">I", len(body)) + kind + body
r, w = os.pipe()
junk = [
    b"", b"\x00", b"\xff\xff\xff\xffJ", frame(b"{", b"J"), frame(b"not json"), frame(b'{"type":"exec"}'),
    frame(b'{"type":"exec","run_id":"run_x","argv":[],"redact":{}}'),
    frame(b'{"type":"exec","run_id":"../../etc","argv":["true"],"redact":{}}'),
    frame(b'{"type":"exec","run_id":"run_y","argv":["\\ud800"],"redact":{}}'),
    frame(b'{"type":"exec","run_id":"run_z","argv":["true"],"env":{"A=B":"c"},"redact":{}}'),
    frame(b'{"type":"exec","run_id":"run_w","argv":[' + b'"a",' * 20000 + b'"b"],"redact":{}}'),
    frame(b"x" * 1000, b"Q"),
]
for i, data in enumerate(junk):
    send(data, [r] if i % 2 else None)
print("sent", len(junk))
"""


def test_junk_on_the_exec_socket_from_inside_leaves_the_sandbox_serving(hutch_home: Path) -> None:
    """The workload can reach the helper's sockets (the same uid): whatever it sends, pid 2 (the
    sandbox's life: the helper, or the agent it hands a request it does not understand to) stays
    the same process and serves the daemon's next run; no run directory escapes /.hutch/runs."""
    born = ["sh", "-c", "cut -d' ' -f22 /proc/2/stat"]  # its start time: an execve keeps it
    with serving(hutch_home, HUTCH_POOL_SIZE="0") as daemon:
        sbx = Sandbox.create(settings=daemon.settings)
        before = sbx.exec(born).stdout
        r = sbx.exec(["python3", "-c", HOSTILE], timeout=120)
        assert r.exit_code == 0 and r.stdout == "sent 12\n", r.stdout + r.stderr
        again = sbx.exec(["sh", "-c", "echo fine; ls -a /.hutch/runs/.. /etc | grep -c '^run_' || true"])
        assert again.exit_code == 0 and again.stdout == "fine\n0\n", again.stdout + again.stderr
        assert sbx.exec(born).stdout == before
