"""The Unikraft Cloud connection rules, against the spec-built test server (no sandboxes
behind it) on loopback: token order, metro and URL rules, redirects, caps, timeouts, and
the token never leaking into errors."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from hutch.errors import CapacityError, HutchError, InvalidError, UnauthorizedError, UnavailableError
from hutch.providers.unikraft import api as ukapi
from hutch.providers.unikraft import split_marker, wrap
from hutch.testing.unikraft.server import serve

TOKEN = "secret-token-0123456789"
ACCOUNT = "11111111-2222-3333-4444-555555555555"


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for var in (*ukapi.TOKEN_VARS, "UKC_METRO", "HUTCH_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HUTCH_HOME", str(tmp_path))
    return tmp_path


@pytest.fixture
def ts() -> Iterator[Any]:
    server = serve({TOKEN: ACCOUNT}, backend="none")
    yield server
    server.shutdown()


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_token_order_and_config_file(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UnauthorizedError) as info:
        ukapi.resolve_token()
    assert all(v in (info.value.hint or "") for v in ukapi.TOKEN_VARS)
    (clean_env / "config.toml").write_text('unikraft_token = "from-file"\n')
    assert ukapi.resolve_token() == ("from-file", "config file (unikraft_token)")
    for i, var in enumerate(reversed(ukapi.TOKEN_VARS)):
        monkeypatch.setenv(var, f"t{i}")
        assert ukapi.resolve_token() == (f"t{i}", var)  # each earlier variable wins over the later ones


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("fra", "https://api.fra.unikraft.cloud"),
        ("SFO", "https://api.sfo.unikraft.cloud"),
        ("https://api.dal.unikraft.cloud", "https://api.dal.unikraft.cloud"),
        ("https://api.dal.unikraft.cloud/v1/", "https://api.dal.unikraft.cloud"),
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("http://localhost:9", "http://localhost:9"),
        ("http://[::1]:9/v1", "http://[::1]:9"),
    ],
)
def test_endpoints_accepted(clean_env: Path, value: str, expected: str) -> None:
    assert ukapi.resolve_endpoint(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        "mars",
        "http://api.fra.unikraft.cloud",
        "https://user:pw@api.fra.unikraft.cloud",
        "https://api.fra.unikraft.cloud/v1/instances",
        "https://api.fra.unikraft.cloud/?x=1",
        "https://api.fra.unikraft.cloud/#frag",
        "ftp://api.fra.unikraft.cloud",
        "https://",
        "http://10.0.0.1:80",
    ],
)
def test_endpoints_refused(clean_env: Path, value: str) -> None:
    with pytest.raises(InvalidError):
        ukapi.resolve_endpoint(value)


def test_default_metro_from_env_then_config(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert ukapi.resolve_endpoint(None) == "https://api.fra.unikraft.cloud"
    (clean_env / "config.toml").write_text('unikraft_metro = "sin"\n')
    assert ukapi.resolve_endpoint(None) == "https://api.sin.unikraft.cloud"
    monkeypatch.setenv("UKC_METRO", "was")
    assert ukapi.resolve_endpoint(None) == "https://api.was.unikraft.cloud"


def test_quotas_and_bad_token_never_echo_the_token(ts: Any) -> None:
    async def go() -> None:
        good = ukapi.Api(ts.url, TOKEN)
        reply = await good.call("GET", "/v1/users/quotas", "quotas")
        assert reply.data["quotas"][0]["uuid"] == ACCOUNT
        await good.close()
        bad = ukapi.Api(ts.url, "wrong-" + TOKEN)
        with pytest.raises(UnauthorizedError) as info:
            await bad.call("GET", "/v1/users/quotas", "quotas")
        assert TOKEN not in str(info.value.to_dict())
        await bad.close()

    run(go())


def test_redirect_rules(ts: Any) -> None:
    async def go() -> None:
        api = ukapi.Api(ts.url, TOKEN)
        ts.state.faults["redirect"] = {"status": 307, "location": "/v1/users/quotas"}
        assert (await api.call("GET", "/v1/whatever", "x")).data["quotas"]  # same origin, /v1/: followed
        for status, location, method, words in [
            (307, "http://127.0.0.2:1/v1/users/quotas", "GET", "another origin"),
            (307, "/admin", "GET", "outside /v1/"),
            (302, "/v1/instances", "POST", "change the method"),
            (301, "/v1/instances", "DELETE", "change the method"),
        ]:
            ts.state.faults["redirect"] = {"status": status, "location": location}
            with pytest.raises(UnavailableError) as info:
                await api.request(method, "/v1/instances", body=[] if method != "GET" else None)
            assert words in info.value.message
        assert ts.state.creates == 0
        ts.state.faults["redirect"] = {"status": 308, "location": "/v1/instances"}
        reply = await api.request("POST", "/v1/x", body={"name": "n", "image": "nginx:latest"})
        assert reply.status == 200 and ts.state.log[-1]["method"] == "POST"  # 308 keeps the method
        await api.close()

    run(go())


class Huge(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path.startswith("/slow"):
            import time

            time.sleep(3)
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"x": "' + b"a" * (ukapi.MAX_BODY + 10) + b'"}')

    def log_message(self, *args: Any) -> None:
        return


class Quiet(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        return  # the client hangs up on purpose (cap, timeout)


def test_answers_are_capped_and_timed(monkeypatch: pytest.MonkeyPatch) -> None:
    srv = Quiet(("127.0.0.1", 0), Huge)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}"

    async def go() -> None:
        api = ukapi.Api(url, TOKEN, timeout=1.0)
        with pytest.raises(UnavailableError, match="larger than"):
            await api.request("GET", "/v1/big")
        with pytest.raises(UnavailableError, match="in time"):
            await api.request("GET", "/slow")
        await api.close()

    try:
        run(go())
    finally:
        srv.shutdown()


def test_failures_map_to_kinds(ts: Any) -> None:
    api = ukapi.Api(ts.url, TOKEN)
    kinds = {401: UnauthorizedError, 429: CapacityError, 503: UnavailableError, 400: InvalidError}
    for status, cls in kinds.items():
        err = api.fail(ukapi.Reply(status, {"status": "error", "message": f"echo {TOKEN}"}, b""), "doing")
        assert isinstance(err, cls) and TOKEN not in err.message
    assert isinstance(api.fail(ukapi.Reply(404, None, b""), "x"), HutchError)
    run(api.close())


def test_exit_marker_round_trip() -> None:
    line = wrap(["echo", "a b", "it's"], "abcd", stdin=False)
    assert line.startswith("echo 'a b' ") and "</dev/null" in line and "hutch-exit-abcd" in line
    assert split_marker(b"oops\nhutch-exit-abcd:3\n", "abcd") == (b"oops", 3)
    assert split_marker(b"no newline at end\nhutch-exit-abcd:0\n", "abcd") == (b"no newline at end", 0)
    assert split_marker(b"fake\nhutch-exit-zzzz:0\n", "abcd") == (b"fake\nhutch-exit-zzzz:0\n", None)


def test_claim_updates_check_the_revision(tmp_path: Path) -> None:
    from hutch.errors import ConflictError
    from hutch.store import Store

    store = Store(tmp_path / "db")
    claim = store.claims.insert(
        {
            "id": "clm_1",
            "provider": "unikraft",
            "name": "hutch-x",
            "endpoint": "e",
            "account": "a",
            "request_hash": "h",
            "state": "intent",
        }
    )
    moved = store.claims.update("clm_1", claim["revision"], state="ready", resource_id="u")
    assert moved["revision"] == claim["revision"] + 1
    with pytest.raises(ConflictError):
        store.claims.update("clm_1", claim["revision"], state="delete_attempt")  # a stale writer loses
    with pytest.raises(ConflictError):
        store.claims.delete("clm_1", claim["revision"])
    store.claims.delete("clm_1", moved["revision"])
    assert store.claims.all() == []


def test_concurrent_destroys_of_one_claim_send_one_delete(tmp_path: Path, ts: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two Services (as two processes would) on one store: the claim lock serializes them."""
    from hutch.config import Settings
    from hutch.models import SandboxSpec
    from hutch.service import Service

    monkeypatch.setenv("HUTCH_UNIKRAFT_TOKEN", TOKEN)

    async def go() -> list[dict[str, Any]]:
        a, b = (Service(Settings.load(home=tmp_path)) for _ in range(2))
        prov_a, prov_b = a.provider("unikraft"), b.provider("unikraft")
        spec = SandboxSpec(provider="unikraft", provider_options={"metro": ts.url})
        from hutch.models import SandboxRecord, SandboxState

        rec = SandboxRecord(
            id="sbx_test1", provider="unikraft", state=SandboxState.creating, spec=spec, created_at=0, updated_at=0
        )
        a.store.sandboxes.insert(rec)
        prov_a.wait_ready = _ready  # type: ignore[attr-defined]
        await a.claims.create(rec, prov_a)
        claim = a.store.claims.of_sandbox(rec.id)
        assert claim is not None
        results = await asyncio.gather(a.claims.destroy_claim(claim["id"], prov_a), b.claims.destroy_claim(claim["id"], prov_b))
        await a.close()
        await b.close()
        return list(results)

    results = run(go())
    assert sorted(r["message"] for r in results) == ["deleted, absence proven", "no claim (already gone)"]
    deletes = [e for e in ts.state.log if e["method"] == "DELETE"]
    assert len(deletes) == 1 and ts.state.instances == {}


