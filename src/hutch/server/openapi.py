"""The published OpenAPI document says what the API does: errors are ``{"error": {...}}`` with
the status of their kind (400 for bad input, never FastAPI's 422), each operation lists the
error statuses it can answer, and bodies that are not JSON are declared as what they are.
Every body is the one hutch.wire defines: answers the Service builds as plain dicts get
their schema from :data:`hutch.wire.routes.ROUTES` (with a streamed exec's NDJSON frames),
and tests/unit/test_wire.py holds the whole document to wire.

tests/unit/test_openapi_conformance.py runs schemathesis over this document against the app.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from hutch import wire
from hutch.wire.pydantic import schema as wire_schema
from hutch.wire.routes import ROUTES

NDJSON = "application/x-ndjson"
STATUSES = {
    400: "`invalid`: bad input (a parameter or body out of its bounds, or not what the operation takes)",
    401: "`unauthorized`: no, a wrong, revoked or expired token or API key, or a key without the scope the operation "
    "needs (a TCP listener; the unix socket needs none)",
    403: "`policy`, `approval_required` (the sandbox's policy wants a human's approval: `approval_id`) "
    "or `permission_denied` (inside the sandbox)",
    404: "`not_found`: no such sandbox, run, approval, snapshot, tenant or image, or one no longer live",
    409: "`conflict`: the state does not allow it (a name taken, a paused or destroyed sandbox, "
    "an ambiguous id prefix, a request racing a destroy)",
    413: "`invalid`: the request body is over the operation's limit (refused while it is read)",
    429: "`capacity`: a limit reached (background runs per sandbox, a key's or a provider's quota, disk space); "
    "`rate_limited`: a key's requests or runs per second or minute, with `Retry-After` (nothing was done: send it again then)",
    500: "`internal`: a bug (logged with its traceback in the daemon's log)",
    503: "`unavailable`: the sandbox or its provider cannot be reached or has failed",
    504: "`timeout`: a wait ran out of time",
}
RAW_BODIES = {  # routes that read their body themselves
    ("post", "/v1/images/import"): (
        "application/x-tar",
        "the image as a tar stream: an OCI image layout, a docker save archive or a root filesystem (see format)",
    ),
    ("put", "/v1/sandboxes/{ref}/files"): ("application/octet-stream", "the file's bytes (at most 64 MiB)"),
    ("post", "/v1/sandboxes/{ref}/push"): (
        "application/x-hutch-push",
        "the manifest's length in decimal, a newline, the manifest (JSON), then a tar of the files sent",
    ),
}

FRAMED_BODIES: dict[tuple[str, str], tuple[object, str, str]] = {  # JSON alone, or framed with the bytes it announces
    ("post", "/v1/run"): (
        wire.RunOnceRequest,
        "application/x-hutch-run",
        "the request's length in decimal, a newline, the request (JSON), then push_size bytes of push body "
        "(as POST /v1/sandboxes/{ref}/push takes it), then with stream_input the command's input, "
        "as much as the input frames allow",
    ),
}

BINARY = {"type": "string", "format": "binary"}
RAW_ANSWERS = {  # routes that answer bytes, not JSON
    ("get", "/v1/sandboxes/{ref}/files"): {
        "description": "the file's bytes (a page of them with ``offset``)",
        "headers": {
            "x-hutch-truncated": {"description": "1 when more of the file follows", "schema": {"type": "string"}},
            "x-hutch-size": {"description": "the file's size, when known (a page)", "schema": {"type": "string"}},
        },
        "content": {"application/octet-stream": {"schema": BINARY}},
    },
    ("get", "/v1/sandboxes/{ref}/pull"): {
        "description": "the workspace as a tar stream",
        "content": {"application/x-tar": {"schema": BINARY}},
    },
}


def _errors(method: str, path: str, op: dict[str, Any]) -> list[int]:
    params = {p["name"] for p in op.get("parameters", [])}
    body = "requestBody" in op
    codes = [401, 429, 500, 503]  # any request over a key's rate: 429
    if params or body:
        codes.append(400)
    if "{" in path or body or params & {"sandbox", "run", "ref"}:  # names something that may be missing or busy
        codes += [404, 409]
    if "{ref}" in path:  # a sandbox's policy (approvals), or a permission inside it
        codes.append(403)
    if body:
        codes.append(413)
    if "timeout" in params:  # the waits
        codes.append(504)
    return sorted(codes)


def fix(schema: dict[str, Any]) -> dict[str, Any]:
    """FastAPI's document, made to say what the app answers."""
    schemas = schema.setdefault("components", {}).setdefault("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    ref = wire_schema(wire.Error, schemas)
    answers(schema, schemas)
    for path, ops in schema.get("paths", {}).items():
        for method, op in ops.items():
            framed = FRAMED_BODIES.get((method, path))
            if framed is not None:
                tp, media, what = framed
                json_body = {"schema": wire_schema(tp, schemas)}
                op["requestBody"] = {
                    "required": True,
                    "description": what,
                    "content": {"application/json": json_body, media: {"schema": BINARY}},
                }
            raw = RAW_BODIES.get((method, path))
            if raw is not None:
                media, what = raw
                op["requestBody"] = {
                    "required": True,
                    "description": what,
                    "content": {media: {"schema": BINARY}},
                }
            responses = op.setdefault("responses", {})
            if (method, path) in RAW_ANSWERS:
                responses["200"] = RAW_ANSWERS[(method, path)]
            responses.pop("422", None)
            for code in _errors(method, path, op):
                responses.setdefault(str(code), {"description": STATUSES[code], "content": {"application/json": {"schema": ref}}})
    schema["components"]["schemas"] = dict(sorted(schemas.items()))
    return schema


def answers(schema: dict[str, Any], schemas: dict[str, Any]) -> None:
    """Each route's answer as hutch.wire says it, where FastAPI knows none (a dict the Service
    built), and the frames of a streamed answer."""
    for route in ROUTES:
        op = schema["paths"].get(route.path, {}).get(route.method.lower())
        if op is None:
            continue  # tests/unit/test_wire.py names it
        answer = op.setdefault("responses", {}).setdefault(str(route.status), {})
        body = answer.get("content", {}).get("application/json")
        if body is not None and route.response is not None and "$ref" not in str(body.get("schema")):
            body["schema"] = wire_schema(route.response, schemas)
        if route.stream is not None:
            answer["content"][NDJSON]["schema"] = wire_schema(route.stream, schemas)


def install(app: FastAPI) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = fix(FastAPI.openapi(app))
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
