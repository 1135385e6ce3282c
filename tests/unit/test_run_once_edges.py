"""hutch run from every edge: the CLI, the SDK (sync and async) and the MCP server's run tool
send one request (hutch.wire.build.run_once_request) for the same options, make one client
call, and read the same result back."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
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

FRAMES: list[dict[str, Any]] = [
    {"type": "sandbox", "sandbox_id": "sbx_1", "name": None, "created": True, "kept": False},
    {"type": "run", "run_id": "run_1", "sandbox_id": "sbx_1"},
    {"type": "stdout", "data": "hi\n", "base64": False},
    {"type": "exit", "run_id": "run_1", "sandbox_id": "sbx_1", "exit_code": 3, "status": "failed", "duration_ms": 1.0}
    | {"stdout_bytes": 3, "stderr_bytes": 0},
    {"type": "done", "sandbox_id": "sbx_1", "destroyed": True},
]


class Answer:
    """A run's answer, as the client hands it to an edge."""

    pulled = None

    def __init__(self) -> None:
        self.frames = iter(FRAMES)
        self.closed = False

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self.frames

    def close(self) -> None:
        self.closed = True

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        return self

    async def __anext__(self) -> dict[str, Any]:
        try:
            return next(self.frames)
        except StopIteration:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        self.closed = True


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, str | None, Answer]]:
    got: list[tuple[Any, str | None, Answer]] = []

    def run_once(self: Any, req: Any, *, sync: str | None = None, **_: Any) -> Answer:
        got.append((req, sync, Answer()))
        return got[-1][2]

    async def arun_once(self: Any, req: Any, *, sync: str | None = None, **_: Any) -> Answer:
        return run_once(self, req, sync=sync)

    monkeypatch.setattr(Client, "run_once", run_once)
    monkeypatch.setattr(AsyncClient, "run_once", arun_once)
    return got


@pytest.fixture
def tuned(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> Settings:
    for key, value in (("HOME", str(tmp_path / "home")), ("PROVIDER", "fake"), ("MEMORY", "768M"), ("PIDS", "300")):
        clean_env.setenv(f"HUTCH_{key}", value)
    return Settings.load()


def test_the_cli_sdk_and_mcp_send_one_run_request(sent: list[Any], tuned: Settings, tmp_path: Path, capsys: Any) -> None:
    from hutch.mcp import build_server
    from hutch.sdk import AsyncSandbox, Sandbox

    tree = str(tmp_path)
    args = ["run", "--pids", "200", "-e", "A=1", "--timeout", "5", "--max-output", "64K", "--sync", tree, "--pull"]
    assert main([*args, "--json", "--", "ls", "-l"]) == 3  # the command's own exit code
    assert '"stdout": "hi\\n"' in capsys.readouterr().out
    kw: dict[str, Any] = {"pids": 200, "env": {"A": "1"}, "timeout": 5.0, "max_output": 64 << 10}
    sdk = Sandbox.run_once(["ls", "-l"], sync=tree, pull=True, **kw)
    asdk = asyncio.run(AsyncSandbox.run_once(["ls", "-l"], sync=tree, pull=True, **kw))

    async def tool() -> dict[str, Any]:
        app, client = build_server(tuned)
        try:
            result = await app.call_tool("run", {"command": ["ls", "-l"], "directory": tree, "pull": True, **kw})
            return dict(result.structured_content or {})
        finally:
            await client.close()

    mcp = asyncio.run(tool())
    (cli_req, *others) = [req for req, _, _ in sent]
    assert all(req == cli_req for req in others) and len(others) == 3
    assert {sync for _, sync, _ in sent} == {tree} and all(answer.closed for _, _, answer in sent)
    assert cli_req["spec"]["limits"]["memory"] == "768M" and cli_req["spec"]["env"] == {"A": "1"}  # the caller's settings
    assert cli_req["pull"] and not cli_req["keep"] and cli_req["exec"]["max_output"] == 64 << 10
    adapter(wire.RunOnceRequest).validate_python(cli_req)
    assert (sdk.exit_code, sdk.stdout, sdk.sandbox_id) == (3, "hi\n", "sbx_1") and sdk == asdk
    assert (mcp["exit_code"], mcp["stdout"], mcp["destroyed"]) == (3, "hi\n", True)


def test_a_given_sandbox_takes_no_create_options(sent: list[Any], tuned: Settings) -> None:
    from hutch.sdk import Sandbox

    with pytest.raises(InvalidError, match="memory"):
        Sandbox.run_once("true", sandbox="sbx_1", memory="1G")
    Sandbox.run_once("true", sandbox="sbx_1")
    assert sent[0][0]["sandbox"] == "sbx_1" and "spec" not in sent[0][0]
    with pytest.raises(InvalidError):
        build.run_once_request(build.exec_request("true"))  # neither a spec nor a sandbox


@pytest.mark.parametrize(
    ("heard", "asked"),
    [
        ([], [""]),  # cut short before the sandbox was named: only a daemon is made sure of
        (FRAMES[:2], ["sbx_1"]),  # the run's own sandbox: destroyed through the next daemon
        ([FRAMES[0] | {"kept": True}, FRAMES[1]], []),  # a kept sandbox stays
        (FRAMES, []),  # the whole answer came: nothing to do
    ],
)
def test_an_answer_cut_short_leaves_its_sandbox_to_be_destroyed(heard: list[dict[str, Any]], asked: list[str]) -> None:
    from hutch.client.oneshot import Answer as Kept
    from hutch.client.oneshot import RunOnceStream
    from hutch.errors import UnavailableError

    def lines() -> Iterator[dict[str, Any]]:
        yield from heard
        if heard is not FRAMES:
            raise UnavailableError("the connection closed inside a chunked answer")

    calls: list[str] = []
    frames = RunOnceStream(lines, Kept(None), calls.append)
    with pytest.raises((UnavailableError, StopIteration)):
        while True:
            next(frames)
    assert calls == asked
    with pytest.raises((UnavailableError, StopIteration)):
        next(frames)
    assert calls == asked  # once
