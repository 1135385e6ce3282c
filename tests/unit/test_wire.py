"""The wire contract (hutch.wire) against the three other places that say what a body is:
the server's pydantic models, the daemon's published OpenAPI document, and the SDK's
result types. Each body must have the same keys, the same required keys and compatible
types everywhere; every route of the app is in the wire's route table and carries there the
bodies the document says. (What the daemon really sends is held to wire by
tests/unit/test_wire_conformance.py.)"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import typing
from enum import Enum
from typing import Any

import pytest
from pydantic import BaseModel, TypeAdapter

from hutch import wire
from hutch.wire.pydantic import pydantic_type
from hutch.wire.routes import ROUTES

# modules whose pydantic models are bodies of the API (RawOutput is a provider's outcome, not a body)
MODEL_MODULES = (
    "hutch.models",
    "hutch.netpolicy",
    "hutch.server.app",
    "hutch.server.changes",
    "hutch.server.keys",
    "hutch.server.images",
    "hutch.server.ui.loopback",
    "hutch.server.lifecycle",
    "hutch.server.oneshot",
    "hutch.server.pool",
    "hutch.server.cluster",
    "hutch.server.runs",
    "hutch.server.workspaces",
)
NOT_BODIES = {"RawOutput"}


# -- JSON Schema -> a comparable shape ---------------------------------------------------------


def shape(s: dict[str, Any], defs: dict[str, Any]) -> Any:
    """What a schema says about a value's type: named bodies by name, enums by their values,
    unions as sets; titles, descriptions, defaults and bounds left out."""
    if "$ref" in s:
        name = s["$ref"].rsplit("/", 1)[-1]
        target = defs[name]
        return ("enum", frozenset(target["enum"])) if "enum" in target else ("body", name)
    for key in ("anyOf", "oneOf"):
        if key in s:
            members: set[Any] = set()
            for member in s[key]:
                one = shape(member, defs)
                members |= one[1] if one[0] == "union" else {one}
            return ("union", frozenset(members)) if len(members) > 1 else members.pop()
    if "allOf" in s and len(s["allOf"]) == 1:
        return shape(s["allOf"][0], defs)
    if "const" in s:
        return ("enum", frozenset([s["const"]]))
    if "enum" in s:
        return ("enum", frozenset(s["enum"]))
    kind = s.get("type")
    if kind == "array":
        return ("array", shape(s.get("items", {}), defs))
    if kind == "object" and isinstance(s.get("additionalProperties"), dict):
        return ("map", shape(s["additionalProperties"], defs))
    if kind == "object" and "properties" in s:
        return ("body", s.get("title"))
    return (kind or "any",)


def fields(s: dict[str, Any], defs: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
    return {k: shape(v, defs) for k, v in s.get("properties", {}).items()}, set(s.get("required", []))


def wire_schema(tp: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    s = TypeAdapter(pydantic_type(tp)).json_schema()
    return s, s.get("$defs", {})


def wire_fields(td: Any) -> tuple[dict[str, Any], set[str]]:
    return fields(*wire_schema(td))


def wire_types() -> dict[str, Any]:
    return {name: getattr(wire, name) for name in wire.__all__}


def server_models() -> dict[str, type[BaseModel]]:
    found: dict[str, type[BaseModel]] = {}
    for name in MODEL_MODULES:
        for value in vars(importlib.import_module(name)).values():
            if inspect.isclass(value) and issubclass(value, BaseModel) and value is not BaseModel:
                found.setdefault(value.__name__, value)
    return {k: v for k, v in found.items() if k not in NOT_BODIES}


@pytest.fixture(scope="module")
def openapi() -> dict[str, Any]:
    import asyncio
    import tempfile
    from pathlib import Path

    from hutch.config import Settings
    from hutch.server.app import create_app
    from hutch.service import Service

    with tempfile.TemporaryDirectory(prefix="hutch-wire-") as home:
        service = Service(Settings(home=Path(home), provider="fake"))
        try:
            return create_app(service).openapi()
        finally:
            asyncio.run(service.close())


# -- the server's models ------------------------------------------------------------------------


def test_the_servers_models_are_the_wire_bodies() -> None:
    types = wire_types()
    models = server_models()
    assert len(models) >= 20
    for name, model in models.items():
        assert typing.is_typeddict(types.get(name)), f"the server's model {name} has no body of its name in hutch.wire"
        s = model.model_json_schema(mode="validation")
        got, want = fields(s, s.get("$defs", {})), wire_fields(types[name])
        assert got[0] == want[0], f"{name}: keys or types differ: server {got[0]} wire {want[0]}"
        assert got[1] == want[1], f"{name}: required keys differ: server {sorted(got[1])} wire {sorted(want[1])}"


def test_the_servers_enums_are_the_wire_literals() -> None:
    from hutch.errors import KINDS
    from hutch.models import ApprovalStatus, RunStatus, SandboxState

    assert set(typing.get_args(wire.ErrorKind)) == set(KINDS)

    for enum in (ApprovalStatus, RunStatus, SandboxState):
        assert issubclass(enum, Enum)
        assert set(typing.get_args(getattr(wire, enum.__name__))) == {e.value for e in enum}


# -- the published OpenAPI document --------------------------------------------------------------


def test_every_route_of_the_app_is_in_the_wire_table(openapi: dict[str, Any]) -> None:
    published = {(m.upper(), p) for p, item in openapi["paths"].items() for m in item}
    table = {(r.method, r.path) for r in ROUTES}
    assert len(table) == len(ROUTES), "a route is in the table twice"
    assert published - table == set(), "routes the app has and hutch.wire.routes does not"
    assert table - published == set(), "routes in hutch.wire.routes the app does not have"


def test_every_published_schema_is_a_wire_body(openapi: dict[str, Any]) -> None:
    components = openapi["components"]["schemas"]
    types = wire_types()
    assert len(components) >= 40
    for name, component in components.items():
        assert name in types, f"the OpenAPI document's {name} is not in hutch.wire"
        tp = types[name]
        if "enum" in component:
            assert set(component["enum"]) == set(typing.get_args(tp)), name
            continue
        assert typing.is_typeddict(tp), name
        got, want = fields(component, components), wire_fields(tp)
        assert got[0] == want[0], f"{name}: keys or types differ: published {got[0]} wire {want[0]}"
        assert got[1] == want[1], f"{name}: required keys differ: published {sorted(got[1])} wire {sorted(want[1])}"


def _json(content: dict[str, Any], media: str = "application/json") -> dict[str, Any] | None:
    body = content.get(media)
    return None if body is None else dict(body["schema"])


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: f"{r.method} {r.path}")
def test_each_route_carries_its_wire_bodies(openapi: dict[str, Any], route: Any) -> None:
    components = openapi["components"]["schemas"]
    op = openapi["paths"][route.path][route.method.lower()]
    request = _json(op.get("requestBody", {}).get("content", {}))
    if route.request_media is not None:
        assert route.request_media in op["requestBody"]["content"]
    if route.request is None:
        assert request is None
    else:
        assert request is not None and shape(request, components) == ("body", route.request.__name__)
    answer = op["responses"][str(route.status)]
    response = _json(answer.get("content", {}))
    if route.response is None:
        assert response is None and route.media in answer["content"], "bytes, of the type the route sends"
    else:
        assert response is not None
        assert shape(response, components) == shape(*wire_schema(route.response))
    if route.stream is not None:
        frames = _json(answer["content"], "application/x-ndjson")
        assert frames is not None and shape(frames, components) == shape(*wire_schema(route.stream))
    failures = [_json(a["content"]) for code, a in op["responses"].items() if code.startswith(("4", "5"))]
    assert failures and all(f is not None and shape(f, components) == ("body", "Error") for f in failures)


# -- the SDK's result types -----------------------------------------------------------------------


def test_the_sdk_results_carry_the_wire_fields() -> None:
    from hutch.sdk.results import ExecResult, FileInfo

    result = {f.name for f in dataclasses.fields(ExecResult)}
    keys = set(wire.ExecResult.__annotations__) | set(wire.ExecSummary.__annotations__)
    # the SDK decodes the output: stdout/stderr are text, *_raw the bytes, instead of *_base64
    assert result == (keys - {"stdout_base64", "stderr_base64"}) | {"stdout_raw", "stderr_raw"}
    assert {f.name for f in dataclasses.fields(FileInfo)} == set(wire.FileEntry.__annotations__)
