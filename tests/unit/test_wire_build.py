"""The request bodies are built in one place (hutch.wire.build): the CLI, the SDK and the MCP
server send the same spec, sub-agent request and exec request for the same options, and no
edge module writes one by hand."""

from __future__ import annotations

import ast
import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import pytest

from hutch import wire
from hutch.cli import main
from hutch.client import AsyncClient, Client
from hutch.config import Settings
from hutch.errors import InvalidError
from hutch.wire import build
from hutch.wire.pydantic import adapter

SRC = Path(__file__).resolve().parents[2] / "src" / "hutch"
EDGES = [
    *sorted((SRC / "cli").glob("*.py")),
    *sorted(SRC.glob("sdk*.py")),
    *sorted((SRC / "mcp").glob("*.py")),
    *sorted(SRC.glob("client*.py")),
]
# keys only a body built by hand would spell out: a spec's, an exec request's, an approval request's
BODY_KEYS = {"limits", "mounts", "provider_options", "idle_timeout", "stdin_base64", "max_output", "require_approval"}
RECORD = {"id": "sbx_1", "provider": "fake", "state": "running", "spec": {}, "created_at": 0.0, "updated_at": 0.0}
RESULT = {
    "run_id": "run_1",
    "sandbox_id": "sbx_1",
    "exit_code": 0,
    "status": "completed",
    "stdout": "",
    "stderr": "",
    "duration_ms": 1.0,
}


def test_no_edge_writes_a_body_by_hand() -> None:
    found = []
    for path in EDGES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Dict):
                keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
                if keys & BODY_KEYS:
                    found.append(f"{path.relative_to(SRC)}:{node.lineno}: {sorted(keys)}")
    assert found == [], "build these with hutch.wire.build"


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Any]]:
    """What the edges hand the client, captured (no daemon)."""
    got: dict[str, list[Any]] = {"create": [], "subagent": [], "exec": [], "start": []}

    def keep(name: str, answer: Any) -> Any:
        def sync(self: Any, *args: Any) -> Any:
            got[name].append(args[-1])
            return answer

        async def asynchronous(self: Any, *args: Any) -> Any:
            return sync(self, *args)

        return sync, asynchronous

    for name, answer in (("create", RECORD), ("subagent", RECORD), ("exec", RESULT), ("start", {"id": "run_1"})):
        sync, asynchronous = keep(name, answer)
        monkeypatch.setattr(Client, name, sync)
        monkeypatch.setattr(AsyncClient, name, asynchronous)
    monkeypatch.setattr(Client, "get", lambda self, ref: RECORD)

    def stream(self: Any, ref: str, req: Any) -> Any:  # the CLI's foreground runs are streamed
        got["exec"].append(req)
        yield {"type": "run", "run_id": "run_1", "sandbox_id": ref}
        yield {"type": "exit", **{k: v for k, v in RESULT.items() if k not in ("stdout", "stderr")}}

    monkeypatch.setattr(Client, "exec_stream", stream)

    def no_daemon(*args: Any) -> None:
        raise AssertionError("this test talks to no daemon")

    monkeypatch.setattr("hutch.client.launcher.ensure_daemon", no_daemon)
    return got


