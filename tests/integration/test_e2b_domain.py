"""``E2B_DOMAIN`` mode: the official SDK with no URL variables, only ``E2B_DOMAIN``, against the
gateway's TLS listener (``hutch gateway init --name '*.e2b.localhost'``; the SDK trusts the
gateway's CA through ``SSL_CERT_FILE``). Names under ``localhost`` resolve to loopback in
the SDK's own resolver (RFC 6761; hickory, which its Rust HTTP stack uses, answers them
itself), so no resolver is changed: ``https://api.e2b.localhost:PORT`` and
``https://PORT-ID.e2b.localhost:PORT`` reach the gateway on 127.0.0.1:PORT."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from tests.conftest import destroy_all, sweep
from tests.integration.e2b_sdk import run_sdk, sdk_python
from tests.integration.test_remote import RemoteDaemon, cli

from hutch.server.e2b.auth import hutch_id

pytestmark = pytest.mark.integration
DOMAIN = "e2b.localhost"


@pytest.fixture(scope="module")
def gateway() -> Iterator[tuple[RemoteDaemon, dict[str, str], Path]]:
    python = sdk_python()
    home = Path(tempfile.mkdtemp(prefix="hutch-e2b-dom-"))
    r = cli(home, "gateway", "init", "--name", f"*.{DOMAIN}", "--name", "127.0.0.1", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    d = RemoteDaemon(home, "--listen", "127.0.0.1:0", HUTCH_E2B_DOMAIN=DOMAIN).start()
    try:
        key = d.client().create_key({"name": "alice"})
        port = urlsplit(d.url).port
        env = {
            "E2B_API_KEY": key["key"],
            "E2B_DOMAIN": f"{DOMAIN}:{port}",  # the test's port; a real gateway is on 443
            "SSL_CERT_FILE": json.loads(r.stdout)["ca"],
        }
        yield d, env, python
    finally:
        try:
            destroy_all(home)
        finally:
            d.stop()
            sweep(home)
            shutil.rmtree(home, ignore_errors=True)


def test_the_sdk_in_domain_mode_over_tls(gateway: tuple[RemoteDaemon, dict[str, str], Path]) -> None:
    d, env, python = gateway
    out = run_sdk(
        python,
        env,
        """
        import httpx
        from e2b import Sandbox
        sbx = Sandbox.create(metadata={"mode": "domain"})
        out["id"] = sbx.sandbox_id
        out["api"] = sbx.connection_config.api_url
        out["envd"] = sbx.envd_api_url
        out["run"] = sbx.commands.run("echo over-tls; echo $((6*7))").stdout
        sbx.files.write("/workspace/a.txt", "hello")
        out["read"] = sbx.files.read("/workspace/a.txt")
        out["listed"] = [s.sandbox_id for s in Sandbox.list().next_items()]
        # another port of the sandbox, by its host name PORT-ID.DOMAIN
        sbx.commands.run("python3 -m http.server 8080 --bind 127.0.0.1 --directory /workspace", background=True)
        host = sbx.get_host(8080)
        out["host"] = host
        from e2b.api.client_sync import get_transport  # the SDK's own HTTP stack: its resolver, SSL_CERT_FILE
        web = httpx.Client(transport=get_transport(sbx.connection_config))
        token = {"E2B-Traffic-Access-Token": sbx.traffic_access_token}
        got = None
        for _ in range(100):
            try:
                r = web.get(f"https://{host}/a.txt", headers=token)
                got = [r.status_code, r.text]
                if r.status_code == 200:
                    break
            except httpx.HTTPError as exc:
                got = repr(exc)
            time.sleep(0.2)
        out["port"] = got
        out["no_token"] = web.get(f"https://{host}/a.txt").status_code
        sbx.kill()
        out["killed"] = sbx.sandbox_id not in [s.sandbox_id for s in Sandbox.list().next_items()]
        """,
    )
    port = urlsplit(d.url).port
    assert out["id"].startswith("sbx-")  # DNS-safe: the id is a label of the host name
    assert out["api"] == f"https://api.{DOMAIN}:{port}"
    assert out["envd"] == f"https://49983-{out['id']}.{DOMAIN}:{port}"
    assert out["run"] == "over-tls\n42\n" and out["read"] == "hello"
    assert out["id"] in out["listed"]
    assert out["host"] == f"8080-{out['id']}.{DOMAIN}:{port}"
    assert out["port"] == [200, "hello"] and out["no_token"] == 401
    assert out["killed"]
    # the hutch side: an ordinary sandbox of alice's, with its run
    owner = d.client()
    rec = owner.get(hutch_id(out["id"]))
    assert rec["spec"]["labels"] == {"mode": "domain"} and rec["state"] in ("destroyed", "destroying")
    assert ["/bin/bash", "-l", "-c", "echo over-tls; echo $((6*7))"] in [r["command"] for r in owner.runs(rec["id"])]
