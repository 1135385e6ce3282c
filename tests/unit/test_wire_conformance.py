"""What the daemon really sends is what hutch.wire says: every route of the app is called on
the fake provider and each JSON answer (and each NDJSON frame, and each attach message) is
validated against its wire type, unknown keys refused. The claim reports (inventory,
cleanup) need a provider with claims: tests/integration/test_unikraft.py checks those."""

from __future__ import annotations

import io
import json
import string
import tarfile
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from hutch import pki, wire
from hutch.client import transfer
from hutch.wire.build import exec_request, run_once_request, sandbox_spec
from hutch.wire.pydantic import adapter
from hutch.wire.routes import ROUTES, Route

CLAIMED_ONLY = {("GET", "/v1/providers/{name}/inventory"), ("POST", "/v1/cleanup")}
# a commit needs a sandbox made from a stored image (the local provider): tests/integration/test_commit.py checks its answer
IMAGE_SANDBOX_ONLY = {("POST", "/v1/images/commit")}
REGISTRY_ONLY = {("POST", "/v1/images/pull")}  # needs a registry: tests/integration/test_images.py checks its frames
# answered by a cluster gateway only (hutch serve --cluster: tests/integration/test_cluster.py); here each must be an error
CLUSTER_ONLY = {("GET", "/v1/cluster"), ("GET", "/v1/cluster/nodes"), ("POST", "/v1/cluster/nodes/{name}/drain")}


