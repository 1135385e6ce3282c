"""The gateway for teams: a real ``hutch serve --listen 127.0.0.1:0`` over TLS with a token
file, API keys made by its owner (``hutch key`` on the unix socket), and real sandboxes:
scopes, ownership, revocation, expiry, rotation, quotas, rate limits, metrics and bad input.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.conftest import destroy_all, sweep
from tests.integration.test_remote import RemoteDaemon, _make_cert, cli

from hutch.client import AsyncClient, Client
from hutch.config import Settings
from hutch.errors import CapacityError, ConflictError, NotFoundError, PolicyError, UnauthorizedError

HEADER_TIMEOUT = 5  # the gateway's slowloris deadlines in these tests (production: 10 s and 60 s)


class Gateway:
    def __init__(self, d: RemoteDaemon, tmp: Path, cert: Path, token: str) -> None:
        self.d, self.tmp, self.cert, self.token = d, tmp, cert, token
        self.url = d.url
        self.secrets: list[str] = [token]

    def key(self, name: str, *args: str) -> tuple[str, str]:
        """A key made by the owner with ``hutch key create`` on the unix socket: (its id, its file)."""
        r = cli(self.d.home, "key", "create", "--name", name, *args, "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        made = json.loads(r.stdout)
        assert made["key"].startswith("hk_") and made["name"] == name and "hash" not in made
        self.secrets.append(made["key"])
        path = self.tmp / f"{name}.key"
        path.write_text(made["key"] + "\n")
        path.chmod(0o600)
        return made["id"], str(path)

    def settings(self, token_file: str) -> Settings:
        return Settings.load(home=self.tmp / "client", host=self.url, token_file=token_file, ca_file=str(self.cert))

    def client(self, token_file: str) -> Client:
        return Client(self.settings(token_file))

    def env(self, token_file: str) -> dict[str, str]:
        return {"HUTCH_HOST": self.url, "HUTCH_TOKEN_FILE": token_file, "HUTCH_CA_FILE": str(self.cert)}

    def raw(self, method: str, path: str, secret: str | None, **kw: Any) -> httpx.Response:
        """One request, no retries (the client's own retries are tested elsewhere)."""
        headers = {"authorization": f"Bearer {secret}"} if secret is not None else {}
        with httpx.Client(verify=ssl.create_default_context(cafile=str(self.cert)), timeout=60) as h:
            return h.request(method, self.url + path, headers=headers, **kw)

    def tls_socket(self) -> ssl.SSLSocket:
        host, port = self.url.removeprefix("https://").rsplit(":", 1)
        ctx = ssl.create_default_context(cafile=str(self.cert))
        sock = socket.create_connection((host, int(port)), timeout=60)
        return ctx.wrap_socket(sock, server_hostname=host)


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    import secrets
    import shutil
    import tempfile

    home = Path(tempfile.mkdtemp(prefix="hutch-gw-"))
    tmp = Path(tempfile.mkdtemp(prefix="hutch-gw-client-"))
    token = secrets.token_urlsafe(32)
    (tmp / "token").write_text(token + "\n")
    (tmp / "token").chmod(0o600)
    cert, key = _make_cert(tmp)
    args = ("--listen", "127.0.0.1:0", "--token-file", str(tmp / "token"), "--tls-cert", str(cert), "--tls-key", str(key))
    env = {"HUTCH_HEADER_TIMEOUT": str(HEADER_TIMEOUT), "HUTCH_BODY_TIMEOUT": str(HEADER_TIMEOUT)}
    d = RemoteDaemon(home, *args, **env).start()
    try:
        yield Gateway(d, tmp, cert, token)
    finally:
        try:
            destroy_all(home)
        finally:
            d.stop()
            sweep(home)
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.rmtree(home, ignore_errors=True)


def _refused(exc: pytest.ExceptionInfo[Any], *secrets: str) -> str:
    text = f"{exc.value} {getattr(exc.value, 'hint', '')}"
    assert all(s not in text for s in secrets)
    return text


def test_keys_scopes_and_ownership(gw: Gateway) -> None:
    alice_id, alice = gw.key("alice")
    bob_id, bob = gw.key("bob")
    _, reader = gw.key("reader", "--scope", "read")
    a, b, r, admin = gw.client(alice), gw.client(bob), gw.client(reader), gw.client(str(gw.tmp / "token"))

    sbx = a.create({"limits": {"memory": "256M"}})
    assert sbx["owner"] == alice_id
    assert a.exec(sbx["id"], {"command": ["echo", "hi"]})["stdout"] == "hi\n"
    a.snapshot_save(sbx["id"], "alice-snap")
    apr = a.request_approval({"action": "deploy", "sandbox": sbx["id"]})

    # bob: alice's things do not exist for him
    assert [s["id"] for s in b.list(include_all=True)] == []
    for call in (
        lambda: b.get(sbx["id"]),
        lambda: b.exec(sbx["id"], {"command": ["true"]}),
        lambda: b.events(sbx["id"]),
        lambda: b.runs(sbx["id"]),
        lambda: b.read_file(sbx["id"], "/etc/hostname"),
        lambda: b.approval(apr["id"]),
        lambda: b.snapshot_restore("alice-snap"),
    ):
        with pytest.raises(NotFoundError):
            call()
    run_id = a.runs(sbx["id"])[0]["id"]
    with pytest.raises(NotFoundError):
        b.run(run_id)
    gone = b.destroy(sbx["id"])
    assert gone["existed"] is False and a.get(sbx["id"])["state"] == "running"
    assert b.snapshots() == [] and b.approvals() == []
    assert all(e["sandbox_id"] != sbx["id"] for e in b.events())
    bob_box = b.create({"limits": {"memory": "256M"}})
    assert [s["id"] for s in a.list()] == [sbx["id"]] and [s["id"] for s in b.list()] == [bob_box["id"]]

    # names are each key's own: bob may use alice's names, a conflict never tells of hers
    named_a = a.create({"name": "web", "limits": {"memory": "256M"}})
    named_b = b.create({"name": "web", "limits": {"memory": "256M"}})
    assert a.get("web")["id"] == named_a["id"] and b.get("web")["id"] == named_b["id"]
    with pytest.raises(ConflictError, match="you already have a sandbox named 'web'"):
        b.create({"name": "web", "limits": {"memory": "256M"}})
    b.snapshot_save(named_b["id"], "alice-snap")  # alice has one of that name too
    assert [s["owner"] for s in b.snapshots()] == [bob_id]
    with pytest.raises(ConflictError, match="several keys have a sandbox named 'web'"):
        admin.get("web")  # the admin must say which
    assert admin.get(named_b["id"])["owner"] == bob_id
    b.snapshot_delete("alice-snap")
    assert a.snapshots()[0]["name"] == "alice-snap"  # bob's delete took his own
    a.destroy("web")
    b.destroy("web")
    # tenants too: each key's "agent" is a workspace of its own
    ta = a.create({"tenant": "agent", "limits": {"memory": "256M"}})
    a.write_file(ta["id"], "/workspace/mine", b"alice's")
    tb = b.create({"tenant": "agent", "limits": {"memory": "256M"}})
    assert b.exec(tb["id"], {"command": ["ls", "-A", "/workspace"]})["stdout"] == ""
    assert [t["owner"] for t in b.tenants()] == [bob_id]
    b.destroy(tb["id"])
    assert b.delete_tenant("agent")["existed"] is True
    a.destroy(ta["id"])
    again = a.create({"tenant": "agent", "limits": {"memory": "256M"}})
    assert a.read_file(again["id"], "/workspace/mine")[0] == b"alice's"  # hers survived bob's delete
    a.destroy(again["id"])
    a.delete_tenant("agent")

    # the actor of each request is in its events
    events = a.events(sbx["id"])
    assert {e["type"] for e in events} >= {"sandbox_created", "run_started", "run_finished", "snapshot_saved"}
    assert all(e["actor"] == alice_id for e in events if e["type"] in ("sandbox_created", "run_started", "snapshot_saved"))
    assert {e["actor"] for e in admin.events(bob_box["id"]) if e["type"] == "sandbox_created"} == {bob_id}

    # scopes: read only; keys and metrics for admins; a mount of the host's files for admins only
    assert [s["id"] for s in r.list()] == []
    for call in (lambda: r.create({}), lambda: a.keys(), lambda: a.metrics(), lambda: a.decide(apr["id"], True)):
        with pytest.raises(UnauthorizedError, match="scope") as exc:
            call()
        _refused(exc, *gw.secrets)
    # over HTTP: a valid key without the scope is 403 (naming the scope it needs and the ones it
    # has, with a hint); a missing or invalid key stays 401
    for secret, method, path, need in ((reader, "POST", "/v1/sandboxes", "write"), (alice, "POST", "/v1/keys", "admin")):
        resp = gw.raw(method, path, Path(secret).read_text().strip(), json={})
        assert resp.status_code == 403, resp.text
        err = resp.json()["error"]
        assert err["kind"] == "unauthorized" and f"needs the {need} scope" in err["message"] and err["hint"], err
        assert "(it has read" in err["message"] and "--scope " + need in err["hint"], err
        assert "www-authenticate" not in resp.headers
    for secret in (None, "hk_" + "a" * 40):
        resp = gw.raw("POST", "/v1/sandboxes", secret, json={})
        assert resp.status_code == 401 and resp.json()["error"]["kind"] == "unauthorized", resp.text
    with pytest.raises(PolicyError, match="admin"):
        a.create({"mounts": [{"source": str(gw.tmp), "target": "/mnt"}]})

    # the admin (the token file) sees and decides everything; key commands work through the gateway
    assert {s["id"] for s in admin.list()} == {sbx["id"], bob_box["id"]}
    assert admin.decide(apr["id"], True, by="admin")["status"] == "approved"
    r2 = cli(gw.tmp / "client", "key", "list", "--json", **gw.env(str(gw.tmp / "token")))
    listed = {k["name"]: k for k in json.loads(r2.stdout)}
    assert {"alice", "bob", "reader"} <= set(listed) and listed["reader"]["scopes"] == ["read"]
    r3 = cli(gw.tmp / "client", "key", "list", **gw.env(alice))
    assert r3.returncode == 1 and "unauthorized" in r3.stderr

    a.destroy(sbx["id"])
    b.destroy(bob_box["id"])
    a.snapshot_delete("alice-snap")
    _no_secret_anywhere(gw, [r2.stdout, r2.stderr, r3.stdout, r3.stderr])


def _no_secret_anywhere(gw: Gateway, outputs: list[str]) -> None:
    """No key or token in the daemon's log, the events, the store or any answer."""
    owner = gw.d.client()
    texts = [*outputs, (gw.d.home / "test-daemon.log").read_text(), json.dumps(owner.events(limit=100000))]
    for db in gw.d.home.glob("hutch.db*"):  # the store and its WAL
        texts.append(db.read_bytes().decode("latin-1"))
    texts.append(json.dumps(owner.keys()))
    for secret in gw.secrets:
        part = secret[20:] if secret.startswith("hk_") else secret  # the secret part alone, too
        assert all(secret not in t and part not in t for t in texts)


def test_images_belong_to_the_key_that_pulled_or_imported_them(gw: Gateway, registry: Any, tmp_path: Path) -> None:
    from tests.integration.image_roots import busybox_root

    from hutch.client.images import follow

    alice_id, alice = gw.key("alice-images")
    _, bob = gw.key("bob-images")
    a, b, admin = gw.client(alice), gw.client(bob), gw.client(str(gw.tmp / "token"))
    root = busybox_root(tmp_path / "root")
    mine = follow(a.image_import(f"rootfs:{root}", "team/app:1"))["image"]  # uploaded from the client: any key may
    tiny = f"{registry.host}/tiny:1"
    bobs = follow(b.image_pull(tiny))["image"]
    assert [i["id"] for i in a.images()] == [mine["id"]] and [i["id"] for i in b.images()] == [bobs["id"]]

    # bob: alice's image does not exist for him, by name, id or prefix; nor can he start from it
    for ref in ("team/app:1", mine["id"], mine["id"][7:19]):
        for call in (lambda ref=ref: b.image_inspect(ref), lambda ref=ref: b.image_rm(ref)):
            with pytest.raises(NotFoundError):
                call()
    with pytest.raises(NotFoundError):
        b.create({"provider": "local", "image": "team/app:1", "limits": {"memory": "256M"}})

    # names are per key: bob's own team/app:1 is another image, alice's stays hers
    (root / "etc/marker").write_text("bob's\n")
    other = follow(b.image_import(f"rootfs:{root}", "team/app:1"))["image"]
    assert other["id"] != mine["id"] and a.image_inspect("team/app:1")["id"] == mine["id"]
    assert b.image_inspect("team/app:1")["id"] == other["id"]
    sbx = a.create({"provider": "local", "image": "team/app:1", "limits": {"memory": "256M"}})
    assert sbx["owner"] == alice_id and a.exec(sbx["id"], {"command": ["cat", "/etc/marker"]})["stdout"] == "from the image\n"

    # the same image pulled by two keys is stored once and held by both; each rm lets go of its own
    again = follow(a.image_pull(tiny))
    assert again["image"]["id"] == bobs["id"] and again["image"]["names"] == [tiny]
    assert b.image_rm(tiny)["deleted"] is False  # alice still holds it
    assert a.image_inspect(tiny)["id"] == bobs["id"]
    with pytest.raises(NotFoundError):
        b.image_inspect(tiny)
    with pytest.raises(ConflictError):  # alice's own sandbox uses hers
        a.image_rm("team/app:1")

    # the admin sees every key's images; a key's prune does not take what another key holds
    assert {mine["id"], other["id"], bobs["id"]} <= {i["id"] for i in admin.images()}
    b.image_rm("team/app:1")
    b.image_prune()
    assert a.image_inspect("team/app:1")["id"] == mine["id"] and Path(admin.image_inspect(mine["id"])["rootfs"]).is_dir()
    # a key is never shown the daemon's host paths (an admin is)
    assert mine["rootfs"] == "" and {i["rootfs"] for i in a.images()} == {""} and a.image_inspect(mine["id"])["rootfs"] == ""
    a.destroy(sbx["id"])


def test_revoke_expiry_and_rotation_take_effect_at_once(gw: Gateway, monkeypatch: pytest.MonkeyPatch) -> None:
    carol_id, carol = gw.key("carol")
    c = gw.client(carol)
    box = c.create({"limits": {"memory": "256M"}})

    r = cli(gw.d.home, "key", "rotate", "carol", "--json")
    new = json.loads(r.stdout)["key"]
    gw.secrets.append(new)
    with pytest.raises(UnauthorizedError, match="unknown API key") as exc:
        c.list()  # the old secret, on the very next request
    _refused(exc, *gw.secrets)
    (gw.tmp / "carol.key").write_text(new + "\n")
    c = gw.client(carol)
    assert [s["id"] for s in c.list()] == [box["id"]]  # same key id: what it made is still its own
    c.destroy(box["id"])

    r = cli(gw.d.home, "key", "revoke", "carol")
    assert r.returncode == 0 and "revoked carol" in r.stdout
    with pytest.raises(UnauthorizedError, match="revoked") as exc:
        c.list()
    _refused(exc, *gw.secrets)
    assert json.loads(cli(gw.d.home, "key", "revoke", carol_id, "--json").stdout)["changed"] is False  # idempotent

    # expiry: on the gateway's clock; a client whose clock is a year ahead changes nothing
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 400 * 86400)
    made = gw.d.client().create_key({"name": "dave", "ttl": "3s"})
    monkeypatch.undo()
    gw.secrets.append(made["key"])
    assert made["expires_at"] is not None and abs(made["expires_at"] - (real() + 3)) < 60
    (gw.tmp / "dave.key").write_text(made["key"] + "\n")
    d = gw.client(str(gw.tmp / "dave.key"))
    assert d.list() == []  # valid now
    deadline = real() + 120
    while True:
        try:
            d.list()
        except UnauthorizedError as err:
            assert "expired" in err.message and made["key"] not in str(err)
            break
        assert real() < deadline, "the key did not expire"
        time.sleep(0.5)
    states = {k["name"]: k["state"] for k in gw.d.client().keys()}  # noqa: SIM118 - Client.keys() is an API call
    assert states["dave"] == "expired" and states["carol"] == "revoked"


