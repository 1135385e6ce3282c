"""Mutual TLS with a bootstrap, and exposed ports through the gateway: a real daemon with
``hutch serve --listen 127.0.0.1:0`` over TLS, certificates from ``hutch gateway init`` /
``issue``, a client configured by ``hutch login``, and real sandboxes."""

from __future__ import annotations

import http.client
import json
import shutil
import ssl
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from tests.conftest import destroy_all, sweep
from tests.integration.test_previews import start_server
from tests.integration.test_remote import RemoteDaemon, cli

from hutch import pki

HEADER_TIMEOUT = 3  # the previews test's header deadline (production: 10 s)


@pytest.fixture
def tmp() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="hutch-gwtls-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _gateway(home: Path, *args: str, **env: str) -> Iterator[RemoteDaemon]:
    d = RemoteDaemon(home, "--listen", "127.0.0.1:0", *args, **env).start()
    try:
        yield d
    finally:
        try:
            destroy_all(home)
        finally:
            d.stop()
            sweep(home)


def _json(r: object) -> dict:  # type: ignore[type-arg]
    assert getattr(r, "returncode", 1) == 0, getattr(r, "stderr", "")
    return json.loads(getattr(r, "stdout", ""))  # type: ignore[no-any-return]


def _csr(name: str) -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    csr = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
    return csr.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM).decode()


def test_mutual_tls_bootstrap_required_revoked_wrong_ca_and_names(hutch_home: Path, tmp: Path) -> None:
    r = cli(hutch_home, "gateway", "init", "--name", "127.0.0.1", "--json")
    init = _json(r)
    assert init["ca_created"] and (hutch_home / "gateway" / "ca.key").stat().st_mode & 0o077 == 0
    for d in _gateway(hutch_home, "--require-client-cert"):
        assert d.url.startswith("https://127.0.0.1:")
        # issue (the owner, over the unix socket), then log in on a client of its own
        issued = _json(cli(hutch_home, "gateway", "issue", "alice", "--url", d.url, "--out", str(tmp / "alice.json"), "--json"))
        assert issued["key"]["name"] == "alice" and (tmp / "alice.json").stat().st_mode & 0o077 == 0
        client = tmp / "client"
        login = _json(cli(client, "login", str(tmp / "alice.json"), "--json"))
        assert login["profile"] == "alice" and Path(login["files"]["key_file"]).stat().st_mode & 0o777 == 0o600
        assert "[profiles.alice]" in (client / "config.toml").read_text()
        made = _json(cli(client, "--profile", "alice", "create", "--json"))
        listed = _json(cli(client, "--profile", "alice", "list", "--json"))
        assert [s["id"] for s in listed] == [made["id"]]
        # the request acted as alice's key: its events say so
        created = [e for e in d.client().events(made["id"]) if e["type"] == "sandbox_created"]
        assert created and created[0].get("actor") == issued["key"]["id"]
        # required: no certificate, only the CA -> refused with a hint (a bearer key alone does not do)
        env = {"HUTCH_HOST": d.url, "HUTCH_CA_FILE": login["files"]["ca_file"]}
        r = cli(tmp / "nocert", "list", "--json", **env)
        assert r.returncode == 1 and json.loads(r.stdout)["error"]["kind"] == "unauthorized"
        assert "client certificate" in json.loads(r.stdout)["error"]["message"]
        # a certificate of another CA: the handshake refuses it
        other = pki.GatewayFiles(tmp / "other")
        pki.init(other, ["127.0.0.1"], d.url)
        stray = pki.issue_client(other, "alice", "key_0000000000000000", 3600)
        assert stray.key is not None
        (tmp / "stray.pem").write_bytes(pki.cert_pem(stray.cert))
        (tmp / "stray.key").write_bytes(pki.key_pem(stray.key))
        r = cli(
            tmp / "stray", "list", "--json", **env, HUTCH_CERT_FILE=str(tmp / "stray.pem"), HUTCH_KEY_FILE=str(tmp / "stray.key")
        )
        assert r.returncode == 1 and json.loads(r.stdout)["error"]["kind"] == "unavailable"
        assert "refused this client certificate" in json.loads(r.stdout)["error"]["hint"], r.stdout
        # the gateway's certificate is for 127.0.0.1 only: reached as localhost it is refused, with a hint
        localhost = d.url.replace("127.0.0.1", "localhost")
        r = cli(client, "--profile", "alice", "list", "--json", HUTCH_HOST=localhost)
        assert r.returncode == 1 and "gateway init --name localhost" in json.loads(r.stdout)["error"]["hint"]
        # a CSR for another name is refused; one for the name is signed, and the bundle has no key
        (tmp / "m.csr").write_text(_csr("mallory"))
        r = cli(hutch_home, "gateway", "issue", "bob", "--csr", str(tmp / "m.csr"), "--url", d.url, "--json")
        assert r.returncode == 2 and "is for mallory, not bob" in json.loads(r.stdout)["error"]["message"]
        (tmp / "b.csr").write_text(_csr("bob"))
        r = cli(hutch_home, "gateway", "issue", "bob", "--csr", str(tmp / "b.csr"), "--url", d.url, "-o", str(tmp / "bob.json"))
        assert r.returncode == 0 and "key" not in json.loads((tmp / "bob.json").read_text())
        # revoked: refused on the next request, no restart
        _json(cli(hutch_home, "gateway", "revoke", "alice", "--json"))
        r = cli(client, "--profile", "alice", "list", "--json")
        assert r.returncode == 1 and "revoked" in json.loads(r.stdout)["error"]["message"]
        states = {c["name"]: c["state"] for c in _json(cli(hutch_home, "gateway", "certs", "--json"))}
        assert states == {"alice": "revoked", "bob": "active"}


