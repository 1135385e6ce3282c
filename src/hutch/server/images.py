"""HTTP routes for images: pull, import (an uploaded archive or root filesystem), list, inspect, rm, prune.

A pull or an import answers NDJSON frames (``wire.ImagePullFrame``): what fails before its first
frame is a plain error answer; after it, an ``error`` frame ends the stream. A pull's registry
login travels in the ``x-hutch-registry-auth`` header (base64url JSON: username, password,
source), is used for that pull only and is never stored or shown.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.types import Receive, Scope, Send

from hutch.credentials import REGISTRY_HEADER, RegistryLogin, decode_login
from hutch.errors import InvalidError
from hutch.server.edge import too_large
from hutch.service import Service
from hutch.service.images import MAX_IMPORT

NDJSON = "application/x-ndjson"
FRAMES: dict[str, Any] = {
    "description": "NDJSON frames: resolved, layer, progress (received for an import), then done or error",
    "content": {NDJSON: {"schema": {"type": "string", "description": "one JSON frame per line"}}},
}


class FrameStream(StreamingResponse):
    media_type = NDJSON


class UploadFrameStream(FrameStream):
    """The answer to an upload that the import is still reading as the frames go out: nothing
    else may take the request's messages (Starlette would listen for a disconnect on them, and
    take body chunks). A client that leaves mid-upload ends the body early, which ends the
    import with nothing kept; one that leaves after it is not written to (uvicorn drops sends)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.stream_response(send)


class ImagePullRequest(BaseModel):
    ref: str
    insecure: bool = False
    platform: str | None = None


async def _ndjson(first: dict[str, Any], items: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    yield json.dumps(first).encode() + b"\n"
    async for item in items:
        yield json.dumps(item).encode() + b"\n"


async def _streamed(items: AsyncIterator[dict[str, Any]], kind: type[FrameStream] = FrameStream) -> FrameStream:
    first = await anext(items)  # errors before the first frame are plain error answers
    if first.get("type") == "error":
        from hutch.errors import HutchError

        raise HutchError.from_dict(first["error"])
    return kind(_ndjson(first, items), media_type=NDJSON)


async def _body(request: Request) -> AsyncIterator[bytes]:
    """The request's body as it arrives; over the route's limit, or cut by the client, a hutch error."""
    try:
        async for chunk in request.stream():
            yield chunk
    except HTTPException as exc:
        if exc.status_code == 413:
            raise too_large(request.scope) from None
        raise InvalidError(f"the upload was refused: {exc.detail}") from None
    except ClientDisconnect:
        raise InvalidError("the upload ended before its end (the client went away)", hint="nothing was kept") from None


def _login(request: Request) -> RegistryLogin | None:
    raw = request.headers.get(REGISTRY_HEADER)
    return decode_login(raw) if raw else None


def router(service: Service) -> APIRouter:
    r = APIRouter()
    images = service.images

    @r.post("/v1/images/pull", response_model=None, response_class=FrameStream, responses={200: FRAMES})
    async def pull(req: ImagePullRequest, request: Request) -> FrameStream:
        """Pull an image from a registry into the store (a multi-platform image: the host's
        platform). The answer is NDJSON: ``resolved``, ``layer`` and ``progress`` frames, then
        ``done`` with the image and the blob bytes transferred (0 when every layer was stored)."""
        return await _streamed(images.pull(req.ref, _login(request), insecure=req.insecure, platform=req.platform))

    @r.post(
        "/v1/images/import", response_model=None, response_class=FrameStream, responses={200: FRAMES}, max_body_size=MAX_IMPORT
    )
    async def import_(
        request: Request,
        format: str,  # noqa: A002 - the query's name
        name: str | None = None,
        ref: str | None = None,
        changes: str | None = Query(None, max_length=1 << 20),
    ) -> FrameStream:
        """Import an uploaded image: ``format`` ``oci`` (an OCI image layout as a tar: what
        ``oci-archive:`` files are, and how the client sends ``oci:DIR``), ``docker`` (what
        ``docker save`` writes) or ``rootfs`` (a root filesystem tar, plain, gzip or zstd).
        ``name`` names the result (else the names the archive carries); ``ref`` picks an image
        of an OCI layout by its ref name. The body is imported as it arrives, nothing spooled
        (at most 64 GiB, refused as it is read); the answer, which may begin before the upload
        ends, is NDJSON like a pull's. ``changes``: a JSON object (``CommitChanges``: env,
        workdir, user, cmd, entrypoint) applied to the image's config."""
        if name is not None and not name:
            raise InvalidError("name is empty", hint="drop it, or give NAME[:TAG]")
        edit = _changes(changes)
        frames = images.import_(format, _body(request), name=name, ref=ref, changes=edit)
        return await _streamed(frames, UploadFrameStream)

    @r.get("/v1/images")
    async def list_() -> list[dict[str, Any]]:
        return images.list()

    @r.get("/v1/images/inspect")
    async def inspect(ref: str) -> dict[str, Any]:
        return images.inspect(ref)

    @r.delete("/v1/images")
    async def remove(ref: str, force: bool = False) -> dict[str, Any]:
        """Remove a name (a name given) or the image (its id given); an image used by a live sandbox
        is a ``conflict`` unless ``force`` (its files then stay until those sandboxes are gone)."""
        return await images.remove(ref, force)

    @r.post("/v1/images/prune")
    async def prune() -> dict[str, Any]:
        """Remove the files no stored image and no live sandbox uses (and interrupted downloads); what went."""
        return await images.prune()

    return r


def _changes(text: str | None) -> dict[str, Any] | None:
    """The import's ``changes`` query (JSON), checked as a commit's changes are."""
    if text is None:
        return None
    from hutch.server.changes import CommitChanges

    try:
        got = CommitChanges.model_validate_json(text).model_dump(exclude_none=True)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first.get("loc", ())) or "changes"
        raise InvalidError(
            f"invalid changes ({where}: {first.get('msg')})",
            hint='a JSON object of env (["K=V"]), workdir, user, cmd and entrypoint (lists of strings)',
        ) from None
    for item in got.get("env", []):
        if not item.partition("=")[0] or "=" not in item:
            raise InvalidError(f"invalid changes (env entry {item[:100]!r})", hint="each env entry is NAME=VALUE")
    return got