def test_quotas_and_rates(gw: Gateway) -> None:
    _, erin = gw.key("erin", "--max-sandboxes", "1", "--max-memory", "512M")
    e = gw.client(erin)
    with pytest.raises(CapacityError, match=r"uses 0 of memory in 0 live sandboxes; 1G more would pass its quota of 512M"):
        e.create({"limits": {"memory": "1G"}})
    box = e.create({"limits": {"memory": "256M"}})
    with pytest.raises(CapacityError, match="has 1 live sandboxes, its quota is 1"):
        e.create({"limits": {"memory": "256M"}})
    e.destroy(box["id"])

    # runs per minute: the third run is refused (429, Retry-After) before it starts
    _, frank = gw.key("frank", "--runs-per-minute", "2")
    f = gw.client(frank)
    box = f.create({"limits": {"memory": "256M"}})
    secret = (gw.tmp / "frank.key").read_text().strip()
    for _ in range(2):
        assert gw.raw("POST", f"/v1/sandboxes/{box['id']}/exec", secret, json={"command": ["true"]}).status_code == 200
    resp = gw.raw("POST", f"/v1/sandboxes/{box['id']}/exec", secret, json={"command": ["true"]})
    assert resp.status_code == 429 and resp.json()["error"]["kind"] == "rate_limited"
    assert 1 <= int(resp.headers["retry-after"]) <= 31
    assert len(f.runs(box["id"])) == 2  # nothing was done
    f.destroy(box["id"])

    # requests per second: a plain HTTP client sees 429 with Retry-After ...
    gw.key("grace", "--rps", "0.5")
    secret = (gw.tmp / "grace.key").read_text().strip()
    answers = [gw.raw("GET", "/v1/sandboxes", secret) for _ in range(3)]
    assert answers[0].status_code == 200 and 429 in [a.status_code for a in answers]
    limited = next(a for a in answers if a.status_code == 429)
    assert limited.json()["error"]["kind"] == "rate_limited" and int(limited.headers["retry-after"]) in (1, 2)
    # ... which the sync and async clients wait out by themselves: every call succeeds
    _, heidi = gw.key("heidi", "--rps", "5")
    h = gw.client(heidi)
    assert all(h.list() == [] for _ in range(12))

    async def burst() -> list[Any]:
        ac = AsyncClient(gw.settings(heidi))
        try:
            return await asyncio.gather(*(ac.list() for _ in range(12)))
        finally:
            await ac.close()

    assert asyncio.run(burst()) == [[]] * 12

    # ... and so do the async client's streaming calls (hutch run through AsyncClient.run_once)
    _, ivan = gw.key("ivan", "--rps", "2")
    box = gw.client(ivan).create({"limits": {"memory": "256M"}})

    async def streamed() -> list[list[str]]:
        ac = AsyncClient(gw.settings(ivan))

        async def one(i: int) -> list[str]:
            stream = await ac.run_once({"sandbox": box["id"], "exec": {"command": ["echo", str(i)]}})
            return [f"{f.get('type')}:{f.get('data', '')}" async for f in stream]

        try:
            return await asyncio.gather(*(one(i) for i in range(6)))
        finally:
            await ac.close()

    frames = asyncio.run(streamed())
    assert all(f"stdout:{i}\n" in got for i, got in enumerate(frames)), frames
    gw.client(ivan).destroy(box["id"])
    assert _metrics(gw)[("hutch_key_rate_limited_total", (("key", "ivan"), ("limit", "rps")))] >= 1
    metrics = _metrics(gw)
    assert metrics[("hutch_key_rate_limited_total", (("key", "heidi"), ("limit", "rps")))] >= 1
    assert metrics[("hutch_key_requests_total", (("code", "200"), ("key", "heidi")))] == 24


