"""The dashboard at scale and for admins: the overview is paged on the server (only a page of
sandboxes is read, newest first), and an admin makes a key from the keys page (its secret shown
once, on the answer to the POST; CSRF and the admin scope required)."""

from __future__ import annotations

import re
import time

from fastapi.testclient import TestClient
from tests.unit.test_dashboard import bearer, gw, key, login  # noqa: F401 - gw is a fixture

from hutch.actors import OWNER, acting
from hutch.models import SandboxRecord, SandboxSpec, SandboxState, new_id
from hutch.server.ui.pages import PER_PAGE
from hutch.service import Service


def _records(service: Service, n: int, owner: str) -> list[str]:
    """``n`` sandboxes recorded as the store has them (the overview reads records, not providers)."""
    ids = []
    now = time.time()
    for i in range(n):
        rec = SandboxRecord(
            id=new_id("sbx"),
            name=f"box-{i:04d}",
            provider="fake",
            state=SandboxState.paused,  # live, with no usage to measure
            spec=SandboxSpec(name=f"box-{i:04d}", provider="fake"),
            created_at=now + i,
            updated_at=now + i,
            owner=owner,
        )
        service.store.sandboxes.insert(rec)
        ids.append(rec.id)
    return ids


def _rows(html: str) -> list[str]:
    return re.findall(r'<tr data-sandbox="([^"]+)"', html)


def test_the_overview_is_paged_on_the_server(gw: TestClient, service: Service) -> None:  # noqa: F811
    ids = _records(service, 2 * PER_PAGE + 50, "owner")
    admin = key(service, "root", admin=True)
    login(gw, admin)
    first = gw.get("/")
    assert first.status_code == 200
    assert _rows(first.text) == ids[::-1][:PER_PAGE]  # newest first, one page
    assert "1 to 100 of 250, page 1 of 3" in first.text and 'href="/?page=2"' in first.text and "newer" not in first.text
    last = gw.get("/", params={"page": 3})
    assert _rows(last.text) == ids[::-1][2 * PER_PAGE :] and "page 3 of 3" in last.text and "older" not in last.text
    assert 'data-fragment="/ui/fragments/sandboxes?page=3"' in last.text  # the live refresh keeps its page
    frag = gw.get("/ui/fragments/sandboxes", params={"page": 2})
    assert _rows(frag.text) == ids[::-1][PER_PAGE : 2 * PER_PAGE] and frag.headers["x-hutch-count"] == "250"
    assert _rows(gw.get("/", params={"page": 9}).text) == []  # past the end: an empty page, not an error
    assert gw.get("/", params={"page": "x"}).status_code == 400


def test_a_key_sees_its_own_count_and_pages(gw: TestClient, service: Service) -> None:  # noqa: F811
    alice = key(service, "alice")
    with acting(OWNER):
        alice_id = service.keys.list()[0]["id"]
    _records(service, 30, "owner")
    mine = _records(service, 5, alice_id)
    login(gw, alice)
    page = gw.get("/").text
    assert _rows(page) == mine[::-1] and 'id="sandbox-count">5<' in page and "pager" not in page


def test_an_admin_makes_a_key_shown_once(gw: TestClient, service: Service) -> None:  # noqa: F811
    admin = key(service, "root", admin=True)
    csrf = login(gw, admin)
    keys_page = gw.get("/ui/keys").text
    assert 'id="new-key-form"' in keys_page and 'name="scope" value="admin"' in keys_page
    form = {"csrf": csrf, "name": "ci-bot", "ttl": "30d", "scope": ["read", "approve"]}
    made = gw.post("/ui/keys", data=form)
    assert made.status_code == 200 and made.headers["cache-control"] == "no-store"
    secret = re.search(r'<pre id="new-key">(hk_[^<]+)</pre>', made.text)
    assert secret is not None and "shown this once" in made.text
    listed = {k["name"]: k for k in gw.get("/v1/keys", headers=bearer(admin)).json()}
    assert listed["ci-bot"]["scopes"] == ["approve", "read"] and listed["ci-bot"]["expires_at"] is not None
    assert gw.get("/v1/sandboxes", headers=bearer(secret.group(1))).status_code == 200  # the key works
    again = gw.get("/ui/keys").text
    assert "ci-bot" in again and secret.group(1) not in again  # never shown again
    # bad input: a page with the error, nothing made
    for bad, why in (({"name": "bad name!"}, "invalid key name"), ({"name": "x", "ttl": "soon"}, "invalid duration")):
        r = gw.post("/ui/keys", data={"csrf": csrf, "scope": ["read"], **bad})
        assert r.status_code == 400 and why in r.text
    assert gw.post("/ui/keys", data={"csrf": csrf, "name": "ci-bot", "scope": ["read"]}).status_code == 409


def test_making_a_key_needs_the_session_token_and_an_admin(gw: TestClient, service: Service) -> None:  # noqa: F811
    admin, alice = key(service, "root", admin=True), key(service, "alice", "read", "write")
    login(gw, admin)
    assert gw.post("/ui/keys", data={"csrf": "forged", "name": "evil", "scope": ["admin"]}).status_code == 403
    gw.cookies.clear()
    alice_csrf = login(gw, alice)
    assert gw.post("/ui/keys", data={"csrf": alice_csrf, "name": "evil", "scope": ["admin"]}).status_code == 403
    with acting(OWNER):
        assert "evil" not in {k["name"] for k in service.keys.list()}


def test_a_cluster_sandbox_shows_its_node(gw: TestClient, service: Service) -> None:  # noqa: F811
    """Where the dashboard lists sandboxes (the overview, its live fragment) and on the
    sandbox's page: the node a cluster's sandbox lives on (its record's data)."""
    now = time.time()
    placed, plain = new_id("sbx"), new_id("sbx")
    for sid, data in ((placed, {"node": "10.0.0.2", "node_sandbox": "sbx_elsewhere"}), (plain, {})):
        rec = SandboxRecord(
            id=sid,
            provider="fake",
            state=SandboxState.paused,
            spec=SandboxSpec(provider="fake"),
            created_at=now,
            updated_at=now,
            owner="owner",
            data=data,
        )
        service.store.sandboxes.insert(rec)
    login(gw, key(service, "root", admin=True))
    for page in (gw.get("/").text, gw.get("/ui/fragments/sandboxes").text):
        rows = {sid: body for sid, body in re.findall(r'<tr data-sandbox="([^"]+)"[^>]*>(.*?)</tr>', page, re.S)}
        assert '<span class="node" title="the cluster node it runs on">on 10.0.0.2</span>' in rows[placed]
        assert 'class="node"' not in rows[plain]
    facts = gw.get(f"/ui/sandboxes/{placed}").text
    assert "<dt>node</dt><dd>10.0.0.2</dd>" in facts
    assert "<dt>node</dt>" not in gw.get(f"/ui/sandboxes/{plain}").text
