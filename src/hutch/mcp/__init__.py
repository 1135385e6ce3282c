"""The MCP server: hutch's sandboxes as Model Context Protocol tools.

Each tool is a few lines over :class:`hutch.client.AsyncClient`. Results are the same
JSON documents the CLI prints with ``--json`` (as text and as structured content);
failures are tool errors carrying ``{"error": {"kind", "message", "hint"}}``, exactly as
the CLI reports them. Captured output is capped per stream, with explicit truncation
metadata saying how to get the rest.

    server.py   the server (build_server, serve) and its tools
    run.py      the run tool: hutch run in one call
    shapes.py   what the tools share: results, errors, argument types, output caps
"""

from __future__ import annotations

from hutch.mcp.server import INSTRUCTIONS, HutchMCP, build_server, serve
from hutch.mcp.shapes import DEFAULT_MAX_OUTPUT, MAX_CALL_OUTPUT, cap_output, error_result, file_chunk

__all__ = [
    "DEFAULT_MAX_OUTPUT",
    "INSTRUCTIONS",
    "MAX_CALL_OUTPUT",
    "HutchMCP",
    "build_server",
    "cap_output",
    "error_result",
    "file_chunk",
    "serve",
]
