"""The MCP server's result shaping: truncation metadata and file pages (no daemon needed)."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import pytest

from hutch.config import Settings
from hutch.mcp import DEFAULT_MAX_OUTPUT, build_server, cap_output, file_chunk


def test_cap_output_says_what_was_cut_and_how_to_get_more() -> None:
    raw = {"exit_code": 0, "stdout": "x" * 10, "stderr": "", "stdout_bytes": 5000, "stderr_bytes": 3, "truncated": True}
    out = cap_output(raw, 10)
    assert (out["max_output"], out["stdout_truncated"], out["stderr_truncated"]) == (10, True, False)
    assert "max_output" in out["how_to_get_more"] and "run_poll" in out["how_to_get_more"]
    whole = cap_output({"stdout": "hi", "stdout_bytes": 2, "stderr_bytes": 0, "truncated": False}, 10)
    assert not whole["stdout_truncated"] and "how_to_get_more" not in whole
    lost = cap_output(raw | {"stored_truncated": True}, 10)  # past the disk cap too: run_poll cannot help
    assert "lost" in lost["how_to_get_more"] and "run_poll" not in lost["how_to_get_more"]


def page_of(path: str, data: bytes, offset: int, limit: int, size_known: bool = True) -> dict[str, Any]:
    """What the tool does: a page of limit + 3 bytes from offset, as the daemon returns it."""
    page = data[offset : offset + limit + 3]
    return file_chunk(path, page, offset + limit + 3 < len(data), len(data) if size_known else None, offset, limit)


def test_file_pages_reassemble_the_file_and_never_split_a_character() -> None:
    data = ("héllo wörld € " * 50).encode()
    pages, offset = [], 0
    while True:
        page = page_of("f", data, offset, 7)
        pages.append(page)
        assert page["base64"] is False, page
        if not page["truncated"]:
            break
        assert page["next_offset"] == offset + page["returned_bytes"]
        offset = page["next_offset"]
    assert "".join(p["content"] for p in pages).encode() == data
    assert all(p["size"] == len(data) for p in pages)


def test_a_page_too_small_for_a_character_still_moves_on() -> None:
    page = page_of("e", "€€".encode(), 0, 2)
    assert page["returned_bytes"] == 2 and page["base64"] is True and page["next_offset"] == 2


def test_binary_pages_come_as_base64() -> None:
    data = bytes(range(256))
    page = page_of("b", data, 160, 32)
    assert page["base64"] is True and base64.b64decode(page["content"]) == data[160:192]
    assert page["next_offset"] == 192
    nul = page_of("n", b"a\x00b", 0, 10)  # valid UTF-8, but NULs: as base64, like exec output
    assert nul["base64"] is True and not nul["truncated"]


def test_bad_arguments_are_invalid_tool_errors_naming_the_parameter(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # argument validation happens before any call to the daemon, so none is needed here
    app, client = build_server(Settings.load(home=tmp_path), DEFAULT_MAX_OUTPUT)

    async def calls() -> list[dict[str, Any]]:
        out = []
        try:
            for name, args in (("exec", {"sandbox": "x"}), ("exec", {"sandbox": "x", "command": 3}), ("nope", {})):
                result = await app.call_tool(name, args)
                assert result.is_error
                body = json.loads(result.content[0].text)
                assert body == result.structured_content
                out.append(body["error"])
        finally:
            await client.close()
        return out

    missing, wrong_type, unknown = asyncio.run(calls())
    assert missing["kind"] == "invalid" and "command: Field required" in missing["message"]
    assert wrong_type["kind"] == "invalid" and "command" in wrong_type["message"]
    assert unknown["kind"] == "invalid" and "nope" in unknown["message"]
    assert not (tmp_path / "hutchd.sock").exists()


def test_an_unexpected_failure_is_an_internal_tool_error(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    app, client = build_server(Settings.load(home=tmp_path), DEFAULT_MAX_OUTPUT)

    async def broken(include_all: bool = False) -> list[dict[str, Any]]:
        raise RuntimeError("kaboom")

    clean_env.setattr(client, "list", broken)

    async def call() -> Any:
        try:
            return await app.call_tool("sandbox_list", {})
        finally:
            await client.close()

    result = asyncio.run(call())
    assert result.is_error
    assert result.structured_content == {
        "error": {
            "kind": "internal",
            "message": "sandbox_list failed: RuntimeError: kaboom",
            "hint": "see the stderr of hutch mcp, and hutch daemon logs",
        }
    }


def test_pages_without_a_known_size_still_say_whether_more_follows() -> None:
    data = b"x" * 100
    first = page_of("u", data, 0, 40, size_known=False)
    assert first["truncated"] and first["next_offset"] == 40 and first["size_exact"] is False
    last = page_of("u", data, 80, 40, size_known=False)
    assert not last["truncated"] and last["size"] == 100 and last["size_exact"] is True
