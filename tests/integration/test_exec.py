"""The exec contract on a real sandbox: streams, stdin, env, cwd, caps, codes, CLI."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
from tests.conftest import Daemon, hutch_env

from hutch import AsyncSandbox, HutchError, Sandbox


@pytest.fixture
def sbx(daemon: Daemon) -> Sandbox:
    return Sandbox.create(env={"FROM_SPEC": "spec"}, settings=daemon.settings)


def test_separate_streams_and_exit_code(sbx: Sandbox) -> None:
    r = sbx.exec("echo out; echo err >&2; exit 7")
    assert (r.stdout, r.stderr, r.exit_code, r.status) == ("out\n", "err\n", 7, "failed")
    assert r.duration_ms > 0 and r.run_id.startswith("run_")
    assert not r.truncated


def test_argv_is_not_shell_interpreted(sbx: Sandbox) -> None:
    r = sbx.exec(["echo", "$HOME", "a;b", "*"])
    assert r.stdout == "$HOME a;b *\n"


def test_stdin_env_cwd(sbx: Sandbox) -> None:
    r = sbx.exec(["sh", "-c", "cat; echo $FROM_SPEC $ONLY_HERE; pwd"], stdin=b"piped\n", env={"ONLY_HERE": "x"}, cwd="/tmp")
    assert r.stdout == "piped\nspec x\n/tmp\n"
    r = sbx.exec(["sh", "-c", "echo ${ONLY_HERE:-unset}; env | grep -c HUTCH_HOME"])
    assert r.stdout.split()[0] == "unset"
    assert r.stdout.split()[1] == "0"  # the host environment never leaks in


def test_large_stdin(sbx: Sandbox) -> None:
    data = bytes(range(256)) * 4096  # 1 MiB, binary
    r = sbx.exec(["sha256sum"], stdin=data)
    import hashlib

    assert r.stdout.split()[0] == hashlib.sha256(data).hexdigest()


def test_output_cap_and_truncated(sbx: Sandbox) -> None:
    r = sbx.exec(["head", "-c", "300000", "/dev/zero"], max_output=1000)
    assert r.truncated
    assert len(r.stdout_raw) == 1000
    big = sbx.exec(["head", "-c", str(5 << 20), "/dev/urandom"])
    assert big.truncated and len(big.stdout_raw) == 1 << 20  # default cap 1 MiB
    assert big.exit_code == 0


def test_binary_output_round_trips(sbx: Sandbox) -> None:
    r = sbx.exec(["printf", "\\377\\000\\001"])
    assert r.stdout_raw == b"\xff\x00\x01"


def test_missing_and_unrunnable_commands(sbx: Sandbox) -> None:
    r = sbx.exec(["no-such-program"])
    assert r.exit_code == 127 and r.error
    sbx.files.write("noexec.sh", "#!/bin/sh\necho hi\n", mode=0o644)
    r = sbx.exec(["./noexec.sh"])
    assert r.exit_code == 126
    r = sbx.exec(["true"], cwd="/does/not/exist")
    assert r.exit_code == 126


def test_files_round_trip_and_errors(sbx: Sandbox) -> None:
    payload = bytes(range(256)) * 100
    sbx.files.write("dir/sub/data.bin", payload)
    assert sbx.files.read("/workspace/dir/sub/data.bin") == payload
    names = {f.name: f for f in sbx.files.list("dir/sub")}
    assert names["data.bin"].size == len(payload) and names["data.bin"].type == "file"
    with pytest.raises(HutchError) as err:
        sbx.files.read("missing.txt")
    assert err.value.kind == "not_found"
    with pytest.raises(HutchError) as err:
        sbx.files.write("/usr/bin/evil", "x")
    assert err.value.kind in ("permission_denied", "invalid")
    # a symlink to a host path resolves inside the sandbox, never on the host
    sbx.exec("ln -s /etc/shadow link")
    with pytest.raises(HutchError) as err:
        sbx.files.read("link")
    assert err.value.kind == "not_found"


def test_concurrent_execs(daemon: Daemon) -> None:
    async def go() -> list[int]:
        async with await AsyncSandbox.create(settings=daemon.settings) as s:
            results = await asyncio.gather(*(s.exec(["sh", "-c", f"sleep 0.2; exit {i}"]) for i in range(8)))
            return [r.exit_code for r in results]

    assert asyncio.run(go()) == list(range(8))


def _cli(daemon: Daemon, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "hutch", *args], env=hutch_env(daemon.home), input=stdin, capture_output=True, timeout=120
    )


def test_cli_exit_codes_and_json(daemon: Daemon) -> None:
    sid = _cli(daemon, "create", "--name", "cli1").stdout.decode().split()[0]
    assert sid.startswith("sbx_")
    assert _cli(daemon, "exec", "cli1", "--", "sh", "-c", "exit 42").returncode == 42
    r = _cli(daemon, "exec", "cli1", "--", "sh", "-c", "echo o; echo e >&2")
    assert (r.stdout, r.stderr) == (b"o\n", b"e\n")
    r = _cli(daemon, "exec", "--timeout", "0.5", "cli1", "--", "sleep", "10")
    assert r.returncode == 124 and b"timed out" in r.stderr
    r = _cli(daemon, "exec", "--json", "cli1", "--", "no-such-cmd")
    assert r.returncode == 127 and json.loads(r.stdout)["exit_code"] == 127
    r = _cli(daemon, "exec", "--json", "missing-sbx", "--", "true")
    assert r.returncode == 125
    assert json.loads(r.stdout)["error"]["kind"] == "not_found"
    r = _cli(daemon, "exec", "cli1", "echo $((6*7))")
    assert r.stdout == b"42\n"
    r = _cli(daemon, "write", "cli1", "in.txt", stdin=b"from stdin")
    assert r.returncode == 0
    assert _cli(daemon, "read", "cli1", "in.txt").stdout == b"from stdin"
    r = _cli(daemon, "exec", "--stdin-file", "-", "cli1", "--", "wc", "-c", stdin=b"12345")
    assert r.stdout.strip() == b"5"
    r = _cli(daemon, "get", "cli1", "--json")
    info = json.loads(r.stdout)
    assert info["spec"]["limits"]["memory"] == 1 << 30 and info["state"] == "running"
    r = _cli(daemon, "create", "--memory", "lots")
    assert r.returncode == 2 and b"invalid size" in r.stderr
    r = _cli(daemon, "run", "--memory", "64M", "--json", "--", "sh", "-c", "echo ran; exit 3")
    assert r.returncode == 3 and json.loads(r.stdout)["stdout"] == "ran\n"
    assert _cli(daemon, "destroy", "cli1", "cli1").returncode == 0
    listing = json.loads(_cli(daemon, "list", "--json").stdout)
    assert listing == []