@pytest.fixture
def tuned(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> Settings:
    """Settings whose defaults differ from the daemon's: the edges must send them."""
    for key, value in (("HOME", str(tmp_path / "home")), ("PROVIDER", "fake"), ("MEMORY", "768M"), ("PIDS", "300")):
        clean_env.setenv(f"HUTCH_{key}", value)
    return Settings.load()


def test_the_cli_sdk_and_mcp_send_one_spec(sent: dict[str, list[Any]], tuned: Settings, capsys: Any) -> None:
    from hutch.mcp import build_server
    from hutch.sdk import Sandbox

    args = ["--name", "n1", "--cpus", "0.5", "-e", "A=1", "--workdir", "/w", "--allow-host", "pkg.example", "--allow-port", "443"]
    assert main(["create", *args, "--json"]) == 0
    Sandbox.create(name="n1", cpus=0.5, env={"A": "1"}, workdir="/w", allow_hosts=["pkg.example"], allow_ports=[443])

    async def tool() -> None:
        app, client = build_server(tuned)
        kw = {"name": "n1", "cpus": 0.5, "env": {"A": "1"}, "workdir": "/w", "allow_hosts": ["pkg.example"], "allow_ports": [443]}
        await app.call_tool("sandbox_create", kw)
        await client.close()

    asyncio.run(tool())
    cli, sdk, mcp = sent["create"]
    assert cli == sdk == mcp
    assert cli["limits"] == {"memory": "768M", "pids": 300, "cpus": 0.5}  # the caller's settings, not the daemon's
    assert cli["network"] == {"mode": "allowlist", "allow_hosts": ["pkg.example"], "ports": [443], "cidrs": []}
    adapter(wire.SandboxSpec).validate_python(cli)


def test_the_cli_and_sdk_send_one_subagent_request(sent: dict[str, list[Any]], tuned: Settings) -> None:
    from hutch.sdk import Sandbox

    assert main(["subagent", "sbx_1", "--name", "kid", "--workspace", "ro", "--ttl", "10m", "--json"]) == 0
    Sandbox(RECORD, Client(tuned)).subagent(name="kid", workspace="ro", ttl=600.0)  # type: ignore[arg-type]
    cli, sdk = sent["subagent"]
    assert cli == sdk and cli["limits"]["memory"] == "768M"  # the SDK's sub-agent takes the settings' limits too
    adapter(wire.SubagentRequest).validate_python(cli)


def test_the_cli_sdk_and_mcp_send_one_exec_request(sent: dict[str, list[Any]], tuned: Settings, tmp_path: Path) -> None:
    from hutch.mcp import build_server
    from hutch.sdk import Sandbox

    (tmp_path / "in").write_bytes(b"fed")
    cli_args = ["exec", "sbx_1", "--cwd", "/w", "--timeout", "5", "--max-output", "64K", "--stdin-file", str(tmp_path / "in")]
    assert main([*cli_args, "--json", "--", "ls", "-l"]) == 0
    sbx = Sandbox(RECORD, Client(tuned))  # type: ignore[arg-type]
    sbx.exec(["ls", "-l"], cwd="/w", timeout=5, max_output=64 << 10, stdin=b"fed")

    async def tool() -> None:
        app, client = build_server(tuned)
        kw = {"sandbox": "sbx_1", "command": ["ls", "-l"], "cwd": "/w", "timeout": 5, "stdin": "fed", "max_output": 64 << 10}
        await app.call_tool("exec", kw)
        await client.close()

    asyncio.run(tool())
    cli, sdk, mcp = sent["exec"]
    assert cli == sdk == mcp and base64.b64decode(cli["stdin"]) == b"fed"
    adapter(wire.ExecRequest).validate_python(cli)
    sbx.exec("sleep 1", background=True)
    assert sent["start"] == [
        {"command": "sleep 1", "env": {}, "cwd": None, "timeout": None, "idle_timeout": None, "max_output": 1 << 20}
    ]


def test_the_builders_decide_what_the_edges_must() -> None:
    with pytest.raises(InvalidError, match="need a network"):
        build.network_policy("none", ["a.test"])
    with pytest.raises(InvalidError, match="unknown network mode"):
        build.policy_change("wide")
    with pytest.raises(InvalidError, match="invalid --mount 'x'") as info:
        build.mount("x", "--mount")
    assert "HOST:SANDBOX" in (info.value.hint or "")
    assert build.mount("~/data:/data:ro")["source"].startswith("/")
    assert build.policy_change(deny_hosts=["x.test"], ports=[]) == {"deny_hosts": ["x.test"]}
    req = build.exec_request("cat", stdin="é", secrets={"K": "v"}, redact=False, background=True)
    assert base64.b64decode(req["stdin"]).decode() == "é" and req["stdin_base64"] and req["redact"] is False
    start = build.attach_start(req, tty=True, rows=2, cols=3)
    assert adapter(wire.AttachMessage).validate_python(start)["type"] == "start"
    assert json.loads(json.dumps(start)) == start


def test_ps_shows_a_process_whose_cpu_time_the_provider_cannot_tell(
    sent: dict[str, list[Any]], tuned: Settings, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    procs = [{"pid": 1, "ppid": 0, "user": "root", "state": "S", "rss": 4096, "command": "init"}]  # unikraft's ps
    monkeypatch.setattr(Client, "ps", lambda self, ref: procs)
    assert main(["ps", "sbx_1"]) == 0
    assert "init" in capsys.readouterr().out


def test_an_image_reaches_the_spec_from_every_edge_and_local_image_is_the_default(
    sent: dict[str, list[Any]], clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from hutch.mcp import build_server
    from hutch.sdk import Sandbox

    clean_env.setenv("HUTCH_HOME", str(tmp_path / "home"))
    clean_env.setenv("HUTCH_LOCAL_IMAGE", "busybox:latest")
    settings = Settings.load()
    assert main(["create", "--image", "python:3.12-slim", "--json"]) == 0
    Sandbox.create(image="python:3.12-slim")

    async def tool(kw: dict[str, Any]) -> None:
        app, client = build_server(settings)
        await app.call_tool("sandbox_create", kw)
        await client.close()

    asyncio.run(tool({"image": "python:3.12-slim"}))
    assert [s["image"] for s in sent["create"]] == ["python:3.12-slim"] * 3
    sent["create"].clear()
    assert main(["create", "--json"]) == 0  # no --image: the setting's, for local sandboxes
    Sandbox.create()
    asyncio.run(tool({}))
    assert [s.get("image") for s in sent["create"]] == ["busybox:latest"] * 3
    assert "image" not in build.sandbox_spec(settings, provider="unikraft")  # unikraft picks its own, in the daemon
    clean_env.delenv("HUTCH_LOCAL_IMAGE")
    assert "image" not in build.sandbox_spec(Settings.load())  # no setting: the host-/usr sandbox


def test_disk_is_a_limit_and_a_user_daemon_refuses_it() -> None:
    from hutch.errors import UnavailableError
    from hutch.providers.local import disk

    assert build.limits(Settings(), disk="2G")["disk"] == "2G"
    assert "disk" not in build.limits(Settings())
    with pytest.raises(UnavailableError, match="needs hutch running as root"):
        disk.check(False, None)
    with pytest.raises(InvalidError, match="tenant"):
        disk.check(True, "t1")
    disk.check(True, None)


def test_placement_and_node_reach_the_spec_from_the_cli_and_both_sdks(sent: dict[str, list[Any]], tuned: Settings) -> None:
    """A cluster's provider options: ``--placement``/``--node``, ``Sandbox.create(placement=, node=)``
    and its async twin send the same spec (the gateway places by them: tests/integration/test_cluster.py)."""
    from hutch.sdk import AsyncSandbox, Sandbox

    assert main(["create", "--placement", "pack", "--node", "10.0.0.2", "--json"]) == 0
    Sandbox.create(placement="pack", node="10.0.0.2")

    async def twin() -> None:
        sbx = await AsyncSandbox.create(placement="pack", node="10.0.0.2", settings=tuned)
        await sbx.client.close()

    asyncio.run(twin())
    cli, sdk, aio = sent["create"]
    assert cli == sdk == aio and cli["provider_options"] == {"placement": "pack", "node": "10.0.0.2"}
    adapter(wire.SandboxSpec).validate_python(cli)
    assert main(["create", "--placement", "nowhere"]) != 0  # the CLI knows the two placements
    assert "provider_options" not in build.sandbox_spec(tuned)  # nothing asked: nothing sent