def test_an_expired_certificate_is_refused_on_the_next_request(hutch_home: Path, tmp: Path) -> None:
    """A client certificate of the shortest validity (1 minute), bound to a key that does not
    expire: accepted, then refused once its time is over (by the handshake, which checks the
    certificate's dates against the gateway's clock); the key itself still works."""
    _json(cli(hutch_home, "gateway", "init", "--name", "127.0.0.1", "--json"))
    for d in _gateway(hutch_home):
        key = _json(cli(hutch_home, "key", "create", "--name", "carol", "--json"))
        issued = _json(
            cli(hutch_home, "gateway", "issue", "carol-laptop", "--key", "carol", "--ttl", "1m", "--url", d.url,
                "--out", str(tmp / "carol.json"), "--json")
        )  # fmt: skip
        assert issued["key"]["id"] == key["id"]
        client = tmp / "client"
        _json(cli(client, "login", str(tmp / "carol.json"), "--json"))
        assert _json(cli(client, "--profile", "carol-laptop", "list", "--json")) == []
        expires = issued["certificate"]["expires_at"]
        deadline = expires + 180  # a loaded machine: generous; the condition is what is waited for
        while True:
            r = cli(client, "--profile", "carol-laptop", "list", "--json")
            if r.returncode != 0:
                break
            assert time.time() < deadline, "the certificate was still accepted long after it expired"
            time.sleep(2)
        assert time.time() >= expires  # refused only once it had expired
        err = json.loads(r.stdout)["error"]
        assert err["kind"] in ("unavailable", "unauthorized") and "expired" in f"{err['message']} {err.get('hint', '')}", err
        states = {c["name"]: c["state"] for c in _json(cli(hutch_home, "gateway", "certs", "--json"))}
        assert states["carol-laptop"] == "expired"
        env = {"HUTCH_HOST": d.url, "HUTCH_CA_FILE": str(hutch_home / "gateway" / "ca.pem"), "HUTCH_TOKEN": key["key"]}
        assert _json(cli(tmp / "bearer", "list", "--json", **env)) == []  # the key was not what expired


