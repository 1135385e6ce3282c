"""The HTTP contract of the app, in process (starlette's TestClient, no daemon)."""

from __future__ import annotations

from typing import Any

import pytest

from hutch.errors import HutchError

SANDBOXES = "/v1/sandboxes"


def assert_error(resp: Any, status: int, kind: str, *, hint: bool = True) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    body = resp.json()
    assert set(body) == {"error"}
    err = body["error"]
    assert set(err) <= {"kind", "message", "hint"}
    assert err["kind"] == kind
    assert isinstance(err["message"], str) and err["message"]
    if hint:
        assert isinstance(err.get("hint"), str) and err["hint"], body
    # the client turns the body back into the matching exception
    exc = HutchError.from_dict(body)
    assert (exc.kind, exc.status) == (kind, status)
    return err


@pytest.fixture
def sbx(app_client: Any) -> dict[str, Any]:
    resp = app_client.post(SANDBOXES, json={"provider": "fake", "name": "box"})
    assert resp.status_code == 201, resp.text
    return dict(resp.json())


def test_health(app_client: Any) -> None:
    body = app_client.get("/v1/health").json()
    assert body["ok"] is True and body["version"]


def test_create_get_list_destroy(app_client: Any, sbx: dict[str, Any]) -> None:
    assert sbx["id"].startswith("sbx_")
    assert sbx["state"] == "running"
    assert sbx["spec"]["limits"]["memory"] == 1 << 30
    assert "data" not in sbx  # the provider's private data never leaves the daemon
    got = app_client.get(f"{SANDBOXES}/box").json()
    assert got["id"] == sbx["id"]
    assert "data" not in got
    assert [r["id"] for r in app_client.get(SANDBOXES).json()] == [sbx["id"]]
    gone = app_client.delete(f"{SANDBOXES}/{sbx['id']}")
    assert gone.status_code == 200
    assert gone.json()["existed"] is True
    assert app_client.get(SANDBOXES).json() == []
    assert [r["state"] for r in app_client.get(SANDBOXES, params={"all": "true"}).json()] == ["destroyed"]
    again = app_client.delete(f"{SANDBOXES}/{sbx['id']}")
    assert again.status_code == 200
    assert (again.json()["destroyed"], again.json()["existed"]) == (True, False)


def test_destroy_unknown_is_ok(app_client: Any) -> None:
    resp = app_client.delete(f"{SANDBOXES}/nope")
    assert resp.status_code == 200
    assert resp.json()["existed"] is False


# -- errors ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["", "/exec", "/runs", "/events", "/ls", "/files?path=a"])
def test_unknown_sandbox_is_404_with_hint(app_client: Any, path: str) -> None:
    url = f"{SANDBOXES}/nope{path}"
    resp = app_client.post(url, json={"command": ["true"]}) if path == "/exec" else app_client.get(url)
    err = assert_error(resp, 404, "not_found")
    assert "nope" in err["message"]


def test_get_hint_mentions_hutch_list(app_client: Any) -> None:
    err = assert_error(app_client.get(f"{SANDBOXES}/nope"), 404, "not_found")
    assert "hutch list" in err["hint"]


def test_destroyed_sandbox_exec_is_404(app_client: Any, sbx: dict[str, Any]) -> None:
    app_client.delete(f"{SANDBOXES}/{sbx['id']}")
    resp = app_client.post(f"{SANDBOXES}/{sbx['id']}/exec", json={"command": ["true"]})
    assert_error(resp, 404, "not_found")


def test_duplicate_name_is_409(app_client: Any, sbx: dict[str, Any]) -> None:
    err = assert_error(app_client.post(SANDBOXES, json={"provider": "fake", "name": "box"}), 409, "conflict")
    assert "box" in err["message"]


@pytest.mark.parametrize("memory", ["banana", "-1", "1e3"])
def test_bad_size_is_400(app_client: Any, memory: str) -> None:
    resp = app_client.post(SANDBOXES, json={"provider": "fake", "limits": {"memory": memory}})
    err = assert_error(resp, 400, "invalid")
    assert memory in err["message"]
    assert app_client.get(SANDBOXES, params={"all": "true"}).json() == []


