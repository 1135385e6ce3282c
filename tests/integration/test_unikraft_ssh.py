"""The SSH path of unikraft sandboxes end to end: a real daemon, the CLI, and the spec-built
test server, whose SSH front (TLS-wrapped, SNI-routed) runs the session's command in the
instance's real local sandbox."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import Daemon, hutch_env
from tests.integration.ukc_support import ACCOUNT, SPECS, TOKEN, TestServer, validate_log

from hutch import wire
from hutch.wire.pydantic import adapter

pytest.importorskip("asyncssh")
pytestmark = [pytest.mark.integration, pytest.mark.skipif(not SPECS.is_dir(), reason=f"no specs at {SPECS}")]


@pytest.fixture(scope="module")
def ukc() -> Iterator[TestServer]:
    ts = TestServer()
    try:
        assert ts.ssh_address and ts.ca_file, "the test server started without its SSH front"
        yield ts
    finally:
        ts.stop()


def settings(ts: TestServer) -> dict[str, str]:
    return {
        "HUTCH_UNIKRAFT_TOKEN": TOKEN,
        "UKC_METRO": ts.url,
        "HUTCH_UNIKRAFT_READY_TIMEOUT": "3",
        "HUTCH_UNIKRAFT_SSH_CONNECT": ts.ssh_address,
        "HUTCH_UNIKRAFT_CA_FILE": ts.ca_file,
    }


def hutch(home: Path, ts: TestServer, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hutch", *args],
        env=hutch_env(home, **(settings(ts) | extra)),
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )


def js(proc: subprocess.CompletedProcess[str]) -> Any:
    assert proc.stdout.strip(), proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def ukd(hutch_home: Path, ukc: TestServer) -> Iterator[Daemon]:
    own = {k: v for k, v in settings(ukc).items() if k not in ("HUTCH_UNIKRAFT_TOKEN", "UKC_METRO")}
    d = Daemon(hutch_home, **own).start()  # the token and metro come with each command
    try:
        yield d
    finally:
        hutch(hutch_home, ukc, "destroy", "--all")
        hutch(hutch_home, ukc, "cleanup", "--provider", "unikraft")
        d.stop()


def test_create_ssh_exec_pin_and_destroy(ukd: Daemon, ukc: TestServer) -> None:
    home = ukd.home
    ukc.reset_log()
    rec = adapter(wire.SandboxRecord).validate_python(
        js(hutch(home, ukc, "create", "--provider", "unikraft", "--ssh", "--name", "s1", "--json"))
    )
    keys = home / "ssh" / rec["id"]
    key = keys / "id_ed25519"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and stat.S_IMODE(keys.stat().st_mode) == 0o700
    assert rec["ssh"]["port"] == 2222 and rec["ssh"]["fqdn"].endswith(".ukc.test")
    inst = next(i for i in ukc.state()["instances"] if i["account"] == ACCOUNT and rec["ssh"]["fqdn"].startswith(i["name"]))
    public = (keys / "id_ed25519.pub").read_text().strip()
    assert inst["env"]["SSH_AUTHORIZED_KEYS"] == public and public.startswith("ssh-ed25519 ")
    create = next(e for e in ukc.state()["log"] if e["method"] == "POST" and e["path"] == "/v1/instances")
    assert create["body"]["service_group"] == {"services": [{"port": 2222, "destination_port": 2222, "handlers": ["tls"]}]}
    assert validate_log(ukc.state()["log"]) >= 2  # the create with its service group, against platform.yaml
    assert "ssh:       enabled" in hutch(home, ukc, "get", "s1").stdout

    # a command runs in the instance's sandbox: output, exit code and the instance env
    p = hutch(home, ukc, "ssh", "s1", "--", "sh", "-c", "echo hi; echo oops >&2; exit 3")
    assert (p.returncode, p.stdout, p.stderr) == (3, "hi\n", "oops\n")
    hutch(home, ukc, "exec", "s1", "--", "sh", "-c", "echo made-by-exec > /tmp/mark")
    out = js(hutch(home, ukc, "ssh", "s1", "--json", "--", "cat", "/tmp/mark"))
    assert (out["exit_code"], out["stdout"]) == (0, "made-by-exec\n")

    # piped stdin reaches the command: a tar stream into the sandbox
    src = home / "tree"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "f.bin").write_bytes(bytes(range(256)) * 64)
    tar = subprocess.run(["tar", "c", "-C", str(src), "."], capture_output=True, check=True).stdout
    p = subprocess.run(
        [sys.executable, "-m", "hutch", "ssh", "s1", "--", "sh", "-c", "mkdir -p /tmp/t && tar x -C /tmp/t && echo ok"],
        env=hutch_env(home, **settings(ukc)),
        input=tar,
        capture_output=True,
        timeout=180,
    )
    assert (p.returncode, p.stdout) == (0, b"ok\n"), p.stderr
    out = js(hutch(home, ukc, "ssh", "s1", "--json", "--", "sha256sum", "/tmp/t/sub/f.bin"))
    assert out["stdout"].split()[0] == hashlib.sha256((src / "sub" / "f.bin").read_bytes()).hexdigest()

    # the host key is pinned on first use, and a different one is refused
    pin = keys / "known_host"
    pinned = pin.read_text()
    assert pinned.startswith("ssh-ed25519 ")
    assert hutch(home, ukc, "ssh", "s1", "--", "true").returncode == 0
    assert pin.read_text() == pinned
    pin.write_text((keys / "id_ed25519.pub").read_text())  # as if the server's key had changed
    p = hutch(home, ukc, "ssh", "s1", "--json", "--", "true")
    err = js(p)["error"]
    assert p.returncode != 0 and err["kind"] == "policy" and "changed" in err["message"] and str(pin) in err["hint"]
    pin.write_text(pinned)

    # a key the instance did not receive is refused by the server
    original = key.read_bytes()
    other = js(hutch(home, ukc, "create", "--provider", "unikraft", "--ssh", "--name", "s2", "--json"))
    key.write_bytes((home / "ssh" / other["id"] / "id_ed25519").read_bytes())
    p = hutch(home, ukc, "ssh", "s1", "--json", "--", "true")
    assert p.returncode != 0 and js(p)["error"]["kind"] == "policy", p.stdout
    key.write_bytes(original)
    assert hutch(home, ukc, "ssh", "s1", "--", "true").returncode == 0

    # destroy removes the key directory
    assert js(hutch(home, ukc, "destroy", "s1", "s2", "--json"))[0]["destroyed"]
    assert not keys.exists() and not (home / "ssh" / other["id"]).exists()


def test_bad_input(ukd: Daemon, ukc: TestServer) -> None:
    home = ukd.home
    p = hutch(home, ukc, "create", "--ssh", "--json")  # the local provider
    assert p.returncode == 2 and js(p)["error"]["kind"] == "invalid" and "--ssh" in js(p)["error"]["message"]
    assert not (home / "ssh").exists() or not any((home / "ssh").iterdir())
    plain = js(hutch(home, ukc, "create", "--provider", "unikraft", "--name", "plain", "--json"))
    p = hutch(home, ukc, "ssh", "plain", "--json", "--", "true")
    assert p.returncode == 2 and "not created with --ssh" in js(p)["error"]["message"]
    p = hutch(home, ukc, "ssh", plain["id"])  # no terminal and no command
    assert p.returncode == 2 and "no terminal" in p.stderr


def test_shell_on_a_terminal(ukd: Daemon, ukc: TestServer) -> None:
    import os
    import select

    home = ukd.home
    js(hutch(home, ukc, "create", "--provider", "unikraft", "--ssh", "--name", "tty1", "--json"))
    main, sub = os.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "hutch", "ssh", "tty1"],
        env=hutch_env(home, **settings(ukc)),
        stdin=sub,
        stdout=sub,
        stderr=sub,
    )
    os.close(sub)
    os.write(main, b"echo answer=$((6*7)); exit 4\n")
    seen = b""
    for _ in range(60):  # until the shell has exited and its output is read (a guard, not a timing)
        if select.select([main], [], [], 1)[0]:
            try:
                seen += os.read(main, 4096)
            except OSError:
                break
        elif proc.poll() is not None:
            break
    os.close(main)
    if proc.poll() is None:
        proc.kill()
    assert proc.wait(60) == 4, seen
    assert b"answer=42" in seen


def test_push_and_pull_go_over_ssh(ukd: Daemon, ukc: TestServer, tmp_path: Path) -> None:
    home = ukd.home
    js(hutch(home, ukc, "create", "--provider", "unikraft", "--ssh", "--name", "p1", "--json"))
    src = tmp_path / "src"
    (src / "bin").mkdir(parents=True)
    (src / "README").write_text("hello over ssh\n")
    (src / "bin" / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (src / "bin" / "run.sh").chmod(0o755)
    (src / "link").symlink_to("README")
    pushed = js(hutch(home, ukc, "push", "p1", str(src), "--json"))
    assert pushed["files_sent"] == 3
    out = js(hutch(home, ukc, "exec", "--json", "p1", "--", "sh", "-c", "cat README; ./bin/run.sh; readlink link"))
    assert out["stdout"] == "hello over ssh\nran\nREADME\n"
    assert js(hutch(home, ukc, "push", "p1", str(src), "--json"))["files_sent"] == 0  # nothing changed
    hutch(home, ukc, "exec", "p1", "--", "sh", "-c", "echo made inside > made.txt")
    dest = tmp_path / "dest"
    pulled = hutch(home, ukc, "pull", "p1", str(dest), "--json")
    assert pulled.returncode == 0, pulled.stdout + pulled.stderr
    assert (dest / "made.txt").read_text() == "made inside\n" and (dest / "README").read_text() == "hello over ssh\n"
    assert stat.S_IMODE((dest / "bin" / "run.sh").stat().st_mode) == 0o755 and os.readlink(dest / "link") == "README"
    # --delete removes what a push sent and the tree no longer has
    (src / "README").unlink()
    js(hutch(home, ukc, "push", "p1", str(src), "--delete", "--force", "--json"))
    assert js(hutch(home, ukc, "exec", "--json", "p1", "--", "ls"))["stdout"].split() == ["bin", "link", "made.txt"]
    # without --ssh there is no way in: a clear error, nothing sent
    js(hutch(home, ukc, "create", "--provider", "unikraft", "--name", "p2", "--json"))
    refused = hutch(home, ukc, "push", "p2", str(src), "--json")
    err = json.loads(refused.stdout)["error"]
    assert refused.returncode != 0 and err["kind"] == "invalid" and "--ssh" in err["message"] and err["hint"]
    snap = json.loads(hutch(home, ukc, "snapshot", "save", "p1", "nope", "--json").stdout)["error"]
    assert snap["kind"] == "invalid"  # snapshots stay local-only