class Checked:
    """A client of the app that validates every answer against the route table."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.answered: set[tuple[str, str]] = set()

    def route(self, method: str, template: str) -> Route:
        return next(r for r in ROUTES if (r.method, r.path) == (method, template))

    def call(self, method: str, template: str, *, ok: bool = True, **kw: Any) -> Any:
        names = {k for _, k, _, _ in string.Formatter().parse(template) if k}
        path = template.format(**{k: kw.pop(k) for k in names})
        route = self.route(method, template)
        resp = self.client.request(method, path, **kw)
        if not ok:
            assert resp.status_code >= 400, resp.text
            return adapter(wire.Error).validate_python(resp.json())
        assert resp.status_code == route.status, (method, path, resp.status_code, resp.text)
        self.answered.add((method, template))
        if route.response is None and route.stream is not None:  # NDJSON only (hutch run)
            return [adapter(route.stream).validate_python(json.loads(line)) for line in resp.text.splitlines()]
        if route.response is None:
            return resp.content
        if kw.get("params", {}).get("stream"):
            return [adapter(route.stream).validate_python(json.loads(line)) for line in resp.text.splitlines()]
        return adapter(route.response).validate_python(resp.json())


def test_every_answer_of_the_daemon_is_its_wire_body(app_client: Any, settings: Any, tmp_path: Path) -> None:
    c = Checked(app_client)
    c.call("GET", "/v1/health")
    c.call("GET", "/v1/doctor")
    c.call("GET", "/v1/credentials")
    spec = sandbox_spec(settings, name="w1", env={"A": "1"}, labels={"k": "v"}, ttl="1h", idle_timeout=600)
    rec = c.call("POST", "/v1/sandboxes", json=spec | {"require_approval": ["exec:rm *"]})
    sid = rec["id"]
    c.call("GET", "/v1/sandboxes")
    c.call("GET", "/v1/sandboxes/{ref}", ref=sid)
    c.call("GET", "/v1/sandboxes/{ref}/status", ref=sid)
    c.call(
        "POST", "/v1/sandboxes/{ref}/policy", ref=sid, json={"mode": "none"}
    )  # the fake has no network: a change that changes nothing
    c.call("POST", "/v1/sandboxes/{ref}/labels", ref=sid, json={"set": {"x": "y"}, "remove": ["k"]})
    c.call("POST", "/v1/sandboxes/{ref}/keepalive", ref=sid, json={"ttl": "2h"})
    c.call("POST", "/v1/sandboxes/{ref}/pause", ref=sid)
    c.call("POST", "/v1/sandboxes/{ref}/resume", ref=sid)

    # runs: foreground, streamed, background, and what follows them
    result = c.call("POST", "/v1/sandboxes/{ref}/exec", ref=sid, json=exec_request("echo hi; echo err >&2", stdin="in"))
    assert result["stdout"] == "hi\n" and "id" not in result
    frames = c.call("POST", "/v1/sandboxes/{ref}/exec", ref=sid, json=exec_request(["echo", "x"]), params={"stream": True})
    assert frames[0]["type"] == "run" and frames[-1]["type"] == "exit"
    run = c.call("POST", "/v1/sandboxes/{ref}/exec", ref=sid, json=exec_request("sleep 30", background=True))
    assert run["status"] == "running"
    c.call("GET", "/v1/sandboxes/{ref}/ps", ref=sid)
    c.call("POST", "/v1/runs/{run_id}/kill", run_id=run["id"], json={"signal": "KILL"})
    c.call("POST", "/v1/runs/{run_id}/wait", run_id=run["id"], params={"timeout": 60})
    c.call("GET", "/v1/runs/{run_id}", run_id=run["id"])
    c.call("GET", "/v1/sandboxes/{ref}/runs", ref=sid)
    c.call("GET", "/v1/runs/{run_id}/output", run_id=result["run_id"])
    c.call("GET", "/v1/sandboxes/{ref}/logs", ref=sid)
    gated = c.call("POST", "/v1/sandboxes/{ref}/exec", ref=sid, json=exec_request("rm x"), ok=False)
    assert gated["error"]["kind"] == "approval_required" and gated["error"]["approval_id"]

    # approvals
    apr = c.call("POST", "/v1/approvals", json={"action": "deploy", "sandbox": sid, "reason": "r", "timeout": 60})
    c.call("GET", "/v1/approvals", params={"pending": True})
    c.call("GET", "/v1/approvals/{approval_id}", approval_id=apr["id"])
    c.call("POST", "/v1/approvals/{approval_id}/decision", approval_id=apr["id"], json={"approve": True, "by": "me"})
    c.call("POST", "/v1/approvals/{approval_id}/wait", approval_id=apr["id"], params={"timeout": 5})

    # files and workspaces
    c.call("PUT", "/v1/sandboxes/{ref}/files", ref=sid, params={"path": "a.txt"}, content=b"abc")
    assert c.call("GET", "/v1/sandboxes/{ref}/files", ref=sid, params={"path": "a.txt"}) == b"abc"
    c.call("GET", "/v1/sandboxes/{ref}/ls", ref=sid)
    c.call("GET", "/v1/sandboxes/{ref}/diff", ref=sid, params={"since": 1.5, "path": "/workspace"})
    c.call("POST", "/v1/images/commit", json={"sandbox": sid, "name": "made:1"}, ok=False)  # the fake has no image
    kept = c.call("GET", "/v1/sandboxes/{ref}/manifest", ref=sid)["files"]
    root = tmp_path / "tree"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "f").write_text("data")
    plan = transfer.plan_push(root, (), kept)
    body = transfer.push_body(root, plan.manifest, plan.send)
    c.call("POST", "/v1/sandboxes/{ref}/push", ref=sid, content=body, params={"dry_run": True})
    c.call("POST", "/v1/sandboxes/{ref}/push", ref=sid, content=body)
    assert c.call("GET", "/v1/sandboxes/{ref}/pull", ref=sid)[:0] == b""
    once = run_once_request(exec_request("cat sub/f"), spec=sandbox_spec(settings), pull=True, files=[("/tmp/s", b"x", 0o600)])
    head = json.dumps(once | {"push_size": len(body)}).encode()
    framed = str(len(head)).encode() + b"\n" + head + body
    frames = c.call("POST", "/v1/run", content=framed, headers={"content-type": "application/x-hutch-run"})
    assert [f["type"] for f in frames] == ["sandbox", "pushed", "run", "stdout", "exit", "pull", "done"]
    c.call("POST", "/v1/sandboxes/{ref}/snapshots", ref=sid, json={"name": "s1"})
    c.call("GET", "/v1/snapshots")
    restored = c.call("POST", "/v1/snapshots/{name}/restore", name="s1", json={"name": "w2"})
    c.call("DELETE", "/v1/snapshots/{name}", name="s1")
    forks = c.call("POST", "/v1/sandboxes/{ref}/fork", ref=sid, json={"count": 2, "name_prefix": "kid-"})
    child = c.call("POST", "/v1/sandboxes/{ref}/subagents", ref=sid, json={"workspace": "ro", "ttl": "10m"})
    tenant = c.call("POST", "/v1/sessions", json=sandbox_spec(settings, tenant="t1"))
    c.call("GET", "/v1/tenants")
    c.call("DELETE", "/v1/tenants/{name}", name="t1")
    assert tenant["created"]

    # API keys
    made = c.call("POST", "/v1/keys", json={"name": "k1", "ttl": "30d", "scopes": ["read"], "quotas": {"memory": "1G", "rps": 5}})
    c.call("GET", "/v1/keys")
    c.call("GET", "/v1/keys/{ref}", ref="k1")
    assert c.call("POST", "/v1/keys/{ref}/rotate", ref=made["id"], json={})["key"] != made["key"]
    assert c.call("DELETE", "/v1/keys/{ref}", ref="k1")["changed"] is True
    # images: an import (a root filesystem tar), list, inspect, rm, prune
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        info = tarfile.TarInfo("etc/os-release")
        info.size = 5
        tar.addfile(info, io.BytesIO(b"ID=x\n"))
    params = {"format": "rootfs", "name": "conformance:1"}
    headers = {"content-type": "application/x-tar"}
    frames = c.call("POST", "/v1/images/import", params=params, content=layer.getvalue(), headers=headers)
    assert frames[-1]["type"] == "done"
    c.call("GET", "/v1/images")
    c.call("GET", "/v1/images/inspect", params={"ref": "conformance:1"})
    c.call("DELETE", "/v1/images", params={"ref": "conformance:1"})
    c.call("POST", "/v1/images/prune")

    # exposed ports (the fake exposes them; nothing listens inside it) and the gateway's client certificates
    exposed = c.call("POST", "/v1/sandboxes/{ref}/ports", ref=sid, json={"port": 8080})
    assert exposed["sandbox"] == sid and exposed["public"] is False
    c.call("POST", "/v1/sandboxes/{ref}/ports", ref=sid, json={"port": 9090, "public": True})
    assert [p["port"] for p in c.call("GET", "/v1/sandboxes/{ref}/ports", ref=sid)] == [8080, 9090]
    assert c.call("DELETE", "/v1/sandboxes/{ref}/ports/{port}", ref=sid, port=8080)["closed"] is True
    assert c.call("DELETE", "/v1/sandboxes/{ref}/ports/{port}", ref=sid, port=8080)["closed"] is False
    refused = c.call("POST", "/v1/gateway/certificates", json={"name": "c1"}, ok=False)  # no CA yet
    assert refused["error"]["kind"] == "invalid"
    pki.init(pki.GatewayFiles.of(settings.home), ["127.0.0.1"], "https://127.0.0.1:8443")
    issued = c.call("POST", "/v1/gateway/certificates", json={"name": "c1", "scopes": ["read"], "ttl": "1d"})
    assert issued["certificate"]["state"] == "active" and issued["bundle"]["key"]
    mine = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "c2")])
    csr = x509.CertificateSigningRequestBuilder().subject_name(subject).sign(mine, hashes.SHA256())
    pem = csr.public_bytes(serialization.Encoding.PEM).decode()
    by_csr = c.call("POST", "/v1/gateway/certificates", json={"name": "c2", "key": issued["key"]["id"], "csr": pem})
    assert "key" not in by_csr["bundle"] and by_csr["key"]["id"] == issued["key"]["id"]
    assert {r["name"] for r in c.call("GET", "/v1/gateway/certificates")} == {"c1", "c2"}
    revoked = c.call("DELETE", "/v1/gateway/certificates/{ref}", ref="c1")
    assert [(r["name"], r["state"]) for r in revoked] == [("c1", "revoked")]

    # the dashboard's one-time login link (on the unix socket: the daemon's loopback listener)
    link = c.call("POST", "/v1/ui/links")
    assert link["loopback"] and "/ui/login?token=" in link["url"]

    # events, the claim reports (refused here: the fake keeps no claims), and the teardown
    c.call("GET", "/v1/events", params={"sandbox": sid, "limit": 1000})
    c.call("GET", "/v1/sandboxes/{ref}/events", ref=sid)
    c.call("GET", "/v1/providers/{name}/inventory", name="fake", ok=False)
    c.call("POST", "/v1/cleanup", json={"provider": "fake"}, ok=False)
    c.call("POST", "/v1/pool", json={"size": 1})  # the fake keeps a pool; this service does not refill it
    assert c.call("GET", "/v1/pool")["pools"][0]["size"] == 1
    assert c.call("POST", "/v1/pool/drain", json={})["drained"] == {"host": 0}
    for ref in [restored["id"], child["id"], *(k["sandbox"] for k in forks["children"])]:
        c.call("DELETE", "/v1/sandboxes/{ref}", ref=ref)
    gone = c.call("DELETE", "/v1/sandboxes/{ref}", ref=sid)
    assert gone["existed"] and c.call("DELETE", "/v1/sandboxes/{ref}", ref=sid)["existed"] is False
    for method, template in sorted(CLUSTER_ONLY):  # this daemon is not a cluster's gateway
        err = c.call(method, template, ok=False, **({"name": "n1", "json": {}} if method == "POST" else {}))
        assert err["error"]["kind"] == "unavailable", err
    c.call("POST", "/v1/shutdown")
    missing = {(r.method, r.path) for r in ROUTES} - c.answered - CLAIMED_ONLY - IMAGE_SANDBOX_ONLY - REGISTRY_ONLY - CLUSTER_ONLY
    assert missing == set(), "routes this test does not call: add them"


def test_the_attach_messages_are_wire_frames(app_client: Any, service: Any, settings: Any) -> None:
    rec = app_client.post("/v1/sandboxes", json=sandbox_spec(settings)).json()
    frame = adapter(wire.ExecFrame)
    start = {"type": "start", **exec_request(["cat"]), "tty": False, "rows": 24, "cols": 80}
    adapter(wire.AttachMessage).validate_python(start)
    with app_client.websocket_connect(f"/v1/sandboxes/{rec['id']}/attach") as ws:
        ws.send_json(start)
        got = [frame.validate_python(ws.receive_json())]
        for message in ({"type": "stdin", "data": "aGk="}, {"type": "eof"}):
            ws.send_json(adapter(wire.AttachMessage).validate_python(message))
        while got[-1]["type"] not in ("exit", "error"):
            got.append(frame.validate_python(ws.receive_json()))
    assert got[0]["type"] == "run" and got[-1]["type"] == "exit"
    assert "".join(f["data"] for f in got if f["type"] == "stdout") == "hi"