def test_every_step_of_a_claim_reaches_the_services_hook(tmp_path: Path, ts: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The on_step seam (what hutch.testing.crash kills the daemon at): every step, in order,
    from the Service and from the provider's wire; nothing else in production."""
    from hutch.config import Settings
    from hutch.models import SandboxRecord, SandboxSpec, SandboxState
    from hutch.service import Service
    from hutch.service.claims import STEPS

    monkeypatch.setenv("HUTCH_UNIKRAFT_TOKEN", TOKEN)
    steps: list[str] = []

    async def go() -> None:
        svc = Service(Settings.load(home=tmp_path), on_step=steps.append)
        provider = svc.provider("unikraft")
        provider.wait_ready = _ready  # type: ignore[attr-defined]
        spec = SandboxSpec(provider="unikraft", provider_options={"metro": ts.url})
        rec = SandboxRecord(
            id="sbx_steps", provider="unikraft", state=SandboxState.creating, spec=spec, created_at=0, updated_at=0
        )
        svc.store.sandboxes.insert(rec)
        await svc.claims.create(rec, provider)
        claim = svc.store.claims.of_sandbox(rec.id)
        assert claim is not None
        await svc.claims.destroy_claim(claim["id"], provider)
        await svc.close()

    run(go())
    assert tuple(steps) == STEPS


async def _ready(endpoint: str, uuid: str, workdir: str | None = None, *, account: str) -> None:
    return None
