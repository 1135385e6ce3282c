"""The MCP server's image tools: ``image_list`` and ``image_pull`` (a sandbox starts from one with
``sandbox_create``'s or ``run``'s ``image``). Registered by :func:`hutch.mcp.server.build_server`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Annotated, Any, cast

from mcp_types import CallToolResult, ToolAnnotations
from pydantic import Field

from hutch.client.images import afollow
from hutch.mcp.shapes import Body, _call

if TYPE_CHECKING:
    from hutch.client import AsyncClient
    from hutch.mcp.server import HutchMCP


def _shown(image: Any) -> dict[str, Any]:
    """An image as a tool shows it: what an agent chooses by (the layers' digests and the host path left out)."""
    keep = ("id", "names", "digest", "platform", "size", "created", "source", "config", "sandboxes")
    return {k: image[k] for k in keep if k in image} | {"layers": len(image.get("layers", []))}


def register(app: HutchMCP, client: AsyncClient) -> None:
    @app.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
    async def image_list() -> CallToolResult:
        """List the images sandboxes can start from (sandbox_create's `image`: a name, or an id):
        names, platform, size, the defaults each sets (env, workdir, user, entrypoint) and the live
        sandboxes using it. Without an image a sandbox sees the host's /usr read-only."""

        async def work() -> Body:
            return {"images": [_shown(i) for i in await client.images()]}

        return await _call(work())

    @app.tool(annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=True, open_world_hint=True))
    async def image_pull(
        ref: Annotated[
            str,
            Field(description="A registry reference: 'python:3.12-slim', 'debian:bookworm', 'ghcr.io/org/img:tag'."),
        ],
    ) -> CallToolResult:
        """Pull an image from its registry into hutch's store (layers already stored are not downloaded
        again), then start sandboxes from it with sandbox_create's `image`. The registry login, if
        any, is the one of the environment hutch mcp runs in. Returns the image and the bytes transferred."""

        async def work() -> Body:
            done = await afollow(cast("AsyncIterator[dict[str, Any]]", client.image_pull(ref)))
            return {"image": _shown(done["image"]), "transferred": done["transferred"]}

        return await _call(work())