@pytest.mark.parametrize(
    "spec",
    [
        {"provider": "fake", "name": "bad name"},
        {"provider": "fake", "workdir": "relative"},
        {"provider": "fake", "limits": {"pids": 0}},
        {"provider": "fake", "limits": {"cpus": 0}},
        {"provider": "fake", "limits": {"pids": "many"}},
        {"provider": "fake", "env": ["not", "a", "dict"]},
        {"provider": "fake", "mounts": [{"source": "/a", "target": "/b"}]},
        {"provider": "no-such-provider"},
    ],
)
def test_bad_spec_is_400(app_client: Any, spec: dict[str, Any]) -> None:
    assert_error(app_client.post(SANDBOXES, json=spec), 400, "invalid", hint=False)
    assert app_client.get(SANDBOXES, params={"all": "true"}).json() == []


@pytest.mark.parametrize(
    "body",
    [b"not json", b"{", b"[1, 2]", b'"a string"'],
)
def test_bad_json_body_is_400(app_client: Any, body: bytes) -> None:
    resp = app_client.post(SANDBOXES, content=body, headers={"content-type": "application/json"})
    assert_error(resp, 400, "invalid")


@pytest.mark.parametrize(
    "req",
    [
        {},
        {"command": 42},
        {"command": ["true"], "timeout": 0},
        {"command": ["true"], "timeout": -1},
        {"command": ["true"], "max_output": -1},
        {"command": ["true"], "env": "X=1"},
        {"command": []},
    ],
)
def test_bad_exec_body_is_400(app_client: Any, sbx: dict[str, Any], req: dict[str, Any]) -> None:
    assert_error(app_client.post(f"{SANDBOXES}/{sbx['id']}/exec", json=req), 400, "invalid")
    assert app_client.get(f"{SANDBOXES}/{sbx['id']}/runs").json() == []


def test_bad_query_is_400(app_client: Any, sbx: dict[str, Any]) -> None:
    assert_error(app_client.get(f"{SANDBOXES}/{sbx['id']}/events", params={"limit": 0}), 400, "invalid")
    assert_error(app_client.get(f"{SANDBOXES}/{sbx['id']}/files"), 400, "invalid")  # path is required


def test_bad_file_mode_is_400(app_client: Any, sbx: dict[str, Any]) -> None:
    resp = app_client.put(f"{SANDBOXES}/{sbx['id']}/files", params={"path": "a", "mode": "rwx"}, content=b"x")
    err = assert_error(resp, 400, "invalid")
    assert "octal" in err["hint"]


def test_missing_file_is_404(app_client: Any, sbx: dict[str, Any]) -> None:
    resp = app_client.get(f"{SANDBOXES}/{sbx['id']}/files", params={"path": "missing.txt"})
    assert_error(resp, 404, "not_found", hint=False)


# -- exec -----------------------------------------------------------------------------


def test_exec_round_trip(app_client: Any, sbx: dict[str, Any]) -> None:
    resp = app_client.post(f"{SANDBOXES}/{sbx['id']}/exec", json={"command": ["exit", "3"]})
    assert resp.status_code == 200  # a non-zero workload is not an HTTP error
    body = resp.json()
    assert (body["exit_code"], body["status"]) == (3, "failed")
    assert set(body) >= {"run_id", "exit_code", "stdout", "stderr", "truncated", "duration_ms", "status"}
    echo = app_client.post(f"{SANDBOXES}/box/exec", json={"command": ["echo", "hi"]}).json()
    assert (echo["stdout"], echo["exit_code"], echo["status"]) == ("hi\n", 0, "completed")
    timed = app_client.post(f"{SANDBOXES}/box/exec", json={"command": ["sleep", "9"], "timeout": 0.05}).json()
    assert (timed["exit_code"], timed["status"]) == (124, "timed_out")
    runs = app_client.get(f"{SANDBOXES}/box/runs").json()
    assert [r["exit_code"] for r in runs] == [3, 0, 124]
    events = [e["type"] for e in app_client.get(f"{SANDBOXES}/box/events").json()]
    assert events[0] == "sandbox_created"
    assert events.count("run_started") == events.count("run_finished") == 3