def _metrics(gw: Gateway) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = gw.client(str(gw.tmp / "token")).metrics()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_metrics_are_prometheus_text_behind_a_scope(gw: Gateway) -> None:
    _, hal = gw.key("hal")
    _, scraper = gw.key("scraper", "--scope", "metrics")
    h = gw.client(hal)
    box = h.create({"limits": {"memory": "256M"}})
    h.exec(box["id"], {"command": ["sh", "-c", "exit 3"]})
    with pytest.raises(UnauthorizedError, match="metrics scope"):
        h.metrics()
    text = gw.client(scraper).metrics()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name in (
        "hutch_sandboxes",
        "hutch_sandboxes_created",
        "hutch_sandboxes_destroyed",
        "hutch_runs_finished",
        "hutch_exec_duration_seconds",
        "hutch_create_duration_seconds",
        "hutch_egress_decisions",
        "hutch_approvals_pending",
        "hutch_pool_size",
        "hutch_key_requests",
        "hutch_key_live_sandboxes",
        "hutch_key_memory_bytes",
        "process_resident_memory_bytes",
    ):
        assert name in families, name
    m = _metrics(gw)
    assert m[("hutch_sandboxes", (("provider", "local"), ("state", "running")))] >= 1
    assert m[("hutch_runs_finished_total", (("status", "completed"),))] >= 1
    assert m[("hutch_key_live_sandboxes", (("key", "hal"),))] == 1
    assert m[("hutch_key_memory_bytes", (("key", "hal"),))] == 256 << 20
    assert m[("hutch_key_runs_total", (("key", "hal"),))] == 1
    assert m[("hutch_create_duration_seconds_count", (("provider", "local"),))] >= 1
    h.destroy(box["id"])


