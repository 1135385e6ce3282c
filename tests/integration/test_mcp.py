"""The MCP server end to end: the official ``mcp`` client over stdio, ``hutch mcp`` as a
subprocess, a real daemon and real sandboxes (local provider)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp_types import CallToolResult
from tests.conftest import Daemon, hutch_env

pytestmark = pytest.mark.integration

TOOLS = {
    "sandbox_create",
    "sandbox_list",
    "sandbox_destroy",
    "exec",
    "run",
    "file_write",
    "file_read",
    "file_list",
    "sandbox_diff",
    "image_list",
    "image_pull",
    "port_expose",
    "port_unexpose",
    "exec_background",
    "run_poll",
    "run_wait",
    "run_kill",
    "logs",
    "events",
    "policy_update",
    "push",
    "pull",
    "snapshot_save",
    "snapshot_restore",
    "approval_request",
    "approval_status",
}


@asynccontextmanager
async def connect(daemon: Daemon, *args: str) -> AsyncIterator[Client]:
    params = StdioServerParameters(command=sys.executable, args=["-m", "hutch", "mcp", *args], env=hutch_env(daemon.home))
    async with Client(params, read_timeout_seconds=60) as client:
        yield client


def run(daemon: Daemon, body: Callable[[Client], Awaitable[None]], *args: str) -> None:
    async def main() -> None:
        async with connect(daemon, *args) as client:
            await body(client)

    asyncio.run(main())


def ok(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    body: dict[str, Any] = json.loads(result.content[0].text)  # type: ignore[union-attr]
    assert body == result.structured_content
    return body


def tool_error(result: CallToolResult) -> dict[str, Any]:
    assert result.is_error, result.content
    body: dict[str, Any] = json.loads(result.content[0].text)  # type: ignore[union-attr]
    assert set(body) == {"error"} and body == result.structured_content
    return body["error"]  # type: ignore[no-any-return]


def test_round_trip(daemon: Daemon) -> None:
    async def body(c: Client) -> None:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        assert set(tools) == TOOLS
        for tool in tools.values():
            assert tool.description and len(tool.description) > 20, tool.name
            for name, prop in tool.input_schema.get("properties", {}).items():
                assert prop.get("description"), (tool.name, name)
        assert tools["exec"].input_schema["required"] == ["sandbox", "command"]
        assert "sandbox" in tools["file_read"].input_schema["required"]

        rec = ok(await c.call_tool("sandbox_create", {"name": "mcp-rt", "memory": "256M", "env": {"FROM_SPEC": "spec"}}))
        assert rec["id"].startswith("sbx_") and rec["state"] == "running" and rec["name"] == "mcp-rt"
        assert rec["spec"]["limits"]["memory"] == 256 << 20
        listed = ok(await c.call_tool("sandbox_list", {}))
        assert [s["id"] for s in listed["sandboxes"]] == [rec["id"]]

        wrote = ok(await c.call_tool("file_write", {"sandbox": "mcp-rt", "path": "in.txt", "content": "piped in\n"}))
        assert wrote["path"] == "/workspace/in.txt" and wrote["size"] == 9

        r = ok(
            await c.call_tool(
                "exec",
                {
                    "sandbox": "mcp-rt",
                    "command": "cat in.txt; cat; echo $FROM_SPEC $ONLY_HERE; pwd; echo oops >&2; echo done > out.txt; exit 3",
                    "stdin": "from stdin\n",
                    "env": {"ONLY_HERE": "here"},
                    "timeout": 30,
                },
            )
        )
        assert (r["exit_code"], r["status"]) == (3, "failed")  # the workload's failure is not a tool error
        assert r["stdout"] == "piped in\nfrom stdin\nspec here\n/workspace\n" and r["stderr"] == "oops\n"
        assert r["truncated"] is False and "how_to_get_more" not in r

        argv = ok(await c.call_tool("exec", {"sandbox": rec["id"], "command": ["echo", "$HOME", "a;b"], "cwd": "/tmp"}))
        assert (argv["exit_code"], argv["stdout"]) == (0, "$HOME a;b\n")

        read = ok(await c.call_tool("file_read", {"sandbox": "mcp-rt", "path": "out.txt"}))
        assert (read["content"], read["base64"], read["truncated"], read["size"]) == ("done\n", False, False, 5)
        names = {e["name"] for e in ok(await c.call_tool("file_list", {"sandbox": "mcp-rt"}))["entries"]}
        assert {"in.txt", "out.txt"} <= names

        timed = ok(await c.call_tool("exec", {"sandbox": "mcp-rt", "command": "sleep 30", "timeout": 0.5}))
        assert (timed["status"], timed["exit_code"]) == ("timed_out", 124)

        gone = ok(await c.call_tool("sandbox_destroy", {"sandbox": "mcp-rt"}))
        assert gone["destroyed"] is True and gone["existed"] is True
        again = ok(await c.call_tool("sandbox_destroy", {"sandbox": "mcp-rt"}))
        assert again["destroyed"] is True and again["existed"] is False

    run(daemon, body)
    with daemon.client() as c:
        assert c.list() == []  # the CLI's view agrees


def test_output_is_capped_with_truncation_metadata_and_the_rest_is_reachable(daemon: Daemon) -> None:
    size = 100_000
    big = f"head -c {size} /dev/zero | tr '\\0' x"

    async def body(c: Client) -> None:
        ok(await c.call_tool("sandbox_create", {"name": "mcp-cap"}))
        r = ok(await c.call_tool("exec", {"sandbox": "mcp-cap", "command": big}))
        assert r["max_output"] == 32 << 10  # the default: 32 KiB per stream
        assert len(r["stdout"]) == 32 << 10 and r["stdout_bytes"] == size
        assert r["truncated"] and r["stdout_truncated"] and not r["stderr_truncated"]
        assert "max_output" in r["how_to_get_more"] and "run_poll" in r["how_to_get_more"]
        rest, offset = "", 0
        while True:  # the whole output is reachable, page by page, from where the cap cut it
            page = ok(await c.call_tool("run_poll", {"run_id": r["run_id"], "stdout_offset": offset}))
            rest += page["stdout"]["data"]
            offset = page["stdout"]["next_offset"]
            if page["done"]:
                break
        assert rest == "x" * size

        bg = ok(await c.call_tool("exec_background", {"sandbox": "mcp-cap", "command": "sleep 30"}))
        assert bg["status"] == "running"
        ok(await c.call_tool("run_kill", {"run_id": bg["id"], "signal": "KILL"}))
        done = ok(await c.call_tool("run_wait", {"run_id": bg["id"], "timeout": 30}))
        assert done["status"] == "killed"
        evs = ok(await c.call_tool("events", {"sandbox": "mcp-cap", "type": ["run_finished"]}))["events"]
        assert [e["data"]["status"] for e in evs][-1] == "killed"
        transcript = ok(await c.call_tool("logs", {"sandbox": "mcp-cap", "max_bytes": 1000}))
        assert transcript["records"] and transcript["next_offset"] > 0

        more = ok(await c.call_tool("exec", {"sandbox": "mcp-cap", "command": big, "max_output": size}))
        assert len(more["stdout"]) == size and not more["truncated"]

        ok(await c.call_tool("exec", {"sandbox": "mcp-cap", "command": f"{big} > big.txt"}))
        got, offset = "", 0
        while True:
            page = ok(await c.call_tool("file_read", {"sandbox": "mcp-cap", "path": "big.txt", "offset": offset}))
            assert page["size"] == size and page["returned_bytes"] <= 32 << 10
            got += page["content"]
            if not page["truncated"]:
                break
            assert "offset=" in page["how_to_get_more"]
            offset = page["next_offset"]
        assert got == "x" * size and offset > 0

    run(daemon, body)


def test_max_output_option_sets_the_default_cap(daemon: Daemon) -> None:
    async def body(c: Client) -> None:
        ok(await c.call_tool("sandbox_create", {"name": "mcp-cap1k"}))
        r = ok(await c.call_tool("exec", {"sandbox": "mcp-cap1k", "command": "seq 1 2000; seq 1 2000 >&2"}))
        assert r["max_output"] == 1024 and len(r["stdout"]) == 1024 and len(r["stderr"]) == 1024
        assert r["stdout_truncated"] and r["stderr_truncated"] and r["stdout_bytes"] > 1024
        page = ok(await c.call_tool("file_read", {"sandbox": "mcp-cap1k", "path": "/etc/passwd"}))
        assert page["returned_bytes"] <= 1024

    run(daemon, body, "--max-output", "1K")


def test_bad_arguments_give_precise_tool_errors(daemon: Daemon) -> None:
    async def body(c: Client) -> None:
        missing = tool_error(await c.call_tool("exec", {"sandbox": "whatever"}))
        assert missing["kind"] == "invalid"
        assert "invalid arguments for exec: command: Field required" in missing["message"]
        assert missing["hint"]

        wrong = tool_error(await c.call_tool("exec", {"sandbox": "whatever", "command": "true", "timeout": "soon"}))
        assert wrong["kind"] == "invalid" and "timeout" in wrong["message"] and "number" in wrong["message"]

        negative = tool_error(await c.call_tool("exec", {"sandbox": "whatever", "command": "true", "timeout": -1}))
        assert negative["kind"] == "invalid" and "timeout" in negative["message"]

        mode = tool_error(await c.call_tool("file_write", {"sandbox": "x", "path": "p", "content": "", "mode": "rwx"}))
        assert mode["kind"] == "invalid" and "mode" in mode["message"]

    run(daemon, body)


def test_hutch_errors_keep_their_kind_and_hint(daemon: Daemon) -> None:
    async def body(c: Client) -> None:
        for name, args in (
            ("exec", {"sandbox": "no-such-sandbox", "command": ["true"]}),
            ("file_read", {"sandbox": "no-such-sandbox", "path": "x"}),
            ("file_list", {"sandbox": "no-such-sandbox"}),
        ):
            err = tool_error(await c.call_tool(name, args))
            assert err["kind"] == "not_found", (name, err)
            assert "no-such-sandbox" in err["message"] and err["hint"]

        ok(await c.call_tool("sandbox_create", {"name": "mcp-err"}))
        taken = tool_error(await c.call_tool("sandbox_create", {"name": "mcp-err"}))
        assert taken["kind"] == "conflict"
        bad = tool_error(await c.call_tool("sandbox_create", {"memory": "lots"}))
        assert bad["kind"] == "invalid" and bad["hint"]
        missing_file = tool_error(await c.call_tool("file_read", {"sandbox": "mcp-err", "path": "nope.txt"}))
        assert missing_file["kind"] == "not_found"

    run(daemon, body)


def test_network_policy_tools(daemon: Daemon) -> None:
    async def body(c: Client) -> None:
        rec = ok(await c.call_tool("sandbox_create", {"name": "mcp-net", "allow_hosts": ["pypi.test"]}))
        assert rec["spec"]["network"]["mode"] == "allowlist" and rec["spec"]["network"]["allow_hosts"] == ["pypi.test"]
        shown = ok(await c.call_tool("policy_update", {"sandbox": "mcp-net"}))
        assert shown["network"]["ports"] == [] and shown["egress"] == {"allowed": 0, "denied": 0}
        r = ok(await c.call_tool("exec", {"sandbox": "mcp-net", "command": "curl -sS -m 5 http://other.test/"}))
        assert "host_not_allowed" in r["stdout"]
        changed = ok(
            await c.call_tool(
                "policy_update", {"sandbox": "mcp-net", "allow_hosts": ["*.other.test"], "deny_hosts": ["pypi.test"]}
            )
        )
        assert changed["network"]["allow_hosts"] == ["*.other.test"] and changed["network"]["deny_hosts"] == ["pypi.test"]
        assert changed["egress"] == {"allowed": 0, "denied": 1}
        denied = ok(await c.call_tool("events", {"sandbox": "mcp-net", "type": ["egress_denied"]}))
        assert [e["data"]["reason"] for e in denied["events"]] == ["host_not_allowed"]
        bad = tool_error(await c.call_tool("policy_update", {"sandbox": "mcp-net", "allow_hosts": ["not a host"]}))
        assert bad["kind"] == "invalid" and bad["hint"]
        bad = tool_error(await c.call_tool("sandbox_create", {"network": "none", "allow_hosts": ["a.test"]}))
        assert bad["kind"] == "invalid"
        ok(await c.call_tool("sandbox_destroy", {"sandbox": "mcp-net"}))

    run(daemon, body)


def test_approval_request_waits_for_a_human(daemon: Daemon) -> None:
    from hutch.client import Client as HutchClient

    sbx = HutchClient(daemon.settings, autostart=False).create({"provider": "local"})

    async def body(c: Client) -> None:
        apr = ok(await c.call_tool("approval_request", {"sandbox": sbx["id"], "action": "push", "reason": "tests pass"}))
        assert apr["id"].startswith("apr_") and apr["status"] == "pending" and apr["reason"] == "tests pass"
        assert ok(await c.call_tool("approval_status", {"approval_id": apr["id"]}))["status"] == "pending"
        await asyncio.to_thread(HutchClient(daemon.settings, autostart=False).decide, apr["id"], True, None, "a human")
        done = ok(await c.call_tool("approval_status", {"approval_id": apr["id"], "wait": 5}))
        assert done["status"] == "approved" and done["decided_by"] == "a human"
        err = tool_error(await c.call_tool("approval_status", {"approval_id": "apr_00000000000deadbeef"}))
        assert err["kind"] == "not_found"
        short = ok(await c.call_tool("approval_request", {"sandbox": sbx["id"], "action": "x", "timeout": 0.5, "wait": 5}))
        assert short["status"] == "expired"

    run(daemon, body)


def test_file_read_pages_fetch_only_the_page(daemon: Daemon) -> None:
    async def body(c: Client) -> None:
        ok(await c.call_tool("sandbox_create", {"name": "mcp-page"}))
        script = "python3 -c \"import sys; sys.stdout.write(''.join('%07d\\\\n' % i for i in range(400000)))\" > big.txt"
        assert ok(await c.call_tool("exec", {"sandbox": "mcp-page", "command": script}))["exit_code"] == 0
        page = ok(
            await c.call_tool("file_read", {"sandbox": "mcp-page", "path": "big.txt", "offset": 2_000_000, "max_bytes": 16})
        )
        assert page["content"] == "0250000\n0250001\n" and page["size"] == 3_200_000 and page["size_exact"] is True
        assert page["next_offset"] == 2_000_016 and page["truncated"] is True
        reads = ok(await c.call_tool("events", {"sandbox": "mcp-page", "type": ["file_read"]}))["events"]
        assert reads[-1]["data"]["offset"] == 2_000_000 and reads[-1]["data"]["size"] <= 16 + 3  # only the page moved
        ok(await c.call_tool("sandbox_destroy", {"sandbox": "mcp-page"}))

    run(daemon, body)


def test_run_makes_runs_and_destroys_in_one_call(daemon: Daemon, tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("from the client\n")

    async def body(c: Client) -> None:
        args = {"command": "cat in.txt; echo made > out.txt; exit 3", "directory": str(tmp_path), "pull": True}
        r = ok(await c.call_tool("run", args | {"memory": "256M", "max_output": 4}))
        assert (r["exit_code"], r["status"], r["destroyed"]) == (3, "failed", True)
        assert r["stdout"] == "from" and r["stdout_truncated"] and "sandbox is gone" in r["how_to_get_more"]
        assert r["pulled"]["files_received"] == 1  # out.txt: in.txt came back unchanged
        kept = ok(await c.call_tool("run", {"command": ["true"], "keep": True}))
        assert kept["destroyed"] is False and kept["exit_code"] == 0
        ok(await c.call_tool("sandbox_destroy", {"sandbox": kept["sandbox_id"]}))

    run(daemon, body)
    assert (tmp_path / "out.txt").read_text() == "made\n"
    with daemon.client() as c:
        assert c.list() == []
