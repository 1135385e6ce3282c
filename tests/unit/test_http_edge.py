"""The HTTP edge in process: idempotency keys, body limits, NUL in paths, internal errors logged,
approval waits woken by the decision, and the sync client's retries over a real unix socket."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from hutch.client import Client
from hutch.config import Settings
from hutch.errors import InternalError, InvalidError, UnavailableError
from hutch.server import app as app_module
from hutch.server.app import create_app
from hutch.server.idempotency import HEADER
from hutch.service import Service
from hutch.service import approvals as approvals_module

SANDBOXES = "/v1/sandboxes"


@pytest.fixture
def sbx(app_client: TestClient) -> dict[str, Any]:
    resp = app_client.post(SANDBOXES, json={"provider": "fake"})
    assert resp.status_code == 201, resp.text
    return dict(resp.json())


def error(resp: Any, status: int, kind: str) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    err = resp.json()["error"]
    assert err["kind"] == kind and err["message"] and err["hint"], err
    return dict(err)


# -- idempotency keys -----------------------------------------------------------------


def test_a_repeated_keyed_create_is_performed_once(app_client: TestClient) -> None:
    spec = {"provider": "fake", "labels": {"a": "b"}}
    first = app_client.post(SANDBOXES, json=spec, headers={HEADER: "k1"})
    again = app_client.post(SANDBOXES, json=spec, headers={HEADER: "k1"})
    assert first.status_code == again.status_code == 201
    assert first.json()["id"] == again.json()["id"]
    assert len(app_client.get(SANDBOXES).json()) == 1
    other = app_client.post(SANDBOXES, json=spec, headers={HEADER: "k2"})  # a fresh key is a new request
    assert other.json()["id"] != first.json()["id"]


def test_a_keyed_create_repeats_its_error_and_refuses_another_request(app_client: TestClient) -> None:
    bad = {"provider": "fake", "name": "dup"}
    assert app_client.post(SANDBOXES, json=bad).status_code == 201
    one = error(app_client.post(SANDBOXES, json=bad, headers={HEADER: "k3"}), 409, "conflict")
    assert error(app_client.post(SANDBOXES, json=bad, headers={HEADER: "k3"}), 409, "conflict") == one
    reused = error(app_client.post(SANDBOXES, json={"provider": "fake"}, headers={HEADER: "k3"}), 409, "conflict")
    assert "another request" in reused["message"]
    error(app_client.post(SANDBOXES, json={"provider": "fake"}, headers={HEADER: "has space"}), 400, "invalid")


def test_a_repeated_keyed_background_exec_starts_one_run(app_client: TestClient, sbx: dict[str, Any]) -> None:
    url = f"{SANDBOXES}/{sbx['id']}/exec"
    req = {"command": ["echo", "hi"], "background": True}
    first = app_client.post(url, json=req, headers={HEADER: "run-1"}).json()
    again = app_client.post(url, json=req, headers={HEADER: "run-1"}).json()
    assert first["id"] == again["id"]
    assert [r["id"] for r in app_client.get(f"{url[:-5]}/runs").json()] == [first["id"]]
    err = error(app_client.post(url, json={"command": ["true"]}, headers={HEADER: "fg"}), 400, "invalid")
    assert "background" in err["message"]


def test_concurrent_repeats_wait_for_the_first(service: Service) -> None:
    from hutch.server.idempotency import Idempotency

    calls = 0

    async def slow() -> str:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.05)
        return f"done {calls}"

    async def go() -> list[str]:
        once = Idempotency()
        return list(await asyncio.gather(*(once.once("k", "same", slow) for _ in range(5))))

    assert asyncio.run(go()) == ["done 1"] * 5
    assert calls == 1


def test_idempotency_keys_are_kept_per_actor() -> None:
    """The same key sent by two API keys is two requests: neither gets the other's outcome,
    and neither is told the key was used (a conflict would say so)."""
    from hutch.actors import Actor, reset_current, set_current
    from hutch.server.idempotency import Idempotency

    alice = Actor("key_a", "alice", frozenset({"read", "write"}))
    bob = Actor("key_b", "bob", frozenset({"read", "write"}))
    once = Idempotency()

    async def as_(actor: Actor, request: str, value: str) -> str:
        token = set_current(actor)
        try:

            async def call() -> str:
                return value

            return await once.once("shared-key", request, call)
        finally:
            reset_current(token)

    async def go() -> list[str]:
        return [
            await as_(alice, "create a", "alice's"),
            await as_(bob, "create b", "bob's"),  # another request with the same key: not a conflict
            await as_(alice, "create a", "alice again"),  # alice's repeat: her first outcome
            await as_(bob, "create b", "bob again"),
        ]

    assert asyncio.run(go()) == ["alice's", "bob's", "alice's", "bob's"]


# -- body limits ----------------------------------------------------------------------


@pytest.fixture
def small_limits(service: Service, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.setattr(app_module, "MAX_JSON", 1000)
    monkeypatch.setattr(app_module, "MAX_FILE", 2000)
    with TestClient(create_app(service)) as client:
        yield client


def _chunks(total: int, size: int = 500) -> Iterator[bytes]:
    for _ in range(total // size):
        yield b"x" * size


def test_a_file_over_the_limit_is_413_invalid(small_limits: TestClient) -> None:
    sid = small_limits.post(SANDBOXES, json={"provider": "fake"}).json()["id"]
    url = f"{SANDBOXES}/{sid}/files"
    assert small_limits.put(url, params={"path": "ok"}, content=b"y" * 2000).status_code == 200
    err = error(small_limits.put(url, params={"path": "big"}, content=b"y" * 2001), 413, "invalid")  # Content-Length
    assert "2000 bytes" in err["message"]
    error(small_limits.put(url, params={"path": "big"}, content=_chunks(10_000)), 413, "invalid")  # chunked: while reading
    names = [e["name"] for e in small_limits.get(f"{SANDBOXES}/{sid}/ls").json()]
    assert "ok" in names and "big" not in names


def test_a_json_body_over_the_limit_is_413_invalid(small_limits: TestClient) -> None:
    big = {"provider": "fake", "labels": {"k": "v" * 2000}}
    err = error(small_limits.post(SANDBOXES, json=big), 413, "invalid")
    assert "1000 bytes" in err["message"]
    chunked = small_limits.post(SANDBOXES, content=_chunks(5000), headers={"content-type": "application/json"})
    error(chunked, 413, "invalid")
    assert small_limits.get(SANDBOXES, params={"all": "true"}).json() == []


# -- NUL in paths, internal errors ----------------------------------------------------


def test_nul_in_a_file_path_is_invalid(app_client: TestClient, sbx: dict[str, Any]) -> None:
    url = f"{SANDBOXES}/{sbx['id']}"
    for resp in (
        app_client.get(f"{url}/files", params={"path": "a\x00b"}),
        app_client.get(f"{url}/files", params={"path": "a\x00b", "offset": 0}),
        app_client.put(f"{url}/files", params={"path": "a\x00b"}, content=b"x"),
        app_client.get(f"{url}/ls", params={"path": "/workspace/\x00"}),
    ):
        assert "NUL" in error(resp, 400, "invalid")["message"]


def test_internal_errors_are_logged_with_their_traceback(
    service: Service, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(*_: Any) -> Any:
        raise InternalError("the agent failed: boom")

    monkeypatch.setattr(service, "list_files", broken)
    with TestClient(create_app(service)) as client, caplog.at_level(logging.ERROR, logger="hutch.daemon"):
        sid = client.post(SANDBOXES, json={"provider": "fake"}).json()["id"]
        assert client.get(f"{SANDBOXES}/{sid}/ls").status_code == 500
    [record] = [r for r in caplog.records if "internal error" in r.getMessage()]
    assert f"GET /v1/sandboxes/{sid}/ls" in record.getMessage()
    assert record.exc_info is not None and "broken" in caplog.text


# -- approval waits -------------------------------------------------------------------


def test_an_approval_wait_is_woken_by_the_decision(service: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(approvals_module, "RECHECK", 3600.0)  # only the decision can end it

    async def go() -> str:
        apr = service.approvals.request("deploy")
        waiter = asyncio.ensure_future(service.approvals.wait(apr.id, None))
        while service.approvals.waiting == 0:
            await asyncio.sleep(0.01)
        service.approvals.decide(apr.id, True, by="test")
        done = await asyncio.wait_for(waiter, 60)
        assert service.approvals.waiting == 0
        return done.status.value

    assert asyncio.run(go()) == "approved"


# -- the sync client's retries --------------------------------------------------------


class FlakyDaemon:
    """A unix-socket server that drops the first ``drops`` connections unanswered."""

    def __init__(self, path: Path, drops: int) -> None:
        self.drops = drops
        self.requests: list[bytes] = []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen(8)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                head = b""
                while b"\r\n\r\n" not in head:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    head += chunk
                self.requests.append(head)
                if len(self.requests) <= self.drops:
                    continue  # closed without an answer
                body = b'{"id": "sbx_1", "ok": true}'
                head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body)
                conn.sendall(head + body)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def flaky(home: Path, settings: Settings) -> Iterator[tuple[FlakyDaemon, Client]]:
    home.mkdir(parents=True, exist_ok=True)
    server = FlakyDaemon(settings.socket_path, drops=1)
    try:
        yield server, Client(settings, autostart=False)
    finally:
        server.close()


def test_sync_client_retries_idempotent_and_keyed_requests(flaky: tuple[FlakyDaemon, Client]) -> None:
    server, client = flaky
    assert client.get("x")["id"] == "sbx_1"
    assert len(server.requests) == 2
    server.drops = 3
    assert client.create({"provider": "fake"})["id"] == "sbx_1"
    keys = {line for r in server.requests[2:] for line in r.decode().split("\r\n") if line.lower().startswith("idempotency-key")}
    assert len(server.requests) == 4 and len(keys) == 1  # the same key on the retry


def test_sync_client_does_not_resend_an_unkeyed_post(flaky: tuple[FlakyDaemon, Client]) -> None:
    server, client = flaky
    with pytest.raises(UnavailableError):
        client.exec("x", {"command": ["true"]})  # a foreground exec may have run: never sent twice
    assert len(server.requests) == 1


def test_sync_client_reads_the_answer_to_a_body_the_daemon_refused(home: Path, settings: Settings) -> None:
    """The daemon answers 413 before reading a large body, then closes: the answer is not lost."""
    home.mkdir(parents=True, exist_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(settings.socket_path))
    sock.listen(1)

    def refuse() -> None:
        conn, _ = sock.accept()
        conn.recv(65536)
        body = b'{"error": {"kind": "invalid", "message": "too large", "hint": "split it"}}'
        conn.sendall(b"HTTP/1.1 413 Content Too Large\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body))
        conn.close()

    thread = threading.Thread(target=refuse, daemon=True)
    thread.start()
    try:
        with pytest.raises(InvalidError, match="too large"):
            Client(settings, autostart=False).write_file("x", "big", b"z" * (64 << 20))
    finally:
        thread.join(30)
        sock.close()


# -- statuses and the document --------------------------------------------------------


def test_status_wait_on_a_sandbox_that_will_never_run(app_client: TestClient, service: Service) -> None:
    gone = app_client.post(SANDBOXES, json={"provider": "fake"}).json()["id"]
    app_client.delete(f"{SANDBOXES}/{gone}")
    error(app_client.get(f"{SANDBOXES}/{gone}/status", params={"wait": "true", "timeout": 5}), 404, "not_found")
    lost = app_client.post(SANDBOXES, json={"provider": "fake"}).json()["id"]
    from hutch.models import SandboxState

    service.store.sandboxes.update(lost, state=SandboxState.lost, error="its init died")
    err = error(app_client.get(f"{SANDBOXES}/{lost}/status", params={"wait": "true", "timeout": 5}), 409, "conflict")
    assert "lost" in err["message"]


def test_the_document_says_400_for_bad_input_and_names_the_errors(app_client: TestClient) -> None:
    doc = app_client.get("/openapi.json").json()
    schemas = doc["components"]["schemas"]
    assert "HTTPValidationError" not in schemas and "Error" in schemas
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            codes = set(op["responses"])
            assert "422" not in codes, (method, path)
            assert {"401", "500", "503"} <= codes, (method, path)
            if op.get("parameters") or op.get("requestBody"):
                assert "400" in codes, (method, path)
            if "{ref}" in path:
                assert {"403", "404", "409"} <= codes, (method, path)
            for code, resp in op["responses"].items():
                if code.startswith(("4", "5")):
                    assert resp["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}
    exec_ok = doc["paths"]["/v1/sandboxes/{ref}/exec"]["post"]["responses"]["200"]["content"]
    refs = {s["$ref"].rsplit("/", 1)[1] for s in exec_ok["application/json"]["schema"]["anyOf"]}
    assert refs == {"ExecResult", "RunRecord"}  # a background exec answers its run record
    assert "application/x-ndjson" in exec_ok
    assert "requestBody" in doc["paths"]["/v1/sandboxes/{ref}/files"]["put"]


def test_a_background_exec_answers_a_run_record(app_client: TestClient, sbx: dict[str, Any]) -> None:
    from hutch.models import RunRecord

    run = app_client.post(f"{SANDBOXES}/{sbx['id']}/exec", json={"command": ["echo", "x"], "background": True}).json()
    assert RunRecord.model_validate(run).background is True


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("post", "/exec", {"command": ["true"], "timeout": True}),
        ("post", "/exec", {"command": ["true"], "max_output": True}),
        ("post", "/fork", {"count": True}),
        ("post", "/keepalive", {"ttl": True}),
        ("post", "/subagents", {"ttl": True}),
    ],
)
def test_true_is_not_a_number(app_client: TestClient, sbx: dict[str, Any], method: str, path: str, body: dict[str, Any]) -> None:
    """Found by schemathesis: JSON true was taken as 1 (one second, one fork, port 1)."""
    error(app_client.request(method, f"{SANDBOXES}/{sbx['id']}{path}", json=body), 400, "invalid")


def test_true_is_not_a_timeout_a_cpu_count_or_a_port(app_client: TestClient) -> None:
    from pydantic import ValidationError

    from hutch.netpolicy import NetworkPolicy, PolicyChange

    error(app_client.post("/v1/approvals", json={"action": "deploy", "timeout": True}), 400, "invalid")
    error(app_client.post(SANDBOXES, json={"provider": "fake", "limits": {"cpus": True}}), 400, "invalid")
    with pytest.raises(ValidationError):
        NetworkPolicy.model_validate({"mode": "allowlist", "allow_hosts": ["example.com"], "ports": [True]})
    with pytest.raises(ValidationError):
        PolicyChange.model_validate({"ports": [True]})
