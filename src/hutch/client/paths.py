"""The URLs and query parameters of the API, shared by :class:`~hutch.client.Client` and
:class:`~hutch.client.AsyncClient` (the route table with its bodies: :mod:`hutch.wire.routes`)."""

from __future__ import annotations

TYPE_CHECKING = False  # typing and urllib.parse stay out of the CLI's start
if TYPE_CHECKING:
    from typing import Any

    import httpx

    from hutch.client.transport import Response


# What a path segment keeps as it is (quote's own safe set with safe=""): ids and names are these.
PLAIN = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~")


def quote(segment: str, safe: str = "") -> str:
    """``urllib.parse.quote(segment, safe="")``; a segment of plain characters without loading it."""
    if not safe and PLAIN.issuperset(segment):
        return segment
    from urllib import parse

    return parse.quote(segment, safe=safe)


def sandbox(ref: str) -> str:
    return "/v1/sandboxes/" + quote(ref, safe="")


def run(run_id: str) -> str:
    return "/v1/runs/" + quote(run_id, safe="")


def approval(approval_id: str) -> str:
    return "/v1/approvals/" + quote(approval_id, safe="")


def snapshot(name: str) -> str:
    return "/v1/snapshots/" + quote(name, safe="")


def tenant(name: str) -> str:
    return "/v1/tenants/" + quote(name, safe="")


def certificate(ref: str) -> str:
    return "/v1/gateway/certificates/" + quote(ref, safe="")


def node(name: str) -> str:
    return "/v1/cluster/nodes/" + quote(name, safe="")


def provider(name: str) -> str:
    return "/v1/providers/" + quote(name, safe="")


def key(ref: str) -> str:
    return "/v1/keys/" + quote(ref, safe="")


def list_params(include_all: bool, labels: dict[str, str] | None, state: str | None) -> dict[str, object]:
    return {"all": include_all, "label": [f"{k}={v}" for k, v in (labels or {}).items()] or None, "state": state}


def event_params(
    ref: str | None, types: list[str] | None, since: float | None, after: int, limit: int, run: str | None
) -> dict[str, object]:
    params: dict[str, object] = {"after": after, "limit": limit}
    for key, value in (("sandbox", ref), ("type", types), ("since", since), ("run", run)):
        if value:
            params[key] = value
    return params


def clean(params: dict[str, Any]) -> dict[str, Any]:
    """Booleans as the daemon reads them, unset values left out (httpx would send them empty)."""
    return {k: (str(v).lower() if isinstance(v, bool) else v) for k, v in params.items() if v is not None}


def truncated(resp: Response | httpx.Response) -> bool:
    return resp.headers.get("x-hutch-truncated") == "1"


def page(resp: Response | httpx.Response) -> tuple[bytes, bool, int | None]:
    """A ranged read's bytes, whether more follow, and the file's size when known."""
    size = resp.headers.get("x-hutch-size")
    return resp.content, truncated(resp), int(size) if size else None
