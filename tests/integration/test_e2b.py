"""E2B's own Python SDK, unchanged, against a real ``hutch serve --listen 127.0.0.1:0`` with
real sandboxes: the three environment variables, keys, commands, files, PTY, lifecycle and
errors; every test also looks at the hutch side (the sandbox, its runs and events). Bad
input at the wire (Connect envelopes, methods, sizes, tokens) answers in the protocol's
shape, never a 500."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.conftest import destroy_all, sweep
from tests.integration.e2b_sdk import run_sdk, sdk_python
from tests.integration.image_roots import MARKER, busybox_root
from tests.integration.test_remote import RemoteDaemon

from hutch.client import Client
from hutch.server.e2b.auth import hutch_id

pytestmark = pytest.mark.integration


class E2B:
    def __init__(self, d: RemoteDaemon, python: Path) -> None:
        self.d, self.python = d, python
        owner = d.client()
        self.alice = owner.create_key({"name": "alice"})
        self.bob = owner.create_key({"name": "bob"})

    def env(self, key: str) -> dict[str, str]:
        return {
            "E2B_API_KEY": key,
            "E2B_API_URL": self.d.url + "/e2b/api",
            "E2B_SANDBOX_URL": self.d.url + "/e2b/envd",
        }

    def sdk(self, script: str, key: str | None = None) -> dict[str, Any]:
        return run_sdk(self.python, self.env(key or self.alice["key"]), script)

    def owner(self) -> Client:
        return self.d.client()

    def events(self, sandbox: str) -> list[str]:
        return [e["type"] for e in self.owner().events(hutch_id(sandbox), limit=10000)]


@pytest.fixture(scope="module")
def e2b() -> Iterator[E2B]:
    python = sdk_python()
    home = Path(tempfile.mkdtemp(prefix="hutch-e2b-"))
    d = RemoteDaemon(home, "--listen", "127.0.0.1:0").start()
    try:
        e = E2B(d, python)
        root = busybox_root(home / "tiny-root")
        bash = root / "bin" / "bash"  # the SDK runs commands with /bin/bash -l -c: busybox's sh stands in
        bash.write_text('#!/bin/sh\nexec /bin/sh "$@"\n')
        bash.chmod(0o755)
        as_alice = d.env | {"HUTCH_HOST": d.url, "HUTCH_TOKEN": e.alice["key"]}  # images belong to the key that brought them
        r = subprocess.run(
            [sys.executable, "-m", "hutch", "image", "import", f"rootfs:{root}", "e2b-tiny", "--json"],
            env=as_alice,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 0, r.stdout + r.stderr
        yield e
    finally:
        try:
            destroy_all(home)
        finally:
            d.stop()
            sweep(home)
            shutil.rmtree(home, ignore_errors=True)


def test_create_and_commands(e2b: E2B) -> None:
    out = e2b.sdk("""
        from e2b import Sandbox, CommandExitException, TimeoutException
        sbx = Sandbox.create(metadata={"suite": "e2b", "case": "commands"})
        out["id"] = sbx.sandbox_id
        r = sbx.commands.run("echo out; echo err >&2")
        out["streams"] = [r.exit_code, r.stdout, r.stderr]
        seen = []
        r = sbx.commands.run("echo $FOO; pwd", envs={"FOO": "bar"}, cwd="/tmp", on_stdout=seen.append)
        out["env_cwd"] = [r.stdout, "".join(seen)]
        try:
            sbx.commands.run("echo partial; exit 3")
        except CommandExitException as exc:
            out["exit"] = [exc.exit_code, exc.stdout]
        try:
            sbx.commands.run("sleep 30", timeout=2)
        except TimeoutException as exc:
            out["timeout"] = type(exc).__name__
        h = sbx.commands.run("sleep 1; echo later", background=True)
        again = sbx.commands.connect(h.pid)
        out["background"] = again.wait().stdout
        k = sbx.commands.run("sleep 300", background=True)
        out["listed"] = k.pid in [p.pid for p in sbx.commands.list()]
        out["killed"] = sbx.commands.kill(k.pid)
        try:
            k.wait()
        except CommandExitException as exc:
            out["after_kill"] = exc.exit_code
        s = sbx.commands.run("read line; echo got:$line", background=True, stdin=True)
        sbx.commands.send_stdin(s.pid, "hello\\n")
        out["stdin"] = s.wait().stdout
        busy = sbx.commands.run("while :; do :; done", background=True)
        m = sbx.get_metrics()
        out["metrics"] = [len(m), m[-1].cpu_used_pct > 0, m[-1].mem_used > 0, m[-1].mem_total, m[-1].cpu_count]
        sbx.commands.kill(busy.pid)
        # user=: the sandbox's own user runs; another is refused, never ignored
        out["own_user"] = sbx.commands.run("id -un", user="sandbox").stdout
        for name, call in (
            ("as_root", lambda: sbx.commands.run("id -un", user="root")),
            ("file_as_root", lambda: sbx.files.write("/workspace/r.txt", "x", user="root")),
        ):
            try:
                call()
                out[name] = "no error"
            except Exception as exc:
                out[name] = [type(exc).__name__, str(exc)]
        out["file_as_own"] = sbx.files.read("/workspace/r.txt", user="sandbox") if sbx.files.exists("/workspace/r.txt") else None
    """)
    assert out["streams"] == [0, "out\n", "err\n"]
    assert out["env_cwd"] == ["bar\n/tmp\n", "bar\n/tmp\n"]
    assert out["exit"] == [3, "partial\n"]
    assert out["timeout"] == "TimeoutException"
    assert out["background"] == "later\n"
    assert out["listed"] is True and out["killed"] is True and out["after_kill"] != 0
    assert out["stdin"] == "got:hello\n"
    # the hutch side: an ordinary sandbox of alice's key, with its runs and events
    assert out["id"].startswith("sbx-")  # the E2B form of the id: DNS-safe (docs/e2b.md)
    rec = e2b.owner().get(hutch_id(out["id"]))
    assert rec["owner"] == e2b.alice["id"] and rec["spec"]["labels"] == {"suite": "e2b", "case": "commands"}
    runs = e2b.owner().runs(rec["id"])
    assert ["/bin/bash", "-l", "-c", "echo out; echo err >&2"] in [r["command"] for r in runs]
    assert {r["status"] for r in runs} >= {"completed", "timed_out"}
    types = e2b.events(out["id"])
    assert "sandbox_created" in types and "run_started" in types and "run_finished" in types and "run_signalled" in types
    assert out["own_user"] == "sandbox\n"
    assert "runs its commands as sandbox" in out["as_root"][1] and "'root'" in out["as_root"][1], out["as_root"]
    assert "as its user sandbox" in out["file_as_root"][1], out["file_as_root"]
    assert out["file_as_own"] is None  # the refused write wrote nothing
    # get_metrics: one sample from the usage capability (a busy loop was running)
    limits = rec["spec"]["limits"]
    assert out["metrics"] == [1, True, True, limits["memory"], max(1, int(limits.get("cpus") or 1))]


def test_files_and_watch(e2b: E2B) -> None:
    out = e2b.sdk("""
        from e2b import Sandbox
        sbx = Sandbox.create()
        out["id"] = sbx.sandbox_id
        w = sbx.files.watch_dir("/workspace")
        sbx.files.write("/workspace/a.txt", "hello")
        sbx.files.write("/workspace/b.bin", b"\\x00\\xffbytes")
        out["events"] = sorted({(e.name, e.type.value) for e in w.get_new_events()})
        out["text"] = sbx.files.read("/workspace/a.txt")
        out["bytes"] = list(sbx.files.read("/workspace/b.bin", format="bytes"))
        out["list"] = sorted((e.name, e.type.value, e.size) for e in sbx.files.list("/workspace"))
        info = sbx.files.get_info("/workspace/a.txt")
        out["modified"] = info.modified_time.isoformat()
        out["mkdir"] = [sbx.files.make_dir("/workspace/d/e"), sbx.files.make_dir("/workspace/d/e")]
        out["rename"] = sbx.files.rename("/workspace/a.txt", "/workspace/d/a.txt").path
        out["exists"] = [sbx.files.exists("/workspace/d/a.txt"), sbx.files.exists("/workspace/a.txt")]
        sbx.files.remove("/workspace/d")
        out["removed"] = sbx.files.exists("/workspace/d")
        out["later"] = sorted({(e.name, e.type.value) for e in w.get_new_events()})
        w.stop()
        url = sbx.download_url("/workspace/b.bin")
        out["signed"] = "signature=v1_" in url
        import httpx
        out["via_url"] = list(httpx.get(url.replace("/files", "/files")).content)
        try:
            sbx.files.read("/workspace/nope")
        except Exception as exc:
            out["missing"] = type(exc).__name__
    """)
    assert out["text"] == "hello" and out["bytes"] == list(b"\x00\xffbytes")
    assert out["list"] == [["a.txt", "file", 5], ["b.bin", "file", 7]]
    assert out["modified"].endswith("+00:00")
    assert out["mkdir"] == [True, False]
    assert out["rename"] == "/workspace/d/a.txt" and out["exists"] == [True, False] and out["removed"] is False
    assert {("a.txt", "create"), ("b.bin", "write")} <= {tuple(e) for e in out["events"]}
    assert out["later"] == [["a.txt", "remove"]]  # d was made and removed between the two polls
    assert out["signed"] and out["via_url"] == list(b"\x00\xffbytes")
    assert out["missing"] == "FileNotFoundException" or out["missing"] == "NotFoundException"
    types = e2b.events(out["id"])
    assert "file_written" in types and "file_read" in types


def test_pty(e2b: E2B) -> None:
    out = e2b.sdk("""
        from e2b import Sandbox
        from e2b.sandbox.commands.command_handle import PtySize
        sbx = Sandbox.create()
        h = sbx.pty.create(PtySize(rows=24, cols=80))
        sbx.pty.resize(h.pid, PtySize(rows=30, cols=100))
        sbx.pty.send_stdin(h.pid, b"stty size; echo pty-$((6*7)); exit 5\\n")
        data = []
        try:
            h.wait(on_pty=lambda d: data.append(bytes(d)))
        except Exception as exc:
            out["exit"] = getattr(exc, "exit_code", None)
        out["data"] = b"".join(data).decode(errors="replace")
    """)
    assert "pty-42" in out["data"] and "30 100" in out["data"] and out["exit"] == 5


def test_lifecycle_list_and_errors(e2b: E2B) -> None:
    out = e2b.sdk("""
        from e2b import Sandbox, SandboxQuery, AuthenticationException
        a = Sandbox.create(metadata={"team": "red"}, timeout=60)
        b = Sandbox.create(metadata={"team": "blue"}, timeout=60)
        out["ids"] = [a.sandbox_id, b.sandbox_id]
        red = Sandbox.list(query=SandboxQuery(metadata={"team": "red"})).next_items()
        out["red"] = [s.sandbox_id for s in red]
        before = a.get_info().end_at
        a.set_timeout(600)
        out["extended"] = (a.get_info().end_at - before).total_seconds()
        out["paused"] = a.pause()
        out["state"] = Sandbox.get_info(a.sandbox_id).state.value
        back = Sandbox.connect(a.sandbox_id)
        out["resumed"] = [Sandbox.get_info(a.sandbox_id).state.value, back.commands.run("echo again").stdout]
        out["killed"] = [b.kill(), Sandbox.kill(b.sandbox_id)]
        for name, call in [
            ("not_found", lambda: Sandbox.connect("sbx_doesnotexist")),
            ("template", lambda: Sandbox.create("no-such-template")),
            ("bad_key", lambda: Sandbox.create(api_key="hk_0000000000000000_" + "x" * 43)),
        ]:
            try:
                call()
                out[name] = "no error"
            except Exception as exc:
                out[name] = type(exc).__name__
        t = Sandbox.create("e2b-tiny")
        out["template"] = [t.commands.run("cat /etc/marker").stdout, t.get_info().template_id]
    """)
    a, b = out["ids"]
    assert out["red"] == [a]
    assert out["extended"] > 400
    assert out["paused"] is True and out["state"] == "paused"
    assert out["resumed"] == ["running", "again\n"]
    assert out["killed"] == [True, False]
    assert out["not_found"] in ("SandboxNotFoundException", "NotFoundException")
    assert out["template"] == [MARKER, "e2b-tiny"]
    assert out["bad_key"] == "AuthenticationException"
    assert e2b.owner().get(hutch_id(b))["state"] == "destroyed"
    assert "sandbox_paused" in e2b.events(a) and "sandbox_resumed" in e2b.events(a)
    # another key does not see alice's sandboxes at all
    other = e2b.sdk(
        f"""
        from e2b import Sandbox
        out["listed"] = [s.sandbox_id for s in Sandbox.list().next_items()]
        try:
            Sandbox.connect({a!r})
        except Exception as exc:
            out["connect"] = type(exc).__name__
    """,
        key=e2b.bob["key"],
    )
    assert a not in other["listed"] and other["connect"] in ("SandboxNotFoundException", "NotFoundException")


def _envelope(msg: dict[str, Any] | bytes, flags: int = 0) -> bytes:
    data = msg if isinstance(msg, bytes) else json.dumps(msg).encode()
    return struct.pack(">BI", flags, len(data)) + data


def test_bad_input_is_a_protocol_error_never_a_500(e2b: E2B) -> None:
    api = {"X-API-KEY": e2b.alice["key"]}
    with httpx.Client(base_url=e2b.d.url, timeout=60) as h:
        made = h.post("/e2b/api/sandboxes", json={"templateID": "base", "timeout": 120}, headers=api)
        assert made.status_code == 201, made.text
        sbx, token = made.json()["sandboxID"], made.json()["envdAccessToken"]
        envd = {"E2b-Sandbox-Id": sbx, "X-Access-Token": token}
        stream = envd | {"Content-Type": "application/connect+json"}
        unary = envd | {"Content-Type": "application/json"}
        start = {"process": {"cmd": "/bin/sh", "args": ["-c", "echo hi"]}}
        answers = {
            "rest_bad_json": h.post("/e2b/api/sandboxes", content=b"{nope", headers=api),
            "rest_template": h.post("/e2b/api/sandboxes", json={"templateID": "nope"}, headers=api),
            "rest_timeout": h.post("/e2b/api/sandboxes", json={"templateID": "base", "timeout": -1}, headers=api),
            "rest_gpu": h.post("/e2b/api/sandboxes", json={"templateID": "base", "volumeMounts": [{"name": "x"}]}, headers=api),
            "rest_unknown": h.get("/e2b/api/templates", headers=api),
            "rest_other_key": h.get(f"/e2b/api/sandboxes/{sbx}", headers={"X-API-KEY": e2b.bob["key"]}),
            "rest_no_key": h.get("/e2b/api/v2/sandboxes"),
            "short_envelope": h.post("/e2b/envd/process.Process/Start", content=b"\x00\x00", headers=stream),
            "lying_envelope": h.post("/e2b/envd/process.Process/Start", content=_envelope(start)[:-3], headers=stream),
            "compressed": h.post("/e2b/envd/process.Process/Start", content=_envelope(start, 1), headers=stream),
            "not_json": h.post("/e2b/envd/process.Process/Start", content=_envelope(b"{x"), headers=stream),
            "no_cmd": h.post("/e2b/envd/process.Process/Start", content=_envelope({"process": {}}), headers=stream),
            "wrong_type": h.post("/e2b/envd/process.Process/Start", json=start, headers=unary),
            "unknown_method": h.post("/e2b/envd/process.Process/Nope", json={}, headers=unary),
            "unknown_service": h.post("/e2b/envd/x.Y/Z", json={}, headers=unary),
            "oversize": h.post("/e2b/envd/filesystem.Filesystem/Stat", content=b" " * (5 << 20), headers=unary),
            "bad_timeout": h.post("/e2b/envd/process.Process/List", json={}, headers=unary | {"Connect-Timeout-Ms": "x"}),
            "no_pid": h.post("/e2b/envd/process.Process/SendInput", json={"process": {"pid": 99999}}, headers=unary),
            "wrong_token": h.post("/e2b/envd/process.Process/List", json={}, headers=unary | {"X-Access-Token": "ea_x"}),
            "bad_signature": h.get("/files", params={"path": "/etc/hostname", "signature": "v1_nope"}),
        }
        for name, r in answers.items():
            assert (
                400 <= r.status_code < 500
                or (r.status_code == 200 and name in ("short_envelope", "lying_envelope", "compressed", "not_json", "no_cmd"))
                or r.status_code == 501
            ), (name, r.status_code, r.text)
            body = r.content[5:] if r.headers.get("content-type", "").startswith("application/connect+json") else r.content
            shape = json.loads(body)
            shape = shape.get("error", shape)
            assert set(shape) >= {"code", "message"}, (name, shape)
            assert e2b.alice["key"] not in r.text and token not in r.text
        assert answers["rest_template"].status_code == 404 and answers["rest_other_key"].status_code == 404
        assert answers["rest_no_key"].status_code == 401 and answers["wrong_token"].json()["code"] == "unauthenticated"
        assert answers["unknown_method"].json()["code"] == "unimplemented"
        assert answers["oversize"].json()["code"] == "resource_exhausted"
        # a stream the client abandons: the process goes on and can be found and killed
        with h.stream(
            "POST",
            "/e2b/envd/process.Process/Start",
            headers=stream,
            content=_envelope({"process": {"cmd": "/bin/sh", "args": ["-c", "sleep 300"]}, "tag": "left"}),
        ) as r:
            first = next(r.iter_bytes())
            pid = json.loads(first[5:])["event"]["start"]["pid"]
        listed = h.post("/e2b/envd/process.Process/List", json={}, headers=unary).json()
        assert pid in [p["pid"] for p in listed["processes"]]
        assert (
            h.post(
                "/e2b/envd/process.Process/SendSignal",
                json={"process": {"tag": "left"}, "signal": "SIGNAL_SIGKILL"},
                headers=unary,
            ).status_code
            == 200
        )
        ok = h.post("/e2b/envd/process.Process/Start", content=_envelope(start), headers=stream)
        frames = _frames(ok.content)
        assert frames[-1] == (2, {}) and any(f[1].get("event", {}).get("end", {}).get("exitCode") == 0 for f in frames)
    assert "internal" not in (e2b.d.home / "test-daemon.log").read_text()


def _frames(data: bytes) -> list[tuple[int, dict[str, Any]]]:
    out = []
    while data:
        flags, size = struct.unpack(">BI", data[:5])
        out.append((flags, json.loads(data[5 : 5 + size])))
        data = data[5 + size :]
    return out
