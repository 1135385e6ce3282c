"""The HTTP client of the hutch API, used by the CLI, the SDK and the MCP server.

:class:`Client` (standard library only, for the CLI's start-up budget) and
:class:`AsyncClient` (httpx) speak JSON to the daemon's unix socket, starting the daemon on
demand, or over TCP to ``HUTCH_HOST`` (:class:`Endpoint`). They return :mod:`hutch.wire`
bodies: the edges never import the server, the Service or a provider.
"""

from __future__ import annotations

from hutch.client.endpoint import Endpoint
from hutch.client.sync import AsyncClient, Client

__all__ = ["AsyncClient", "Client", "Endpoint"]
