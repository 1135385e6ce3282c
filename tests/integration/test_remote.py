"""Remote access: a real daemon with ``hutch serve --listen 127.0.0.1:0 --token-file F``,
reached by the CLI and the SDK over TCP (plain on loopback, and TLS with a certificate
made here), with the token checked and never shown."""

from __future__ import annotations

import asyncio
import json
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import Daemon, destroy_all, hutch_env, sweep

from hutch import AsyncSandbox, Sandbox
from hutch.config import Settings
from hutch.errors import UnauthorizedError, UnavailableError


class RemoteDaemon(Daemon):
    """``hutch serve --json --listen ...``: its announce line says the port it got."""

    def __init__(self, home: Path, *args: str, **env: str) -> None:
        super().__init__(home, **env)
        self.args = args
        self.url = ""

    def start(self) -> RemoteDaemon:
        err = open(self.home / "test-daemon.log", "ab")  # noqa: SIM115 - owned by the child
        cmd = [sys.executable, "-m", "hutch", "serve", "--json", *self.args]
        self.proc = subprocess.Popen(cmd, env=self.env, stdout=subprocess.PIPE, stderr=err)
        err.close()
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("daemon did not start: " + (self.home / "test-daemon.log").read_text()[-2000:])
        self.url = json.loads(line)["listen"]
        return self


@pytest.fixture
def tmp() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="hutch-remote-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def token(tmp: Path) -> str:
    value = secrets.token_urlsafe(32)
    (tmp / "token").write_text(value + "\n")
    (tmp / "token").chmod(0o600)
    return value


def _run_daemon(home: Path, *args: str, **env: str) -> Iterator[RemoteDaemon]:
    d = RemoteDaemon(home, *args, **env).start()
    try:
        yield d
    finally:
        try:
            destroy_all(home)
        finally:
            d.stop()
            sweep(home)


@pytest.fixture
def remote(hutch_home: Path, tmp: Path, token: str) -> Iterator[RemoteDaemon]:
    yield from _run_daemon(hutch_home, "--listen", "127.0.0.1:0", "--token-file", str(tmp / "token"))


