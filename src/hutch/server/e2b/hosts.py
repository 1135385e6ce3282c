"""``E2B_DOMAIN`` mode: the SDKs' own host names, on the gateway's TLS listener.

With the setting ``e2b_domain`` (a wildcard name ``*.DOMAIN`` routed to the gateway, with a
certificate for it), ``https://api.DOMAIN/...`` is the control plane (``/e2b/api/...``) and
``https://PORT-ID.DOMAIN/...`` is the sandbox ``ID``: envd when PORT is 49983
(``/e2b/envd/...``), any other port relayed into the sandbox (:mod:`.ports`). The request is
rewritten here, before authentication, into the same paths the ``E2B_API_URL`` /
``E2B_SANDBOX_URL`` mode uses; everything after that is shared.
"""

from __future__ import annotations

import re
from typing import Any

from hutch.server.e2b.auth import ENVD_PORT, header, hutch_id

Scope = dict[str, Any]
SANDBOX_LABEL = re.compile(r"^(\d{1,5})-(sbx[-_][0-9a-z]{4,64})$")


def route(host: str, domain: str) -> tuple[str, str | None, int | None] | None:
    """``("api", None, None)``, ``("envd", SANDBOX, PORT)`` or None: not a name of ``domain``."""
    name = host.rsplit(":", 1)[0] if not host.startswith("[") else ""
    name = name.lower().rstrip(".")
    if not name.endswith("." + domain):
        return None
    label = name[: -len(domain) - 1]
    if label == "api":
        return "api", None, None
    match = SANDBOX_LABEL.match(label)
    if match is None:
        return None
    return "envd", hutch_id(match.group(2)), int(match.group(1))


class Hosts:
    """The ASGI layer in front of the gateway's listener that maps the E2B host names."""

    def __init__(self, app: Any, domain: str) -> None:
        self.app = app
        self.domain = domain.lower().strip(".")

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        found = route(header(scope, b"host") or "", self.domain) if scope["type"] in ("http", "websocket") else None
        if found is None:
            await self.app(scope, receive, send)
            return
        kind, sandbox, port = found
        prefix = "/e2b/api" if kind == "api" else "/e2b/envd"
        path = scope.get("path", "/")
        scope = dict(scope)
        scope["path"] = prefix + path
        scope["raw_path"] = prefix.encode() + (scope.get("raw_path") or path.encode())
        if kind == "envd":
            headers = [(k, v) for k, v in scope.get("headers", []) if k not in (b"e2b-sandbox-id", b"e2b-sandbox-port")]
            headers += [(b"e2b-sandbox-id", str(sandbox).encode()), (b"e2b-sandbox-port", str(port or ENVD_PORT).encode())]
            scope["headers"] = headers
        await self.app(scope, receive, send)
