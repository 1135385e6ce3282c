"""The server is an edge: it reads through the Service only, and answers every failure with one handler."""

from __future__ import annotations

import ast
import time
from pathlib import Path
from typing import Any

from fastapi.exceptions import RequestValidationError, WebSocketRequestValidationError
from pydantic import ValidationError
from starlette.exceptions import HTTPException

import hutch.server
from hutch.config import Settings
from hutch.errors import HutchError, InvalidError
from hutch.server import errors
from hutch.server.app import create_app
from hutch.server.edge import ClientGone
from hutch.service import Service

SERVER = Path(hutch.server.__file__).resolve().parent


def test_the_server_reads_the_store_only_through_the_service() -> None:
    found = []
    for path in sorted(SERVER.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr == "store":
                found.append(f"{path.name}:{node.lineno}")
    assert found == []


def test_the_app_has_one_error_handler(settings: Settings) -> None:
    app = create_app(Service(settings))
    handlers = {
        kind: h
        for kind, h in app.exception_handlers.items()
        if isinstance(kind, type) and kind is not WebSocketRequestValidationError  # FastAPI's: closes the socket
    }
    assert {HutchError, ClientGone, RequestValidationError, ValidationError, HTTPException, Exception} <= set(handlers)
    assert set(handlers.values()) == {errors.handle}


def test_error_bodies_keep_their_statuses() -> None:
    invalid = {"error": {"kind": "invalid", "message": "bad", "hint": "h"}}
    assert errors.error_body(InvalidError("bad", hint="h")) == (400, invalid)
    status, body = errors.error_body(RuntimeError("boom"))
    assert (status, body["error"]["kind"], body["error"]["message"]) == (500, "internal", "RuntimeError: boom")
    assert errors.error_body(HTTPException(404))[1]["error"]["kind"] == "not_found"
    assert errors.error_body(HTTPException(405))[0] == 405
    assert errors.unexpected(RuntimeError()) and not errors.unexpected(InvalidError("x"))


def test_events_are_read_through_the_service(app_client: Any) -> None:
    sbx = app_client.post("/v1/sandboxes", json={"provider": "fake"}).json()
    run = app_client.post(f"/v1/sandboxes/{sbx['id']}/exec", json={"command": ["true"]}).json()
    types = [e["type"] for e in app_client.get(f"/v1/sandboxes/{sbx['id']}/events").json()]
    assert types[0] == "sandbox_created" and "run_finished" in types
    of_run = app_client.get("/v1/events", params={"run": run["run_id"][:12]}).json()
    assert of_run and {e["run_id"] for e in of_run} == {run["run_id"]}
    future = app_client.get("/v1/events", params={"since": time.time() + 3 * 86400})
    assert (future.status_code, future.json()["error"]["kind"]) == (400, "invalid")
    assert app_client.get("/v1/events", params={"sandbox": "nope"}).status_code == 404
