"""What the MCP tools share: their results and errors (the CLI's JSON documents, and
``{"error": {"kind", "message", "hint"}}``), the argument types they have in common, and the
output caps with their truncation metadata."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING, Annotated, Literal

from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent
from pydantic import Field, ValidationError

from hutch.errors import HutchError, InvalidError

if TYPE_CHECKING:
    from hutch import wire


DEFAULT_MAX_OUTPUT = 32 << 10
MAX_CALL_OUTPUT = 16 << 20

Sandbox = Annotated[str, Field(description="The sandbox: its id (sbx_...) or its name.")]
Network = Literal["none", "allowlist", "open"]
Command = Annotated[
    str | list[str],
    Field(description="A shell string (run with /bin/sh -c, e.g. 'make && make test') or an argv list (no shell)."),
]
Directory = Annotated[
    str, Field(description="A directory on the machine running this MCP server (absolute, or relative to its cwd).")
]
ManifestPath = Annotated[
    str | None,
    Field(
        description="A TOML manifest on the machine running this MCP server (docs/manifest.md): image, limits, env, "
        "secret references, network, mounts, files, setup commands, git; the other arguments win over it."
    ),
]
GitRepo = Annotated[
    str | None,
    Field(description="URL[#REF]: /workspace starts as a clone of this repository (a local path, or http(s) through the proxy)."),
]
ExecUser = Annotated[
    str | None,
    Field(
        description="Run as this user of the sandbox (NAME, UID, NAME:GROUP or UID:GID, from its /etc/passwd); "
        "the sandbox must run as root inside (user root, or an image's root). Default: the sandbox's own user."
    ),
]
RunId = Annotated[str, Field(description="The run's id (run_...), from exec or exec_background.")]
MaxOutput = Annotated[
    int | None,
    Field(
        ge=1,
        le=MAX_CALL_OUTPUT,
        description="Cap in bytes on what comes back, per stream (default: the server's --max-output, 32 KiB).",
    ),
]


SecretNames = Annotated[
    list[str] | None,
    Field(description="Secrets by name, their values from this MCP server's environment (never shown to you or stored)."),
]
SecretHosts = Annotated[
    dict[str, list[str]] | None,
    Field(
        description="Secret name -> hosts (each one it may reach): the sandbox holds only a placeholder "
        "(hutch-secret-NAME-...), hutch's proxy puts the value in requests to these hosts and blocks it elsewhere."
    ),
]


def env_secrets(names: list[str] | None) -> dict[str, str]:
    """The values of ``names`` from this process's environment (the person's, not the model's)."""
    out: dict[str, str] = {}
    for name in names or []:
        value = os.environ.get(name)
        if not value:
            raise InvalidError(f"secret {name}: ${name} is not set where the MCP server runs", hint=f"export {name}=...")
        out[name] = value
    return out


Body = Mapping[str, object]  # a tool's result: a body of the API (hutch.wire), or one made of them


def _result(body: Body, error: bool = False) -> CallToolResult:
    text = json.dumps(body)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=dict(body), is_error=error)


def error_result(exc: HutchError) -> CallToolResult:
    """A tool error with the CLI's ``{"error": {"kind", "message", "hint"}}``."""
    return _result(exc.to_dict(), error=True)


async def _call(work: Awaitable[Body]) -> CallToolResult:
    try:
        return _result(await work)
    except HutchError as exc:
        return error_result(exc)


def _validation_message(tool: str, exc: ToolError) -> str:
    cause = exc.__cause__
    if isinstance(cause, ValidationError):
        problems = [f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}" for e in cause.errors()]
        return f"invalid arguments for {tool}: " + "; ".join(problems)
    return str(exc)


def cap_output(result: wire.ExecResult, cap: int) -> dict[str, object]:
    """Explicit truncation metadata on an exec result captured with ``max_output=cap``."""
    out: dict[str, object] = dict(result)
    out["max_output"] = cap
    out["stdout_truncated"] = result.get("stdout_bytes", 0) > cap
    out["stderr_truncated"] = result.get("stderr_bytes", 0) > cap
    if out.get("truncated") and out.get("stored_truncated"):
        out["how_to_get_more"] = (
            f"only the first {cap} bytes of each stream came back (stdout_bytes/stderr_bytes are the full sizes), "
            "and the copy kept in the sandbox stops at its disk cap too: the rest of the output is lost. "
            "Re-run the command with its output written to a file in the sandbox ('cmd > out.txt 2>&1'), "
            "then read that file in pages with file_read (offset)."
        )
    elif out.get("truncated"):
        out["how_to_get_more"] = (
            f"only the first {cap} bytes of each stream came back (stdout_bytes/stderr_bytes are the full sizes). "
            f"The whole output is kept: page through it with run_poll (run_id={out.get('run_id')}, "
            f"stdout_offset={cap} and stderr_offset={cap} to continue where this cut), "
            "read the sandbox transcript with logs (offset), "
            f"or re-run with a larger max_output (up to {MAX_CALL_OUTPUT})."
        )
    return out


def file_chunk(path: str, page: bytes, more: bool, size: int | None, offset: int, limit: int) -> dict[str, object]:
    """``limit`` bytes of a file from ``offset`` (``page`` starts there and may hold a few bytes
    more, to finish a character): text when it is UTF-8, else base64."""
    chunk = page[:limit]
    after = more or len(page) > limit  # bytes exist past this chunk
    text: str | None = None
    for cut in range(4 if after else 1):  # a character split at the end
        if cut and cut >= len(chunk):
            break  # never an empty page: a page too small for one character comes as base64
        try:
            text = chunk[: len(chunk) - cut].decode()
        except UnicodeDecodeError:
            continue
        chunk = chunk[: len(chunk) - cut]
        break
    binary = text is None or "\x00" in text
    known = size if size is not None else offset + len(page) + (1 if more else 0)
    body: dict[str, object] = {
        "path": path,
        "size": known,
        "size_exact": size is not None or not more,
        "offset": offset,
        "returned_bytes": len(chunk),
        "content": base64.b64encode(chunk).decode() if binary else text,
        "base64": binary,
    }
    end = offset + len(chunk)
    body["truncated"] = end < known
    if end < known:
        body["next_offset"] = end
        body["how_to_get_more"] = f"call file_read again with offset={end} (and a larger max_bytes to get more at once)"
    return body