# -- files ----------------------------------------------------------------------------


def test_files_round_trip_binary_safe(app_client: Any, sbx: dict[str, Any]) -> None:
    url = f"{SANDBOXES}/{sbx['id']}/files"
    data = bytes(range(256)) * 4 + b"\r\n\x00end"
    put = app_client.put(url, params={"path": "dir/blob.bin", "mode": "755"}, content=data)
    assert put.status_code == 200
    assert put.json() == {"sandbox": sbx["id"], "path": "/workspace/dir/blob.bin", "size": len(data)}
    got = app_client.get(url, params={"path": "dir/blob.bin"})
    assert got.status_code == 200
    assert got.content == data
    assert got.headers["content-type"] == "application/octet-stream"
    assert got.headers["x-hutch-truncated"] == "0"
    head = app_client.get(url, params={"path": "/workspace/dir/blob.bin", "limit": 5})
    assert head.content == data[:5]
    assert head.headers["x-hutch-truncated"] == "1"


def test_empty_file_round_trip(app_client: Any, sbx: dict[str, Any]) -> None:
    url = f"{SANDBOXES}/{sbx['id']}/files"
    assert app_client.put(url, params={"path": "empty"}, content=b"").json()["size"] == 0
    got = app_client.get(url, params={"path": "empty"})
    assert (got.status_code, got.content) == (200, b"")


def test_ls(app_client: Any, sbx: dict[str, Any]) -> None:
    url = f"{SANDBOXES}/{sbx['id']}"
    for path, data in (("a.txt", b"aa"), ("sub/b.txt", b"bbb"), ("/workspace/c.txt", b"c")):
        assert app_client.put(f"{url}/files", params={"path": path}, content=data).status_code == 200
    top = app_client.get(f"{url}/ls").json()
    assert [(e["name"], e["type"]) for e in top] == [("a.txt", "file"), ("c.txt", "file"), ("sub", "dir")]
    assert {e["name"]: e["size"] for e in top}["a.txt"] == 2
    assert set(top[0]) == {"name", "type", "size", "mode", "mtime"}
    sub = app_client.get(f"{url}/ls", params={"path": "/workspace/sub"}).json()
    assert [(e["name"], e["size"]) for e in sub] == [("b.txt", 3)]


# -- openapi --------------------------------------------------------------------------


def test_openapi_lists_the_routes(app_client: Any) -> None:
    resp = app_client.get("/openapi.json")
    assert resp.status_code == 200
    spec = resp.json()
    assert spec["info"]["title"] == "hutch"
    paths = spec["paths"]
    expected = {
        "/v1/health": {"get"},
        "/v1/doctor": {"get"},
        "/v1/shutdown": {"post"},
        "/v1/sandboxes": {"get", "post"},
        "/v1/sandboxes/{ref}": {"get", "delete"},
        "/v1/sandboxes/{ref}/exec": {"post"},
        "/v1/sandboxes/{ref}/runs": {"get"},
        "/v1/sandboxes/{ref}/events": {"get"},
        "/v1/sandboxes/{ref}/files": {"get", "put"},
        "/v1/sandboxes/{ref}/ls": {"get"},
    }
    for path, methods in expected.items():
        assert path in paths, path
        assert methods <= set(paths[path]), path
    assert {"SandboxSpec", "SandboxRecord", "ExecRequest", "ExecResult"} <= set(spec["components"]["schemas"])


def test_no_interactive_docs(app_client: Any) -> None:
    assert app_client.get("/docs").status_code == 404


def test_unknown_route_uses_the_error_shape(app_client: Any) -> None:
    # e.g. a newer CLI talking to an older daemon: the client must get a kind, not "unknown error"
    assert_error(app_client.get("/v1/no-such-route"), 404, "not_found", hint=False)


def test_wrong_method_uses_the_error_shape(app_client: Any) -> None:
    resp = app_client.patch(SANDBOXES, json={})
    assert resp.status_code == 405
    body = resp.json()
    assert set(body) == {"error"}
    assert body["error"]["kind"] in {"invalid", "not_found"}
    assert body["error"]["message"]
