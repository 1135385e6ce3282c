"""The hot exec route (hutch.server.fastexec): a foreground exec is answered without FastAPI's
routing, with the same answers as the general route; everything else still reaches it."""

from __future__ import annotations

import json
from typing import Any

import fastapi.routing
import pytest
from tests.unit.test_app import SANDBOXES, assert_error


@pytest.fixture
def sbx(app_client: Any) -> dict[str, Any]:
    resp = app_client.post(SANDBOXES, json={"provider": "fake", "name": "box"})
    assert resp.status_code == 201, resp.text
    return dict(resp.json())


@pytest.fixture
def no_fastapi_routing(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """FastAPI's request handling (dependency solving) records each request it handles."""
    seen: list[str] = []
    real = fastapi.routing.solve_dependencies

    async def solve(*args: Any, **kw: Any) -> Any:
        seen.append(kw["request"].url.path)
        return await real(*args, **kw)

    monkeypatch.setattr(fastapi.routing, "solve_dependencies", solve)
    return seen


def test_a_foreground_exec_skips_fastapi_and_answers_the_result(
    app_client: Any, sbx: dict[str, Any], no_fastapi_routing: list[str]
) -> None:
    resp = app_client.post(f"{SANDBOXES}/{sbx['id']}/exec", json={"command": ["echo", "hi"]})
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"] == "application/json"
    body = resp.json()
    assert body["exit_code"] == 0 and body["status"] == "completed" and body["sandbox_id"] == sbx["id"]
    assert body["run_id"].startswith("run_") and isinstance(body["duration_ms"], float)
    assert no_fastapi_routing == []
    # recorded as any run: started and finished once
    run = app_client.get(f"/v1/runs/{body['run_id']}").json()
    assert run["status"] == "completed" and run["exit_code"] == 0
    assert no_fastapi_routing == [f"/v1/runs/{body['run_id']}"]


def test_the_fast_route_answers_errors_as_the_app_does(
    app_client: Any, sbx: dict[str, Any], no_fastapi_routing: list[str]
) -> None:
    path = f"{SANDBOXES}/{sbx['id']}/exec"
    assert_error(app_client.post(f"{SANDBOXES}/nope/exec", json={"command": ["true"]}), 404, "not_found")
    err = assert_error(app_client.post(path, json={"command": ["true"], "timeout": "x"}), 400, "invalid")
    assert "timeout" in err["message"]
    err = assert_error(app_client.post(path, json={"command": ["a\x00b"]}), 400, "invalid")
    assert "NUL" in err["message"]
    assert_error(app_client.post(path, content=b"{not json", headers={"content-type": "application/json"}), 400, "invalid")
    assert_error(app_client.post(path, json={"command": []}), 400, "invalid")
    assert no_fastapi_routing == []


def test_the_fast_route_refuses_a_body_over_the_limit(app_client: Any, sbx: dict[str, Any]) -> None:
    from hutch.server.app import MAX_JSON

    body = b'{"command": ["true"], "stdin": "' + b"a" * (MAX_JSON + 1) + b'"}'
    resp = app_client.post(f"{SANDBOXES}/{sbx['id']}/exec", content=body, headers={"content-type": "application/json"})
    assert resp.status_code == 413, resp.text  # as the general route: refused while it is read
    err = resp.json()["error"]
    assert err["kind"] == "invalid" and "larger than the limit" in err["message"] and err["hint"]


def test_background_keys_streams_and_credentials_still_reach_the_general_route(
    app_client: Any, sbx: dict[str, Any], no_fastapi_routing: list[str]
) -> None:
    path = f"{SANDBOXES}/{sbx['id']}/exec"
    run = app_client.post(path, json={"command": ["true"], "background": True})
    assert run.status_code == 200, run.text
    assert run.json()["id"].startswith("run_")  # the run's record, not a result
    assert no_fastapi_routing == [path]
    keyed = app_client.post(path, json={"command": ["true"], "background": True}, headers={"Idempotency-Key": "k-1"})
    again = app_client.post(path, json={"command": ["true"], "background": True}, headers={"Idempotency-Key": "k-1"})
    assert keyed.json()["id"] == again.json()["id"]  # performed once per key
    err = assert_error(app_client.post(path, json={"command": ["true"]}, headers={"Idempotency-Key": "k-2"}), 400, "invalid")
    assert "background" in err["message"]
    lines = app_client.post(path + "?stream=true", json={"command": ["echo", "x"]}).text.splitlines()
    assert json.loads(lines[0])["type"] == "run"
    assert json.loads(lines[-1])["type"] == "exit"
    bad = app_client.post(path, json={"command": ["true"]}, headers={"x-hutch-credentials": "%%%"})
    assert_error(bad, 400, "invalid")
