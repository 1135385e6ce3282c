"""The HTTP client of the hutch API, used by the CLI, the SDK and the MCP server.

:class:`Client` (standard library only, for the CLI's start-up budget) and
:class:`AsyncClient` (httpx) have one method per call of the API and return its
:mod:`hutch.wire` body: the edges never import the Service or a provider. Each sends
through its transport::

    sync.py       Client          the calls, sync
    aio.py        AsyncClient     the calls the async SDK and the MCP server make, awaited
    paths.py                      the URLs and query parameters both build
    transport.py  Transport       one connection per request; AsyncTransport: an httpx pool
    retry.py                      which requests are sent again after a dropped connection
    endpoint.py   Endpoint        where the daemon is: the unix socket or HUTCH_HOST (+ token, TLS)
    launcher.py   ensure_daemon   start the local daemon on demand
    transfer.py                   push and pull: the local tree's manifest, the tar, a safe pull
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # (typing stays out of the CLI's start)
if TYPE_CHECKING:
    from typing import Any

    from hutch.client.aio import AsyncClient
    from hutch.client.endpoint import Endpoint
    from hutch.client.launcher import ensure_daemon
    from hutch.client.sync import Client
    from hutch.client.transport import Response

__all__ = ["AsyncClient", "Client", "Endpoint", "Response", "ensure_daemon"]

# Each name's module, imported on first use: the CLI's Client does not load the async
# client's module (nor the async client the sync one's).
_WHERE = {
    "AsyncClient": "aio",
    "Client": "sync",
    "Endpoint": "endpoint",
    "Response": "transport",
    "ensure_daemon": "launcher",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'hutch.client' has no attribute {name!r}")
    module = f"hutch.client.{_WHERE[name]}"
    __import__(module)
    return getattr(sys.modules[module], name)