def _get(url: str, ctx: ssl.SSLContext, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    u = urlsplit(url)
    conn = http.client.HTTPSConnection(u.hostname or "", u.port, timeout=60, context=ctx)
    try:
        conn.request("GET", u.path + (f"?{u.query}" if u.query else ""), headers=headers or {})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def test_exposed_ports_through_the_gateway_path_and_host_routes(hutch_home: Path, tmp: Path) -> None:
    from websockets.sync.client import connect

    _json(cli(hutch_home, "gateway", "init", "--name", "127.0.0.1", "--json"))
    ca = str(hutch_home / "gateway" / "ca.pem")
    for d in _gateway(hutch_home, "--preview-domain", "preview.test", HUTCH_HEADER_TIMEOUT=str(HEADER_TIMEOUT)):
        c = d.client()
        sid = c.create({})["id"]
        start_server(d, sid, 8000)
        doc = c.expose(sid, 8000)
        path_url = next(u for u in doc["urls"] if "/p/" in u)
        host_url = doc["url"]
        assert path_url.startswith(f"{d.url}/p/{sid}/8000/?hutch_preview=")
        dns = sid.replace("_", "-")
        assert host_url.startswith(f"https://8000-{dns}.preview.test:{urlsplit(d.url).port}/?hutch_preview=")
        ctx = ssl.create_default_context(cafile=ca)
        bare = path_url.split("?")[0]
        assert _get(bare + "x", ctx)[0] == 401  # private: no token, no credentials
        status, headers, _ = _get(path_url, ctx)
        assert status == 303 and headers["location"] == f"/p/{sid}/8000/"
        assert f"Path=/p/{sid}/8000/" in headers["set-cookie"] and "Secure" in headers["set-cookie"]
        cookie = headers["set-cookie"].split(";")[0]
        status, _, body = _get(bare + "a/b?x=1", ctx, {"Cookie": cookie})
        assert status == 200 and body.startswith(b"path=/a/b?x=1 ")  # the prefix is removed
        # the host route: the wildcard name, given as the Host header to the gateway's address
        token = host_url.split("hutch_preview=")[1]
        host = f"8000-{dns}.preview.test"
        status, _, body = _get(f"{d.url}/z?hutch_preview={token}", ctx, {"Host": host})
        assert status == 303
        status, _, body = _get(f"{d.url}/z", ctx, {"Host": host, "Cookie": cookie})  # one cookie per port, whichever route
        assert status == 200 and body.startswith(b"path=/z ")
        # a WebSocket through the path route, with the token
        ws_url = path_url.replace("https://", "wss://").replace("/?", "/ws?")
        with connect(ws_url, ssl=ctx, open_timeout=60) as ws:
            ws.send("over tls")
            assert ws.recv(timeout=60) == "echo:over tls"
            time.sleep(HEADER_TIMEOUT + 2)  # the head's deadline is over long since: it no longer applies
            ws.send("later")
            assert ws.recv(timeout=60) == "echo:later"
        # .. in the path: refused; nothing listening: a 502 page at once
        assert _get(f"{d.url}/p/{sid}/8000/%2e%2e/%2e%2e/v1/sandboxes", ctx, {"Cookie": cookie})[0] == 400
        empty = c.expose(sid, 9000, public=True)
        status, _, body = _get(empty["urls"][-1], ctx)
        assert status == 502 and b"nothing listens" in body
        assert _get(f"{d.url}/p/{sid}/7000/", ctx)[0] == 404
        # an app's redirects stay under the path prefix: a path, and a URL of the app itself
        # (a loopback name, or the Host it was sent); a URL elsewhere is left alone
        for asked, to in (
            ("redirect", f"/p/{sid}/8000/target?x=1"),
            ("redirect-abs", f"/p/{sid}/8000/abs"),
            ("redirect-away", "https://example.com/x"),
        ):
            status, headers, _ = _get(bare + asked, ctx, {"Cookie": cookie})
            assert status == 302 and headers["location"] == to, (asked, headers)
        status, headers, _ = _get(f"{d.url}/redirect", ctx, {"Host": host, "Cookie": cookie})
        assert status == 302 and headers["location"] == "/target?x=1"  # no prefix on the host route

        # a restart of the gateway: the exposures are there again, the links given before still open them
        d.stop()
        d.start()
        ports = {p["port"]: p for p in d.client().ports(sid)}
        assert set(ports) == {8000, 9000} and ports[9000]["public"] is True
        again = next(u for u in ports[8000]["urls"] if "/p/" in u)
        assert again.split("hutch_preview=")[1] == path_url.split("hutch_preview=")[1]  # the same token
        moved = f"{d.url}/p/{sid}/8000/"
        assert _get(moved + "after", ctx)[0] == 401
        status, _, body = _get(moved + "after", ctx, {"Cookie": cookie})
        assert status == 200 and body.startswith(b"path=/after ")
        c = d.client()
        c.unexpose(sid, 9000)
        assert [p["port"] for p in c.ports(sid)] == [8000]
