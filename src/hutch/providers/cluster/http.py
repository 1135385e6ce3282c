"""One node's daemon over HTTP: the same API every client uses, with the gateway's own
credentials (the token the node's actor made; TLS verified against the node's own CA).

The provider layer sits below the client package, so this is a small httpx client of its
own. A node that does not answer is ``unavailable`` naming the node; an error the node's
daemon answers is raised as the same kind.
"""

from __future__ import annotations

import json
import logging
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote

import httpx

from hutch.errors import HutchError, UnavailableError

TIMEOUT = httpx.Timeout(60.0, connect=5.0)
logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per request to a node in the daemon's log
HEALTH_TIMEOUT = httpx.Timeout(3.0, connect=2.0)


def sandbox(ref: str) -> str:
    return "/v1/sandboxes/" + quote(ref, safe="")


def run(run_id: str) -> str:
    return "/v1/runs/" + quote(run_id, safe="")


class NodeClient:
    def __init__(self, name: str, url: str, token: str, ca_pem: str) -> None:
        self.name = name
        self.url = url
        ctx = self.ssl = ssl.create_default_context(cadata=ca_pem)
        self.token = token
        self.http = httpx.AsyncClient(
            base_url=url, verify=ctx, timeout=TIMEOUT, headers={"authorization": f"Bearer {token}"}, trust_env=False
        )

    def unreachable(self, exc: BaseException) -> UnavailableError:
        return UnavailableError(
            f"node {self.name} does not answer ({exc.__class__.__name__}: {exc})",
            hint="hutch cluster nodes shows each node's state; its sandboxes become lost if it stays away",
        )

    async def close(self) -> None:
        await self.http.aclose()

    async def request(self, method: str, url: str, **kw: Any) -> httpx.Response:
        try:
            resp = await self.http.request(method, url, **kw)
        except httpx.HTTPError as exc:
            raise self.unreachable(exc) from None
        if resp.status_code >= 400:
            try:
                body = resp.json()
            except ValueError:
                body = {"kind": "unavailable" if resp.status_code >= 500 else "internal", "message": resp.text[:500]}
            raise HutchError.from_dict(body)
        return resp

    async def json(self, method: str, url: str, **kw: Any) -> Any:
        return (await self.request(method, url, **kw)).json()

    async def health(self) -> dict[str, Any]:
        resp = await self.request("GET", "/v1/health", timeout=HEALTH_TIMEOUT)
        doc: dict[str, Any] = resp.json()
        return doc

    async def stream(self, method: str, url: str, **kw: Any) -> AsyncIterator[dict[str, Any]]:
        """An NDJSON answer, one event at a time."""
        try:
            async with self.http.stream(method, url, timeout=httpx.Timeout(None, connect=5.0), **kw) as resp:
                if resp.status_code >= 400:
                    await resp.aread()
                    raise HutchError.from_dict(resp.json())
                async for line in resp.aiter_lines():
                    if line.strip():
                        yield json.loads(line)
        except httpx.HTTPError as exc:
            raise self.unreachable(exc) from None

    @asynccontextmanager
    async def raw_stream(self, method: str, url: str, **kw: Any) -> AsyncIterator[AsyncIterator[bytes]]:
        """A byte answer (a tar), chunk by chunk."""
        try:
            async with self.http.stream(method, url, timeout=httpx.Timeout(None, connect=5.0), **kw) as resp:
                if resp.status_code >= 400:
                    await resp.aread()
                    raise HutchError.from_dict(resp.json())
                yield resp.aiter_bytes()
        except httpx.HTTPError as exc:
            raise self.unreachable(exc) from None

    async def websocket(self, url: str) -> Any:
        """One of the node's WebSockets (an interactive run's attach, a port's connection), open."""
        from websockets.asyncio.client import connect
        from websockets.exceptions import InvalidStatus

        uri = "wss:" + self.url.partition(":")[2] + url
        try:
            return await connect(uri, ssl=self.ssl, additional_headers={"authorization": f"Bearer {self.token}"}, max_size=None)
        except InvalidStatus as exc:
            raise self.unreachable(RuntimeError(f"the WebSocket {url} was refused (HTTP {exc.response.status_code})")) from None
        except OSError as exc:
            raise self.unreachable(exc) from None