def test_bad_keys_huge_bodies_and_slow_clients(gw: Gateway, tmp_path: Path) -> None:
    _, ivy = gw.key("ivy")
    good = (gw.tmp / "ivy.key").read_text().strip()
    from hutch.service import Service

    other = Service(Settings.load(home=tmp_path / "other-gateway"))  # a key of another gateway: well formed, unknown here
    foreign = other.keys.create("ivy")["key"]
    gw.secrets.append(foreign)
    cases = {
        "garbage": "not-a-key",
        "truncated": good[:-5],
        "longer": good + "x",
        "prefix only": "hk_",
        "bad id": "hk_" + "z" * 16 + good[19:],
        "another gateway's": foreign,
        "one char changed": good[:-1] + ("A" if good[-1] != "A" else "B"),
    }
    for what, secret in cases.items():
        resp = gw.raw("GET", "/v1/sandboxes", secret)
        assert resp.status_code == 401, what
        err = resp.json()["error"]
        assert err["kind"] == "unauthorized" and err["hint"], what
        assert (len(secret) < 8 or secret not in resp.text) and good not in resp.text and good[3:19] not in resp.text, what
    assert "malformed" in gw.raw("GET", "/v1/sandboxes", "hk_").json()["error"]["message"]
    assert "unknown API key" in gw.raw("GET", "/v1/sandboxes", foreign).json()["error"]["message"]

    # a huge body: without a key refused before it is read; with one, over the limit (413 invalid)
    for secret, status in ((None, 401), (good, 413)):
        with gw.tls_socket() as s:
            auth = f"authorization: Bearer {secret}\r\n" if secret else ""
            s.sendall(
                f"POST /v1/sandboxes HTTP/1.1\r\nhost: x\r\n{auth}content-type: application/json\r\n"
                f"content-length: {10 << 30}\r\n\r\n{{".encode()
            )
            head = _answer(s)
            assert head.startswith(f"HTTP/1.1 {status} "), head
            kind = "unauthorized" if status == 401 else "invalid"
            assert good not in head and f'"kind":"{kind}"' in head.replace(" ", ""), head

    # slow clients: a head that never completes, a body that stops, are cut off; others are served meanwhile
    for partial in (
        b"GET /v1/health HTTP/1.1\r\nhost: x\r\n",
        f"POST /v1/sandboxes HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {good}\r\ncontent-length: 100\r\n\r\n{{".encode(),
    ):
        with gw.tls_socket() as s:
            s.sendall(partial)
            assert gw.client(ivy).list() == []  # served while the slow one waits
            started = time.monotonic()
            data = s.recv(65536)  # the socket's own timeout (60 s) is the test's deadline
            assert data == b"" or data.startswith(b"HTTP/1.1 4"), data
            assert time.monotonic() - started < 60
    _no_secret_anywhere(gw, [])


def _answer(s: ssl.SSLSocket) -> str:
    """An answer read up to the end of its JSON body (or until the gateway closes)."""
    data = b""
    while not data.rstrip().endswith(b"}}"):
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    return data.decode()


def test_a_gateway_of_keys_only(hutch_home: Path, tmp_path: Path) -> None:
    """Without --token-file the listener takes API keys only; the owner makes them on the unix socket."""
    from tests.integration.test_remote import _run_daemon

    for d in _run_daemon(hutch_home, "--listen", "127.0.0.1:0"):
        made = d.client().create_key({"name": "kim", "scopes": ["read"]})
        (tmp_path / "kim").write_text(made["key"])
        (tmp_path / "wrong").write_text("some-token")
        settings = Settings.load(home=tmp_path / "client", host=d.url, token_file=str(tmp_path / "kim"))
        assert Client(settings).list() == []
        for token_file in (str(tmp_path / "wrong"), ""):
            with pytest.raises(UnauthorizedError):
                Client(Settings.load(home=tmp_path / "client", host=d.url, token_file=token_file)).list()
        assert "an API key required" in (hutch_home / "test-daemon.log").read_text()