def cli(home: Path, *args: str, stdin: str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    """The CLI with a client home of its own: nothing local to fall back on."""
    return subprocess.run(
        [sys.executable, "-m", "hutch", *args],
        env=hutch_env(home, **env),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_over_tcp_with_a_token_file(remote: RemoteDaemon, tmp: Path, token: str) -> None:
    env = {"HUTCH_HOST": remote.url, "HUTCH_TOKEN_FILE": str(tmp / "token")}
    client_home = tmp / "client"
    outputs: list[str] = []

    def ok(*args: str, code: int = 0, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        r = cli(client_home, *args, stdin=stdin, **env)
        outputs.extend([r.stdout, r.stderr])
        assert r.returncode == code, r.stderr
        return r

    sid = json.loads(ok("create", "--json").stdout)["id"]
    assert [s["id"] for s in remote.client().list()] == [sid]  # made by the daemon behind the listener
    r = ok("exec", sid, "--", "sh", "-c", "echo out; echo err >&2; exit 3", code=3)
    assert r.stdout == "out\n" and r.stderr == "err\n"
    lines = [json.loads(x) for x in ok("exec", sid, "--stream", "--json", "--", "sh", "-c", "echo a; echo b").stdout.splitlines()]
    assert [e["data"] for e in lines if e.get("type") == "stdout"] in (["a\n", "b\n"], ["a\nb\n"])
    assert lines[-1]["exit_code"] == 0
    (tmp / "in.txt").write_text("over tcp\n")
    ok("write", sid, "/tmp/f.txt", "--from", str(tmp / "in.txt"))
    assert ok("read", sid, "/tmp/f.txt").stdout == "over tcp\n"
    r = ok("exec", "-i", sid, "--", "sh", "-c", "read x; echo got:$x; exit 5", stdin="typed\n", code=5)  # the WebSocket
    assert r.stdout == "got:typed\n"
    ok("destroy", sid)
    assert remote.client().list() == []
    assert not (client_home / "hutchd.sock").exists() and not (client_home / "hutchd.pid").exists()  # never auto-started
    assert all(token not in text for text in outputs)


@pytest.mark.parametrize("given", ["none", "wrong"])
def test_no_or_wrong_token_is_unauthorized_and_creates_nothing(remote: RemoteDaemon, tmp: Path, token: str, given: str) -> None:
    env = {"HUTCH_HOST": remote.url}
    if given == "wrong":
        (tmp / "wrong").write_text("not-the-token\n")
        env["HUTCH_TOKEN_FILE"] = str(tmp / "wrong")
    for args, code in ((["list", "--json"], 1), (["create", "--json"], 1), (["run", "--json", "--", "true"], 125)):
        r = cli(tmp / "client", *args, **env)
        assert r.returncode == code, (args, r.stdout, r.stderr)
        err = json.loads(r.stdout)["error"]
        assert err["kind"] == "unauthorized" and err["hint"]
        assert token not in r.stdout + r.stderr and "not-the-token" not in r.stdout + r.stderr
    r = cli(tmp / "client", "list", **env)
    assert r.returncode == 1 and "unauthorized" in r.stderr
    assert remote.client().list() == []
    assert remote.client().events(types=["sandbox_created"]) == []


def test_sdk_sync_and_async_over_tcp(remote: RemoteDaemon, tmp: Path, token: str) -> None:
    settings = Settings.load(home=tmp / "client", host=remote.url, token_file=str(tmp / "token"))
    sbx = Sandbox.create(settings=settings)
    try:
        assert sbx.exec(["sh", "-c", "echo hi; exit 4"]).exit_code == 4
        events = list(sbx.client.exec_stream(sbx.id, {"command": ["sh", "-c", "echo streamed"]}))  # NDJSON over TCP
        assert any(e.get("data") == "streamed\n" for e in events) and events[-1]["exit_code"] == 0
        sbx.files.write("/tmp/g.txt", "sdk\n")
        assert sbx.files.read_text("/tmp/g.txt") == "sdk\n"
        with sbx.pty(["sh", "-c", "read x; echo got:$x"]) as pty:  # the attach WebSocket, over TCP
            pty.send("abc\n")
            out = b""
            while b"got:abc" not in out:
                chunk = pty.read(timeout=30)
                assert chunk, out
                out += chunk
            assert pty.wait(30) == 0
    finally:
        sbx.destroy()

    async def run_async() -> None:
        box = await AsyncSandbox.create(settings=settings)
        try:
            assert (await box.exec(["echo", "async"])).stdout == "async\n"
            await box.files.write("/tmp/h.txt", b"a")
            assert await box.files.read("/tmp/h.txt") == b"a"
            pty = await box.pty(["sh", "-c", "echo tty"])
            assert await pty.wait(30) == 0
        finally:
            await box.destroy()
            await box.client.close()

    asyncio.run(run_async())
    assert remote.client().list() == []
    assert not (tmp / "client" / "hutchd.sock").exists()


def test_attach_with_a_wrong_token_is_refused(remote: RemoteDaemon, tmp: Path) -> None:
    from hutch.client import Client

    sbx = Sandbox.create(settings=remote.settings)
    with pytest.raises(UnauthorizedError):
        Sandbox.connect(sbx.id, settings=Settings.load(home=tmp / "client", host=remote.url))
    (tmp / "wrong").write_text("nope\n")
    client = Client(Settings.load(home=tmp / "client", host=remote.url, token_file=str(tmp / "wrong")))
    with pytest.raises(UnauthorizedError, match="refused the token"):
        client.endpoint.ws_connect(f"/v1/sandboxes/{sbx.id}/attach")
    assert remote.client().runs(sbx.id) == []  # nothing ran


def _make_cert(tmp: Path) -> tuple[Path, Path]:
    assert shutil.which("openssl"), "openssl is needed to make a test certificate (.ci/run installs it)"
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1",
         "-subj", "/CN=hutch-test", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def test_tls_with_a_self_signed_certificate(hutch_home: Path, tmp: Path, token: str) -> None:
    cert, key = _make_cert(tmp)
    args = ("--listen", "127.0.0.1:0", "--token-file", str(tmp / "token"), "--tls-cert", str(cert), "--tls-key", str(key))
    for d in _run_daemon(hutch_home, *args):
        assert d.url.startswith("https://127.0.0.1:")
        env = {"HUTCH_HOST": d.url, "HUTCH_TOKEN_FILE": str(tmp / "token")}
        r = cli(tmp / "client", "run", "--json", "--", "echo", "tls", **env, HUTCH_CA_FILE=str(cert))
        assert r.returncode == 0 and json.loads(r.stdout)["stdout"] == "tls\n", r.stderr
        r = cli(tmp / "client", "run", "--", "wc", "-c", stdin="x" * 300_000, **env, HUTCH_CA_FILE=str(cert))
        assert (r.returncode, r.stdout.strip()) == (0, "300000"), r.stderr  # the input streams over TLS too
        r = cli(tmp / "client", "list", "--json", **env)  # the system CAs do not know it
        err = json.loads(r.stdout)["error"]
        assert r.returncode == 1 and err["kind"] == "unavailable"
        assert "CERTIFICATE_VERIFY_FAILED" in err["message"] and "HUTCH_CA_FILE" in err["hint"] and d.url in err["message"]
        assert token not in r.stdout + r.stderr
        settings = Settings.load(home=tmp / "client", host=d.url, token_file=str(tmp / "token"), ca_file=str(cert))
        with Sandbox.create(settings=settings) as sbx:
            assert sbx.exec(["echo", "sdk"]).stdout == "sdk\n"
            with sbx.pty(["sh", "-c", "echo wss"]) as pty:
                assert pty.wait(30) == 0
        with pytest.raises(UnavailableError, match="CERTIFICATE_VERIFY_FAILED"):
            Sandbox.create(settings=Settings.load(home=tmp / "client", host=d.url, token_file=str(tmp / "token")))


def test_refusals_before_anything_starts(hutch_home: Path, tmp: Path, token: str) -> None:
    r = cli(hutch_home, "serve", "--json", "--listen", "0.0.0.0:0", "--token-file", str(tmp / "token"))
    err = json.loads(r.stdout)["error"]
    assert r.returncode == 2 and "without TLS" in err["message"] and "--tls-cert" in err["hint"]
    r = cli(hutch_home, "serve", "--json", "--listen", "127.0.0.1:0", "--token-file", str(tmp / "missing"))
    assert r.returncode == 2 and "--token-file" in json.loads(r.stdout)["error"]["message"]
    assert not (hutch_home / "hutchd.sock").exists()
    r = cli(tmp / "client", "list", "--json", HUTCH_HOST="http://192.0.2.1:8765", HUTCH_TOKEN=token)
    err = json.loads(r.stdout)["error"]
    assert r.returncode == 2 and "in clear" in err["message"] and "https://" in err["hint"]
    assert token not in r.stdout + r.stderr
    r = cli(tmp / "client", "list", "--json", HUTCH_HOST="ftp://x")
    assert r.returncode == 2 and json.loads(r.stdout)["error"]["kind"] == "invalid"


def test_a_profile_selects_host_and_token(remote: RemoteDaemon, tmp: Path, token: str) -> None:
    client_home = tmp / "client"
    client_home.mkdir()
    (client_home / "config.toml").write_text(
        f'memory = "256M"\n[profiles.lab]\nhost = "{remote.url}"\ntoken_file = "{tmp / "token"}"\n[profiles.other]\nhost = ""\n'
    )
    r = cli(client_home, "--profile", "lab", "run", "--json", "--", "echo", "via-profile")
    assert r.returncode == 0 and json.loads(r.stdout)["stdout"] == "via-profile\n", r.stderr
    r = cli(client_home, "doctor", "--json", HUTCH_PROFILE="lab")
    daemon_check = next(c for c in json.loads(r.stdout)["checks"] if c["name"] == "daemon")
    assert daemon_check["ok"] and remote.url in daemon_check["detail"] and "profile lab" in daemon_check["detail"]
    r = cli(client_home, "--profile", "nope", "list", "--json")
    err = json.loads(r.stdout)["error"]
    assert r.returncode == 2 and "unknown profile 'nope'" in err["message"] and "lab, other" in err["message"]
    assert not (client_home / "hutchd.sock").exists()


def test_a_sandbox_cannot_reach_the_listener(hutch_home: Path, tmp: Path, token: str) -> None:
    hosts = tmp / "hosts"
    hosts.write_text("127.0.0.1 hostd.test\n")
    args = ("--listen", "127.0.0.1:0", "--token-file", str(tmp / "token"))
    for d in _run_daemon(hutch_home, *args, HUTCH_EGRESS_HOSTS=str(hosts)):
        port = d.url.rsplit(":", 1)[1]
        with Sandbox.create(network="open", settings=d.settings) as box:
            for target, reason in (
                (f"http://127.0.0.2:{port}/v1/health", "ip_literal"),
                (f"http://hostd.test:{port}/", "loopback_address"),
            ):
                r = box.exec(["curl", "-sS", "-i", "-m", "10", target])
                assert "403" in r.stdout and reason in r.stdout, r.stdout + r.stderr
            r = box.exec(["curl", "-sS", "-m", "10", "--noproxy", "*", f"http://127.0.0.1:{port}/v1/health"])
            assert r.exit_code == 7  # its own loopback: nobody listens there
            denied = d.client().events(box.id, types=["egress_denied"])
            assert [e["data"]["reason"] for e in denied] == ["ip_literal", "loopback_address"]
            assert d.client().events(box.id, types=["egress_allowed"]) == []
